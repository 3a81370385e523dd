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
//!   refinement, `dtr` (static DTR);
//! - [`plan`]: the plain-data [`Plan`] written to plan files;
//! - [`verify()`]: an independent replay of a plan against the graph alone.
//!
//! - [`alloc`]: static memory sharing: offsets in one arena for any set of buffers;
//! - [`arena`]: the plan's arena: its lifetimes and in-place pairs placed by [`alloc`],
//!   stored in the plan (`Plan::arena`) and checked by the verifier;
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
mod chen;
mod context;
mod discard;
mod dtr;
mod error;
mod evaluate;
mod fingerprint;
pub mod fit;
mod genetic;
mod genome;
pub mod plan;
mod polish;
#[cfg(test)]
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
    Goal, GraphRef, Lifetime, Plan, PlanOptions, Step, Strategy, Summary, DEFAULT_ALIGN,
};
pub use search::{Progress, ProgressFn, SearchStats};
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
            alloc::Effort::PLAN,
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
    if let Some(budget) = options.budget {
        let lb = ctx.lower_bound;
        if budget < lb.bytes {
            return Err(PlanError::BudgetBelowLowerBound {
                budget,
                lower_bound: lb.bytes,
                op: lb.op.map(|o| graph.op(o).name.clone()).unwrap_or_default(),
            });
        }
    }
    let steps = match options.strategy {
        Strategy::None => original(&ctx),
        Strategy::ChenSqrt => schedule(&ctx, &chen::best(&ctx)).unwrap_or_else(|| original(&ctx)),
        Strategy::Sublinear => {
            let (steps, search) = run_sublinear(&ctx, options, run)?;
            stats.search = Some(search);
            steps
        }
        Strategy::Dtr => {
            let (steps, fallback) = run_dtr(&ctx, options);
            stats.fallback = fallback;
            steps
        }
    };
    let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
    let profile = sgc_ir::simulate(graph, &ops).map_err(|e| PlanError::Internal {
        strategy: options.strategy.to_string(),
        message: e.to_string(),
    })?;
    if let Some(budget) = options.budget.filter(|&b| profile.peak > b) {
        return Err(PlanError::BudgetNotMet {
            budget,
            best_peak: profile.peak,
        });
    }
    let mut plan = Plan::assemble(graph, options, &steps, &profile);
    stats.schedule_secs = start.elapsed().as_secs_f64();
    let start = std::time::Instant::now();
    if options.arena {
        let layout = arena::assign(
            graph,
            &ops,
            &plan.lifetimes,
            options.align,
            alloc::Effort::PLAN,
        )?;
        plan.arena = Some(layout);
    }
    stats.arena_secs = start.elapsed().as_secs_f64();
    verify(graph, &plan).map_err(|violations| PlanError::Rejected {
        strategy: options.strategy.to_string(),
        violations,
    })?;
    Ok((plan, stats))
}

fn check_options(o: &PlanOptions) -> Result<(), PlanError> {
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

fn run_sublinear(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(Vec<(OpId, bool)>, SearchStats), PlanError> {
    let workers = run.workers.unwrap_or(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .map_err(|e| PlanError::Workers {
            workers,
            message: e.to_string(),
        })?;
    let mut ev = search::Evaluator::new(ctx, &pool, run.progress);
    if options.goal == plan::Goal::Balanced {
        ev.objective.balance = Some(evaluate::Balance::of(ctx));
    }
    // Without a budget: the search. With one: the search without it first, then with it
    // (sharing every evaluation), and the cheaper of the two picks that fits, so that a
    // budget the unbudgeted plan meets never gets a plan that recomputes more.
    let unbounded = PlanOptions {
        budget: None,
        ..options.clone()
    };
    let (mut best, fit) = sublinear::search(&mut ev, &unbounded);
    if let Some(budget) = options.budget {
        ev.objective = evaluate::Objective::budget(Some(budget));
        let (b, f) = sublinear::search(&mut ev, options);
        if f.cmp(&fit, ev.objective).is_le() {
            best = b;
        }
    }
    Ok((
        schedule(ctx, &best).unwrap_or_else(|| original(ctx)),
        ev.stats,
    ))
}

/// The DTR schedule, or the traced order and why.
fn run_dtr(ctx: &Context<'_>, options: &PlanOptions) -> (Vec<(OpId, bool)>, Option<String>) {
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
