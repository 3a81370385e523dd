//! `dtr`: static DTR ([`crate::dtr`]): one pass over the traced order that evicts the
//! cheapest-to-recompute tensors whenever resident bytes pass a threshold; with a budget,
//! the threshold is the budget, lowered by the arena's overshoot until the device bytes fit.

use super::{original, Name, Scheduled, Strategy};
use crate::context::Context;
use crate::device;
use crate::error::{PlanError, Retry};
use crate::options::{BudgetOf, PlanOptions, RunConfig};
use crate::sublinear::evaluate::fitness_of;
use sgc_ir::OpId;

pub struct Dtr;

impl Strategy for Dtr {
    fn name(&self) -> Name {
        Name::Dtr
    }

    fn about(&self) -> &'static str {
        "static DTR: one pass that evicts the cheapest-to-recompute tensors"
    }

    fn reads(&self) -> &'static [&'static str] {
        &["eviction_threshold", "evictee_min_size", "sqrt_sampling"]
    }

    fn searches_budget(&self) -> bool {
        true
    }

    fn when_refused(&self, options: &PlanOptions) -> Retry {
        match options.evictee_min_size {
            0 => Retry::Strategy,
            least => Retry::SmallerEvictees { least },
        }
    }

    fn schedule(
        &self,
        ctx: &Context<'_>,
        options: &PlanOptions,
        _: &RunConfig<'_>,
    ) -> Result<Scheduled, PlanError> {
        let (steps, fallback) = budgeted(ctx, options)?;
        Ok(Scheduled {
            fallback,
            ..Scheduled::of(steps)
        })
    }
}

/// How many times a budget lowers DTR's threshold before the budget is refused.
const LOWERINGS: u32 = 8;

/// Lowerings by the overshoot alone; after them each lowering is at least a share of the room
/// between the threshold and the per-op lower bound ([`least_lowering`]).
const BY_OVERSHOOT: u32 = 2;

/// Static DTR; with a budget, the threshold is lowered until the device bytes fit
/// ([`LOWERINGS`] times at most): by the arena's overshoot, and from the third lowering on by
/// at least a growing share of the room above the per-op lower bound. One pass of DTR is
/// greedy, so a lower threshold can overshoot again by about as much: lowered by the
/// overshoot alone, ResNet-50 (graphs/real) was refused at `--budget` 90%, 35%, 26% and
/// 23% (of its unplanned device bytes) while every other budget from 21% up fitted.
pub(crate) fn budgeted(ctx: &Context<'_>, options: &PlanOptions) -> Result<Outcome, PlanError> {
    let mut out = static_dtr(ctx, options);
    let Some(limit) = options.budget else {
        return Ok(out);
    };
    let lb = ctx.lower_bound.bytes;
    if options.budget_of == BudgetOf::Peak {
        // The threshold bounds the peak itself; there is no arena overshoot to pay for.
        return Ok(out);
    }
    let mut threshold = options.eviction_threshold.unwrap_or(limit);
    for lowering in 0..LOWERINGS {
        let device = device::device_bytes(ctx, options, &out.0)?;
        if device <= limit || threshold <= lb {
            break;
        }
        let step = (device - limit).max(least_lowering(lowering, threshold - lb));
        threshold = threshold.saturating_sub(step).max(lb);
        let o = PlanOptions {
            eviction_threshold: Some(threshold),
            ..options.clone()
        };
        out = static_dtr(ctx, &o);
    }
    Ok(out)
}

/// The least a budget's `lowering`-th lowering (from 0) takes off DTR's threshold, `room`
/// above the per-op lower bound: nothing for the first [`BY_OVERSHOOT`], then 1/64 of the
/// room, doubling with each lowering after that (1/2 at the last of [`LOWERINGS`]).
fn least_lowering(lowering: u32, room: u64) -> u64 {
    match lowering.checked_sub(BY_OVERSHOOT) {
        None => 0,
        Some(k) => room >> (6 - k.min(5)),
    }
}

/// A DTR schedule, and why it is the traced order when it is.
pub(crate) type Outcome = (Vec<(OpId, bool)>, Option<String>);

/// The DTR schedule, or the traced order and why.
pub(crate) fn static_dtr(ctx: &Context<'_>, options: &PlanOptions) -> Outcome {
    let lb = ctx.lower_bound.bytes;
    let threshold = options
        .eviction_threshold
        .or(options.budget)
        .unwrap_or(lb + ctx.unplanned_peak.saturating_sub(lb) / 2);
    let params = crate::dtr::DtrParams {
        threshold,
        min_size: options.evictee_min_size,
        sqrt_sampling: options.sqrt_sampling,
        seed: options.seed,
    };
    if let Some(why) = crate::dtr::cannot_improve(ctx, params.min_size) {
        return (original(ctx), Some(why));
    }
    let steps = match crate::dtr::schedule(ctx, &params) {
        Ok(steps) => steps,
        Err(crate::schedule::Infeasible::TooCostly) => {
            let why = format!(
                "eviction cascaded into recomputing more than {} training steps' worth",
                crate::schedule::MAX_RECOMPUTE_STEPS
            );
            return (original(ctx), Some(why));
        }
        Err(_) => {
            let why = "a tensor it evicted could not be recomputed safely".to_string();
            return (original(ctx), Some(why));
        }
    };
    // A DTR pass that ends above the unplanned peak is worse than no plan at all.
    let planned = fitness_of(ctx, &steps, 0);
    if planned.feasible && planned.peak <= ctx.unplanned_peak {
        (steps, None)
    } else {
        let why = "its schedule peaked above the traced order's".to_string();
        (original(ctx), Some(why))
    }
}
