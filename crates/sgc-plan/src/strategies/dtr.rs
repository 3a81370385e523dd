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

/// Static DTR; with a budget, the threshold is lowered by the arena's overshoot (twice at
/// most) until the device bytes fit.
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
    for _ in 0..2 {
        let device = device::device_bytes(ctx, options, &out.0)?;
        if device <= limit || threshold <= lb {
            break;
        }
        threshold = threshold.saturating_sub(device - limit).max(lb);
        let o = PlanOptions {
            eviction_threshold: Some(threshold),
            ..options.clone()
        };
        out = static_dtr(ctx, &o);
    }
    Ok(out)
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
