//! The sgc planner: gradient-checkpointing plans for a training-step graph, and the
//! verifier that checks them.
//!
//! The pipeline, one module per phase:
//! - [`context`](crate::context) (private): per-graph facts every candidate reuses
//!   (accesses, gaps, what may be recomputed and until when);
//! - `discard`: a split-based candidate's discard plan (which storage is freed after which
//!   access and recomputed before which read);
//! - `genome`: a split-based candidate (split points, kept roots, rule variant);
//! - `recompute`: a discard plan becomes a step sequence with bounded recomputation
//!   (bounded to the block; every op runs at most twice);
//! - `evaluate` and `search`: a candidate's peak under the IR's memory model (counted by
//!   the walk as it goes; `profile`, in tests, counts it again from the steps) and its
//!   fitness; batches evaluated in parallel, independent of the worker count;
//! - `relax`: memory for speed (turning recomputations back into kept storages);
//! - `schedule`: recomputation with eviction, for static DTR;
//! - strategies: `chen` (sqrt(n) segments), `sublinear` (threshold search) with `genetic`
//!   refinement, `dtr` (static DTR), `partition` (a forward/backward partition, as
//!   `torch.compile` makes, chosen by parametric minimum cut: `maxflow`);
//! - [`plan`]: the plain-data [`Plan`] written to plan files;
//! - [`verify()`]: an independent replay of a plan against the graph alone.
//!
//! - [`alloc`]: static memory sharing: offsets in one arena for any set of buffers;
//! - [`arena`]: the plan's arena: its lifetimes and in-place pairs placed by [`alloc`],
//!   stored in the plan (`Plan::arena`) and checked by the verifier; `device`: a
//!   schedule's device bytes (its arena placed, or the arena's floor) for the searches;
//! - [`fit`]: the largest batch whose plan (arena plus persistent bytes) fits a memory
//!   size, per strategy, and the batch no plan can pass.
//!
//! Module dependencies point one way (`tests/module_graph.rs` checks it): plain data
//! (`genome`, `violation`, [`plan`]) at the bottom, then `context`, the discard plan and
//! the walk, evaluation, the searches, and the planner entry points on top.
//!
//! ```
//! let text = r#"{"format": "sgc-graph", "version": 1,
//!   "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "kind": "input"},
//!               {"name": "y", "dtype": "f32", "shape": [4]}],
//!   "ops": [{"name": "relu", "op": "relu", "inputs": ["x"], "outputs": ["y"]}],
//!   "outputs": ["y"]}"#;
//! let g = sgc_ir::format::from_str(text).unwrap();
//! let plan = sgc_plan::plan(&g, &sgc_plan::PlanOptions::default(), &Default::default()).unwrap();
//! assert_eq!(sgc_plan::verify(&g, &plan).unwrap().peak_bytes, 32);
//! ```

pub mod alloc;
pub mod arena;
mod bound;
mod budget;
mod chen;
mod context;
mod device;
mod discard;
mod dtr;
mod error;
mod evaluate;
mod fingerprint;
pub mod fit;
mod genetic;
mod genome;
mod maxflow;
mod partition;
pub mod plan;
mod polish;
mod profile;
mod recompute;
mod relax;
mod schedule;
mod search;
mod sublinear;
pub mod verify;
mod violation;

pub use error::PlanError;
pub use plan::ArenaLayout;
pub use plan::{
    BudgetOf, Goal, GraphRef, Lifetime, Plan, PlanOptions, Step, Strategy, Summary, DEFAULT_ALIGN,
};
pub use search::{Progress, ProgressFn, SearchStats, Traded};
pub use sublinear::{NEAR_PEAK_SPAN, PEAK_WORTH};
pub use verify::{check, verify, CheckError, VerifiedPeak, Violation, ViolationKind};

use context::Context;
use evaluate::{fitness_of, schedule};
use sgc_ir::{Graph, OpId};

/// How to run the planner; nothing here changes the plan.
#[derive(Clone, Copy, Default)]
pub struct RunConfig<'a> {
    /// Worker threads for candidate evaluation; `None`: all cores.
    pub workers: Option<usize>,
    /// Called as the search advances.
    pub progress: Option<ProgressFn<'a>>,
}

/// Makes a plan for `graph` and verifies it.
pub fn plan(graph: &Graph, options: &PlanOptions, run: &RunConfig<'_>) -> Result<Plan, PlanError> {
    plan_with_stats(graph, options, run).map(|p| p.0)
}

/// The plan of an explicit schedule, `ops` in order (every run of an op after its first is
/// a recomputation): every storage freed after its last use, the arena placed by the
/// planner's allocator (unless `options.arena` is off), the summary computed, and the whole
/// verified. For tools and tests that choose their own order: what the executor runs is
/// always a plan. The verifier applies `options.strategy`'s rules (a split-based strategy
/// may recompute an op once; `dtr` any number of times).
pub fn plan_schedule(
    graph: &Graph,
    options: &PlanOptions,
    ops: &[OpId],
) -> Result<Plan, PlanError> {
    let profile = sgc_ir::simulate(graph, ops)?;
    let mut seen = vec![false; graph.num_ops()];
    let steps: Vec<(OpId, bool)> = ops
        .iter()
        .map(|&op| (op, std::mem::replace(&mut seen[op.index()], true)))
        .collect();
    let mut plan = Plan::assemble(graph, options, &steps, &profile);
    if options.arena {
        let layout = arena::assign(
            graph,
            ops,
            &plan.lifetimes,
            options.align,
            options.arena_effort.effort(),
        )?;
        plan.arena = Some(layout);
    }
    verify(graph, &plan).map_err(|violations| PlanError::Rejected {
        strategy: format!("{} (explicit schedule)", options.strategy),
        violations,
    })?;
    Ok(plan)
}

/// What making a plan took (nothing here is part of the plan).
#[derive(Clone, Debug, Default)]
pub struct PlanStats {
    /// The sublinear search's work (`None` for the other strategies).
    pub search: Option<SearchStats>,
    /// Wall time of choosing the schedule (the search, for `sublinear`).
    pub schedule_secs: f64,
    /// Wall time of placing the arena.
    pub arena_secs: f64,
    /// Why the strategy fell back to the traced order, when it did (`dtr` only).
    pub fallback: Option<String>,
    /// A `sublinear` budget was met by a static DTR plan, the candidate recomputing least
    /// whose device bytes fit (the plan's strategy is then `dtr`).
    pub met_by_eviction: bool,
}

/// [`plan`], with what the planner did and how long its phases took.
pub fn plan_with_stats(
    graph: &Graph,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(Plan, PlanStats), PlanError> {
    check_options(options)?;
    let mut stats = PlanStats::default();
    let start = std::time::Instant::now();
    let ctx = Context::with_profile(graph, options.device_profile.as_ref());
    if let Some(budget) = options
        .budget
        .filter(|_| options.budget_of != BudgetOf::Saved)
    {
        below_bound(&ctx, budget)?;
    }
    let mut strategy = options.strategy;
    let steps = match options.strategy {
        Strategy::None => original(&ctx),
        Strategy::ChenSqrt => schedule(&ctx, &chen::best(&ctx)).unwrap_or_else(|| original(&ctx)),
        Strategy::Sublinear => {
            let (chosen, search) = run_sublinear(&ctx, options, run)?;
            stats.search = Some(search);
            stats.met_by_eviction = chosen.strategy == Strategy::Dtr;
            strategy = chosen.strategy;
            chosen.steps
        }
        Strategy::Dtr => {
            let (steps, fallback) = run_dtr_budgeted(&ctx, options)?;
            stats.fallback = fallback;
            steps
        }
        Strategy::Partition => run_partition(&ctx, options, run)?,
    };
    stats.schedule_secs = start.elapsed().as_secs_f64();
    let plan = finish_plan(&ctx, options, strategy, &steps, &mut stats)?;
    Ok((plan, stats))
}

/// Plans for every budget in `budgets` (`options.budget` is ignored): the plan
/// [`plan`] makes with that budget, or why there is none. Only `sublinear` takes a
/// budget this way: its candidate set does not depend on the budget (see `budget.rs`), so
/// it is built once and every budget selects from it: the plans are those of separate
/// [`plan`] calls, recompute never rises as the budget grows, and a sweep of many budgets
/// costs one search plus the arenas.
pub fn plan_budgets(
    graph: &Graph,
    options: &PlanOptions,
    budgets: &[u64],
    run: &RunConfig<'_>,
) -> Result<Vec<Result<Plan, PlanError>>, PlanError> {
    check_options(options)?;
    if options.strategy != Strategy::Sublinear {
        return Err(PlanError::InvalidOption(format!(
            "a sweep of budgets plans with sublinear, not {}",
            options.strategy
        )));
    }
    let ctx = Context::with_profile(graph, options.device_profile.as_ref());
    let pool = pool(run)?;
    let mut ev = search::Evaluator::new(&ctx, &pool, run.progress);
    let (best, fit) = sublinear::search(&mut ev, &unbudgeted(options));
    let cands = budget::candidates(&mut ev, options, &best, fit.peak);
    Ok(budgets
        .iter()
        .map(|&b| {
            let o = PlanOptions {
                budget: Some(b),
                ..options.clone()
            };
            below_bound(&ctx, b)?;
            let chosen = budget::choose(&ctx, &o, &cands, b)?;
            finish_plan(
                &ctx,
                &o,
                chosen.strategy,
                &chosen.steps,
                &mut PlanStats::default(),
            )
        })
        .collect())
}

/// A budget below the per-op lower bound, refused with the op that sets the bound.
fn below_bound(ctx: &Context<'_>, budget: u64) -> Result<(), PlanError> {
    let lb = ctx.lower_bound;
    if budget < lb.bytes {
        return Err(PlanError::BudgetBelowLowerBound {
            budget,
            lower_bound: lb.bytes,
            op: lb.op.map(|o| ctx.g.op(o).name.clone()).unwrap_or_default(),
        });
    }
    Ok(())
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

/// The plan of a chosen schedule: summary, arena (checked against the budget in device
/// bytes) and the verifier. The plan records the rules its schedule follows (a budget met
/// by eviction is `dtr`).
fn finish_plan(
    ctx: &Context<'_>,
    options: &PlanOptions,
    strategy: Strategy,
    steps: &[(OpId, bool)],
    stats: &mut PlanStats,
) -> Result<Plan, PlanError> {
    let graph = ctx.g;
    let options = &PlanOptions {
        strategy,
        ..options.clone()
    };
    let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
    let profile = sgc_ir::simulate(graph, &ops).map_err(|e| PlanError::Internal {
        strategy: options.strategy.to_string(),
        message: e.to_string(),
    })?;
    let mut plan = Plan::assemble(graph, options, steps, &profile);
    let start = std::time::Instant::now();
    if options.arena || options.budget.is_some() {
        let layout = arena::assign(
            graph,
            &ops,
            &plan.lifetimes,
            options.align,
            options.arena_effort.effort(),
        )?;
        let device = layout.size.saturating_add(graph.persistent_bytes());
        let bounded = match options.budget_of {
            BudgetOf::Device => device,
            BudgetOf::Peak => profile.peak,
            BudgetOf::Saved => plan::saved_bytes(graph, steps),
        };
        if let Some(budget) = options.budget.filter(|&b| bounded > b) {
            if options.budget_of == BudgetOf::Saved {
                return Err(PlanError::SavedBudgetNotMet {
                    budget,
                    lowest: bounded,
                });
            }
            return Err(PlanError::BudgetNotMet {
                budget,
                of: options.budget_of,
                best_peak: profile.peak,
                best_device: Some(device),
                lower_bound: ctx.lower_bound.bytes,
            });
        }
        plan.arena = options.arena.then_some(layout);
    }
    stats.arena_secs = start.elapsed().as_secs_f64();
    verify(graph, &plan).map_err(|violations| PlanError::Rejected {
        strategy: options.strategy.to_string(),
        violations,
    })?;
    Ok(plan)
}

/// The `partition` strategy ([`partition`]): with a budget, the candidate that recomputes
/// least within it (bytes kept for the backward, device bytes or peak); without one, the
/// lowest peak.
fn run_partition(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<Vec<(OpId, bool)>, PlanError> {
    let pool = pool(run)?;
    let cands = partition::candidates(ctx, &pool).map_err(|e| {
        PlanError::Partition(match e {
            partition::Unpartitionable::NoBackward => "the graph has no backward op (no op has phase \"backward\" and none can be inferred from a loss): export the whole training step, or use another --strategy".to_string(),
            partition::Unpartitionable::NoSchedule => "no set of forward tensors kept for the backward gives a schedule that can run (ops that may not run again read state written in place): use another --strategy".to_string(),
        })
    })?;
    let Some(limit) = options.budget else {
        let best = cands.into_iter().min_by_key(|c| (c.peak, c.units, c.saved));
        return Ok(best.map(|c| c.steps).unwrap_or_else(|| original(ctx)));
    };
    if options.budget_of == BudgetOf::Saved {
        let lowest = cands.iter().map(|c| c.saved).min().unwrap_or(0);
        return cands
            .into_iter()
            .filter(|c| c.saved <= limit)
            .min_by_key(|c| (c.units, c.peak, c.saved))
            .map(|c| c.steps)
            .ok_or(PlanError::SavedBudgetNotMet {
                budget: limit,
                lowest,
            });
    }
    let steps = cands
        .into_iter()
        .map(|c| budget::Candidate::of_steps(c.steps, c.peak, c.units, Strategy::Partition))
        .collect();
    Ok(budget::choose_among(ctx, options, steps, limit)?.steps)
}

fn check_options(o: &PlanOptions) -> Result<(), PlanError> {
    if o.budget_of == BudgetOf::Saved && o.strategy != Strategy::Partition {
        return Err(PlanError::InvalidOption(format!(
            "--budget-of saved (bytes kept for the backward) plans with --strategy partition, not {}",
            o.strategy
        )));
    }
    if o.align == 0 {
        return Err(PlanError::InvalidOption(
            "--align must be at least 1".into(),
        ));
    }
    if o.pool_size == 0 {
        return Err(PlanError::InvalidOption(
            "--pool-size must be at least 1".into(),
        ));
    }
    Ok(())
}

/// The traced order, unchanged.
fn original(ctx: &Context<'_>) -> Vec<(OpId, bool)> {
    (0..ctx.n).map(|i| (OpId::new(i), false)).collect()
}

/// The sublinear search; with a budget, the cheapest plan of the budget-independent
/// candidate set ([`budget`]) whose device bytes fit it.
fn run_sublinear(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(budget::Chosen, SearchStats), PlanError> {
    let pool = pool(run)?;
    let mut ev = search::Evaluator::new(ctx, &pool, run.progress);
    if options.goal == plan::Goal::Balanced {
        ev.objective.balance = Some(evaluate::Balance::of(ctx));
    }
    // The search never sees the budget: with one, it only selects among the candidates
    // that the unbudgeted search and the fixed ladder made, so that a larger budget never
    // costs more recompute.
    let (best, fit) = sublinear::search(&mut ev, &unbudgeted(options));
    let Some(limit) = options.budget else {
        let steps = schedule(ctx, &best).unwrap_or_else(|| original(ctx));
        let chosen = budget::Chosen {
            steps,
            strategy: Strategy::Sublinear,
        };
        return Ok((chosen, ev.stats));
    };
    let cands = budget::candidates(&mut ev, options, &best, fit.peak);
    // The budget selects among the candidates; the unbudgeted pick's trade is not the plan's.
    let stats = SearchStats {
        traded_from: None,
        before_fixed_peak: None,
        ..ev.stats
    };
    Ok((budget::choose(ctx, options, &cands, limit)?, stats))
}

/// Static DTR; with a budget, the threshold is lowered by the arena's overshoot (twice at
/// most) until the device bytes fit.
fn run_dtr_budgeted(ctx: &Context<'_>, options: &PlanOptions) -> Result<DtrOutcome, PlanError> {
    let mut out = run_dtr(ctx, options);
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
        out = run_dtr(ctx, &o);
    }
    Ok(out)
}

/// A DTR schedule, and why it is the traced order when it is.
type DtrOutcome = (Vec<(OpId, bool)>, Option<String>);

/// The DTR schedule, or the traced order and why.
fn run_dtr(ctx: &Context<'_>, options: &PlanOptions) -> DtrOutcome {
    let lb = ctx.lower_bound.bytes;
    let threshold = options
        .eviction_threshold
        .or(options.budget)
        .unwrap_or(lb + ctx.unplanned_peak.saturating_sub(lb) / 2);
    let params = dtr::DtrParams {
        threshold,
        min_size: options.evictee_min_size,
        sqrt_sampling: options.sqrt_sampling,
        seed: options.seed,
    };
    let steps = match dtr::schedule(ctx, &params) {
        Ok(steps) => steps,
        Err(schedule::Infeasible::TooCostly) => {
            let why = format!(
                "eviction cascaded into recomputing more than {} training steps' worth",
                schedule::MAX_RECOMPUTE_STEPS
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
