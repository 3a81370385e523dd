//! One function per strategy, each turning the per-graph [`Context`] and the options into a
//! schedule (steps of op and recomputation flag); [`crate::planner`] makes the plan of it.
//! With a budget, a strategy picks among its candidates the one recomputing least whose
//! device bytes (or peak, or saved bytes: [`BudgetOf`]) fit.

use crate::budget;
use crate::context::Context;
use crate::device;
use crate::error::PlanError;
use crate::offload_search;
use crate::options::{BudgetOf, Goal, PlanOptions, RunConfig, Strategy};
use crate::sublinear::evaluate::{self, fitness_of, schedule};
use crate::sublinear::search::{Evaluator, SearchStats};
use crate::sublinear::{self, chen};
use sgc_ir::OpId;

/// The `chen-sqrt` strategy: Chen's sqrt(n) segments, or the traced order when they do not
/// give a schedule.
pub(crate) fn chen(ctx: &Context<'_>) -> Vec<(OpId, bool)> {
    schedule(ctx, &chen::best(ctx)).unwrap_or_else(|| original(ctx))
}

/// The budget-independent candidate set of the sublinear search ([`budget`]), for a sweep
/// of budgets.
pub(crate) fn sublinear_candidates(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<budget::Candidates, PlanError> {
    let pool = pool(run)?;
    let mut ev = Evaluator::new(ctx, &pool, run.progress);
    let (best, fit) = sublinear::best(&mut ev, &unbudgeted(options));
    Ok(budget::candidates(&mut ev, options, &best, fit.peak))
}

/// The options without their budget.
fn unbudgeted(options: &PlanOptions) -> PlanOptions {
    PlanOptions {
        budget: None,
        ..options.clone()
    }
}

/// The worker pool of a run.
fn pool(run: &RunConfig<'_>) -> Result<rayon::ThreadPool, PlanError> {
    let workers = run.workers.unwrap_or(0);
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .map_err(|e| PlanError::Workers {
            workers,
            message: e.to_string(),
        })
}

/// A schedule and the storages it offloads.
pub(crate) type Offloaded = (Vec<(OpId, bool)>, Vec<sgc_ir::Offload>);

/// The `partition` strategy ([`crate::partition`]): with a budget, the candidate that recomputes
/// least within it (bytes kept for the backward, device bytes or peak), or with a host link
/// the fastest of those made to fit by offloads ([`offload_search`]); without one, the
/// lowest peak.
pub(crate) fn partition(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<Offloaded, PlanError> {
    let pool = pool(run)?;
    let cands = crate::partition::candidates(ctx, &pool).map_err(|e| {
        PlanError::Partition(match e {
            crate::partition::Unpartitionable::NoBackward => "the graph has no backward op (no op has phase \"backward\" and none can be inferred from a loss): export the whole training step, or use another --strategy".to_string(),
            crate::partition::Unpartitionable::NoSchedule => "no set of forward tensors kept for the backward gives a schedule that can run (ops that may not run again read state written in place): use another --strategy".to_string(),
        })
    })?;
    let Some(limit) = options.budget else {
        let best = cands.into_iter().min_by_key(|c| (c.peak, c.units, c.saved));
        return Ok((
            best.map(|c| c.steps).unwrap_or_else(|| original(ctx)),
            Vec::new(),
        ));
    };
    if options.budget_of == BudgetOf::Saved {
        let lowest = cands.iter().map(|c| c.saved).min().unwrap_or(0);
        return cands
            .into_iter()
            .filter(|c| c.saved <= limit)
            .min_by_key(|c| (c.units, c.peak, c.saved))
            .map(|c| (c.steps, Vec::new()))
            .ok_or(PlanError::SavedBudgetNotMet {
                budget: limit,
                lowest,
            });
    }
    let steps: Vec<budget::Candidate> = cands
        .into_iter()
        .map(|c| budget::Candidate::of_steps(c.steps, c.peak, c.units, Strategy::Partition))
        .collect();
    let choose = |b: u64| budget::choose_among(ctx, options, &steps, b);
    let (chosen, offloads) = offload_search::choose_with_offloads(ctx, options, choose, limit)?;
    Ok((chosen.steps, offloads))
}

/// The `optimal` strategy ([`crate::optimal`]): the least recompute whose peak (or device
/// bytes) fits the budget, started from the sublinear or the static DTR plan at the same
/// peak, whichever recomputes less. For device
/// bytes the program bounds the peak, so when the arena of its plan comes out above the
/// budget the peak cap is lowered by the excess and the program solved again (up to four
/// times); the proof is then about the peak cap it ran at. Its plans keep or recompute;
/// they never offload (a host link is ignored).
pub(crate) fn optimal(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(Vec<(OpId, bool)>, crate::optimal::OptimalStats), PlanError> {
    let Some(budget) = options.budget else {
        return Err(PlanError::InvalidOption(
            "--strategy optimal needs --budget (the memory its plan must fit; it minimises recompute under it)".into(),
        ));
    };
    let limit = options
        .time_limit_s
        .unwrap_or(crate::optimal::DEFAULT_TIME_LIMIT_S);
    let mut cap = budget;
    for _ in 0..4 {
        let heuristic = PlanOptions {
            strategy: Strategy::Sublinear,
            budget: Some(cap),
            budget_of: BudgetOf::Peak,
            host_link: None,
            ..options.clone()
        };
        let mut starts: Vec<Vec<(OpId, bool)>> = sublinear(ctx, &heuristic, run)
            .map(|(chosen, _, _)| chosen.steps)
            .into_iter()
            .collect();
        starts.extend(evicting_starts(ctx, &heuristic, cap));
        let (steps, stats) = crate::optimal::solve(ctx, cap, &starts, limit)?;
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

/// Static DTR schedules whose peak is within `cap`, for the `optimal` strategy to start
/// from: any tensor may be evicted, and the threshold is lowered by the overshoot of the
/// peak until it fits (up to eight tries).
fn evicting_starts(ctx: &Context<'_>, options: &PlanOptions, cap: u64) -> Vec<Vec<(OpId, bool)>> {
    let mut threshold = cap;
    for _ in 0..8 {
        let evicting = PlanOptions {
            strategy: Strategy::Dtr,
            eviction_threshold: Some(threshold),
            evictee_min_size: 0,
            ..options.clone()
        };
        let steps = dtr(ctx, &evicting).0;
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

/// The traced order, unchanged.
pub(crate) fn original(ctx: &Context<'_>) -> Vec<(OpId, bool)> {
    (0..ctx.n).map(|i| (OpId::new(i), false)).collect()
}

/// The sublinear search; with a budget, the cheapest plan of the budget-independent
/// candidate set ([`budget`]) whose device bytes fit it.
pub(crate) fn sublinear(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(budget::Chosen, Vec<sgc_ir::Offload>, SearchStats), PlanError> {
    let pool = pool(run)?;
    let mut ev = Evaluator::new(ctx, &pool, run.progress);
    if options.goal == Goal::Balanced {
        ev.objective.balance = Some(evaluate::Balance::of(ctx));
    }
    // The search never sees the budget: with one, it only selects among the candidates
    // that the unbudgeted search and the fixed ladder made, so that a larger budget never
    // costs more recompute.
    let (best, fit) = sublinear::best(&mut ev, &unbudgeted(options));
    let Some(limit) = options.budget else {
        let steps = schedule(ctx, &best).unwrap_or_else(|| original(ctx));
        let chosen = budget::Chosen {
            steps,
            strategy: Strategy::Sublinear,
        };
        return Ok((chosen, Vec::new(), ev.stats));
    };
    let cands = budget::candidates(&mut ev, options, &best, fit.peak);
    // The budget selects among the candidates; the unbudgeted pick's trade is not the plan's.
    let stats = SearchStats {
        traded_from: None,
        before_fixed_peak: None,
        ..ev.stats
    };
    let choose = |b: u64| budget::choose(ctx, options, &cands, b);
    let (chosen, offloads) = offload_search::choose_with_offloads(ctx, options, choose, limit)?;
    Ok((chosen, offloads, stats))
}

/// Static DTR; with a budget, the threshold is lowered by the arena's overshoot (twice at
/// most) until the device bytes fit.
pub(crate) fn dtr_budgeted(
    ctx: &Context<'_>,
    options: &PlanOptions,
) -> Result<DtrOutcome, PlanError> {
    let mut out = dtr(ctx, options);
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
        out = dtr(ctx, &o);
    }
    Ok(out)
}

/// A DTR schedule, and why it is the traced order when it is.
pub(crate) type DtrOutcome = (Vec<(OpId, bool)>, Option<String>);

/// The DTR schedule, or the traced order and why.
fn dtr(ctx: &Context<'_>, options: &PlanOptions) -> DtrOutcome {
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
