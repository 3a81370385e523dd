//! `optimal`: the least recompute within a budget, proven by an integer program
//! ([`crate::optimal`]: Checkmate's stage model over sgc's memory model, solved by HiGHS),
//! for graphs small enough for one.

use super::{Name, Scheduled, Strategy};
use crate::context::Context;
use crate::device;
use crate::error::PlanError;
use crate::options::{BudgetOf, PlanOptions, RunConfig};
use sgc_ir::OpId;

pub struct Optimal;

impl Strategy for Optimal {
    fn name(&self) -> Name {
        Name::Optimal
    }

    fn about(&self) -> &'static str {
        "the least recompute within the budget, proven by an integer program (small graphs; feature `optimal`)"
    }

    fn reads(&self) -> &'static [&'static str] {
        &["time_limit_s"]
    }

    fn needs_budget(&self) -> bool {
        true
    }

    fn searches_budget(&self) -> bool {
        true
    }

    fn schedule(
        &self,
        ctx: &Context<'_>,
        options: &PlanOptions,
        run: &RunConfig<'_>,
    ) -> Result<Scheduled, PlanError> {
        let (steps, optimal) = plan(ctx, options, run)?;
        Ok(Scheduled {
            optimal: Some(optimal),
            ..Scheduled::of(steps)
        })
    }
}

/// The `optimal` strategy ([`crate::optimal`]): the least recompute whose peak (or device
/// bytes) fits the budget, started from the sublinear, the static DTR or the partition plan
/// at the same peak or a squeezed schedule ([`squeezed_starts`]), whichever recomputes
/// least. For device bytes the program bounds the
/// peak, so when the arena of its plan comes out above the budget the peak cap is lowered
/// by the excess and the program solved again (up to four times); the proof is then about
/// the peak cap it ran at. Its plans keep or recompute; they never offload (a host link is
/// ignored).
fn plan(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(Vec<(OpId, bool)>, crate::optimal::OptimalStats), PlanError> {
    let budget = super::needed_budget(options)?;
    let effort = crate::optimal::Effort {
        time_limit_s: options
            .time_limit_s
            .unwrap_or(crate::optimal::DEFAULT_TIME_LIMIT_S),
        threads: run.threads(),
    };
    let mut cap = budget;
    for _ in 0..4 {
        let heuristic = PlanOptions {
            strategy: Name::Sublinear,
            budget: Some(cap),
            budget_of: BudgetOf::Peak,
            host_link: None,
            ..options.clone()
        };
        let mut starts: Vec<Vec<(OpId, bool)>> = super::sublinear::plan(ctx, &heuristic, run)
            .map(|(chosen, _, _)| chosen.steps)
            .into_iter()
            .collect();
        starts.extend(evicting_starts(ctx, &heuristic, cap));
        starts.extend(partition_start(ctx, &heuristic, run));
        starts = squeezed_starts(ctx, &heuristic, cap, starts);
        let (steps, stats) = crate::optimal::solve(ctx, cap, &starts, effort)?;
        if options.budget_of != BudgetOf::Device {
            return Ok((steps, stats));
        }
        let device = device::device_bytes(ctx, options, &steps)?;
        if device <= budget {
            return Ok((steps, stats));
        }
        cap = cap.saturating_sub(device - budget);
    }
    Err(PlanError::InvalidOption(format!(
        "--strategy optimal: the arenas of its plans stayed above the device budget of {budget} bytes after four lower peak caps; give the budget as a peak (--budget-of peak) or raise it"
    )))
}

/// Partition's schedule at the same peak cap, for the `optimal` strategy to start from (none
/// when the graph has no backward to partition or no candidate fits).
fn partition_start(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Option<Vec<(OpId, bool)>> {
    let options = PlanOptions {
        strategy: Name::Partition,
        ..options.clone()
    };
    let s = super::partition::Partition
        .schedule(ctx, &options, run)
        .ok()?;
    s.offloads.is_empty().then_some(s.steps)
}

/// The starts, each squeezed ([`crate::squeeze`]: a start within the cap loses the
/// recomputations it does not need), and what the squeeze makes of the traced order and of
/// static DTR evicting anything down to the per-op lower bound (above the cap, both: they
/// end in different local optima). On random_layered_n100 of the Checkmate graphs at 0.7 of
/// its peak, where no heuristic plan fits, DTR's squeezed schedule does.
fn squeezed_starts(
    ctx: &Context<'_>,
    options: &PlanOptions,
    cap: u64,
    starts: Vec<Vec<(OpId, bool)>>,
) -> Vec<Vec<(OpId, bool)>> {
    if cap < crate::least_peak::least_peak(ctx) {
        // No schedule fits: `optimal::solve` says so, without a search first.
        return starts;
    }
    let traced = (0..ctx.n).map(|i| (OpId::new(i), false)).collect();
    let evicting = PlanOptions {
        strategy: Name::Dtr,
        eviction_threshold: Some(ctx.lower_bound.bytes),
        evictee_min_size: 0,
        ..options.clone()
    };
    let dtr = super::dtr::static_dtr(ctx, &evicting).0;
    let squeezed: Vec<_> = std::iter::once(traced)
        .chain(starts.iter().cloned())
        .chain(std::iter::once(dtr))
        .filter_map(|s| crate::squeeze::squeeze(ctx, cap, s, crate::squeeze::MAX_EVALUATIONS))
        .collect();
    starts.into_iter().chain(squeezed).collect()
}

/// Static DTR schedules whose peak is within `cap`, for the `optimal` strategy to start
/// from: any tensor may be evicted, and the threshold is lowered by the overshoot of the
/// peak until it fits (up to eight tries).
fn evicting_starts(ctx: &Context<'_>, options: &PlanOptions, cap: u64) -> Vec<Vec<(OpId, bool)>> {
    let mut threshold = cap;
    for _ in 0..8 {
        let evicting = PlanOptions {
            strategy: Name::Dtr,
            eviction_threshold: Some(threshold),
            evictee_min_size: 0,
            ..options.clone()
        };
        let steps = super::dtr::static_dtr(ctx, &evicting).0;
        let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
        let Ok(profile) = sgc_ir::simulate(ctx.g, &ops) else {
            break;
        };
        if profile.peak <= cap {
            return vec![steps];
        }
        threshold = threshold.saturating_sub(profile.peak - cap);
    }
    Vec::new()
}
