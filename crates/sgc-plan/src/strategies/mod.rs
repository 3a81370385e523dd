//! The strategies, one file each, behind one trait ([`Strategy`]), listed once in
//! [`REGISTRY`].
//!
//! A strategy turns the per-graph [`Context`] and the options into a schedule (steps of op
//! and recomputation flag, and the storages it offloads); `planner` makes the plan
//! of it (summary, arena, verifier) the same way for every strategy. Beside its schedule a
//! strategy states what the rest of sgc needs to know of it, so that nothing else matches
//! on strategy names:
//! - its name ([`Name`]: the value of `--strategy` and of a plan file's `strategy`), one
//!   line of help, and the [`PlanOptions`] fields it reads beyond the common ones
//!   ([`COMMON_OPTIONS`]): the command line's `--strategy` help and Python's
//!   `sgc.strategies()` are made from these;
//! - whether it needs a budget, which kinds of budget it plans for, whether it answers a
//!   budget by searching (`sgc fit` then passes the memory limit to it instead of placing
//!   an unbudgeted plan), and whether its plans may offload to host memory.
//!
//! What the verifier holds its plans to is part of the plan format, next to the name
//! ([`Name::promises`]), since a plan file is verified without the planner.
//!
//! Adding a strategy: a file here implementing [`Strategy`], its line in [`REGISTRY`], and
//! its name and promises in the plan format (`sgc-plan-format/src/options.rs`). The tests
//! check that every name has exactly one registered strategy.

mod chen;
mod dtr;
mod none;
mod optimal;
mod partition;
mod rotor;
mod sublinear;

pub use crate::context::Context;
use crate::error::{PlanError, Retry};
use crate::options::{BudgetOf, PlanOptions, RunConfig};
use crate::sublinear::search::SearchStats;
use sgc_ir::OpId;

pub use crate::options::Strategy as Name;

/// A checkpointing strategy: a schedule from the options, and what sgc needs to know of it.
pub trait Strategy: Sync {
    /// Its name on the command line and in plan files.
    fn name(&self) -> Name;
    /// One line of help.
    fn about(&self) -> &'static str;
    /// The [`PlanOptions`] fields it reads beyond [`COMMON_OPTIONS`].
    fn reads(&self) -> &'static [&'static str] {
        &[]
    }
    /// Whether it plans only under a budget.
    fn needs_budget(&self) -> bool {
        false
    }
    /// The kinds of budget it plans for.
    fn budget_kinds(&self) -> &'static [BudgetOf] {
        &[BudgetOf::Device, BudgetOf::Peak]
    }
    /// Whether, given a budget, it searches for the plan that recomputes least within it
    /// (rather than planning the same schedule whatever the budget).
    fn searches_budget(&self) -> bool {
        false
    }
    /// Whether its plans may offload storages to host memory (with a budget and a host link).
    fn can_offload(&self) -> bool {
        false
    }
    /// Whether its plans keep every graph output from its op's first run to the end of the
    /// step: no op whose storages are all graph outputs runs again. Then the kept-outputs
    /// bound (`least_peak.rs`, docs/method.md) bounds its plans, and a budget below
    /// it is refused before it plans.
    fn keeps_outputs(&self) -> bool {
        true
    }
    /// What to try, besides a larger budget, when none of its plans fits one: the options
    /// of its own that reach lower, else another strategy.
    fn when_refused(&self, _options: &PlanOptions) -> Retry {
        Retry::Strategy
    }
    /// The schedule for `ctx` under `options`.
    fn schedule(
        &self,
        ctx: &Context<'_>,
        options: &PlanOptions,
        run: &RunConfig<'_>,
    ) -> Result<Scheduled, PlanError>;
}

/// The options every strategy reads (the budget, how the arena is placed, how ops are costed).
pub const COMMON_OPTIONS: [&str; 7] = [
    "seed",
    "budget",
    "budget_of",
    "arena",
    "arena_effort",
    "align",
    "device_profile",
];

/// Every strategy, once.
pub static REGISTRY: [&dyn Strategy; 7] = [
    &none::None,
    &chen::ChenSqrt,
    &sublinear::Sublinear,
    &dtr::Dtr,
    &partition::Partition,
    &optimal::Optimal,
    &rotor::Rotor,
];

/// The registered strategy of a name.
pub fn of(name: Name) -> &'static dyn Strategy {
    *REGISTRY
        .iter()
        .find(|s| s.name() == name)
        .expect("every strategy name is registered (tests/strategies.rs)")
}

/// What a strategy made.
#[derive(Debug, Default)]
pub struct Scheduled {
    /// The ops in order, each with whether it is a recomputation.
    pub steps: Vec<(OpId, bool)>,
    /// Storages copied to host memory and back.
    pub offloads: Vec<sgc_ir::Offload>,
    /// The rules the schedule follows, when they are another strategy's (a `sublinear`
    /// budget met by eviction follows `dtr`'s); `None`: its own.
    pub follows: Option<Name>,
    /// The sublinear search's work.
    pub search: Option<SearchStats>,
    /// Why the strategy fell back to the traced order, when it did.
    pub fallback: Option<String>,
    /// What the solver proved (`optimal`).
    pub optimal: Option<crate::optimal::OptimalStats>,
}

impl Scheduled {
    /// A schedule and nothing else.
    pub fn of(steps: Vec<(OpId, bool)>) -> Scheduled {
        Scheduled {
            steps,
            ..Scheduled::default()
        }
    }
}

/// What to try when no plan of the strategy `options` names fits its budget.
pub(crate) fn when_refused(options: &PlanOptions) -> Retry {
    of(options.strategy).when_refused(options)
}

/// The budget of a strategy that needs one, or the error that says so (the planner checks
/// it before any strategy runs; a strategy reads its budget through it).
pub(crate) fn needed_budget(options: &PlanOptions) -> Result<u64, PlanError> {
    options.budget.ok_or_else(|| {
        PlanError::InvalidOption(format!(
            "--strategy {} needs --budget (the memory its plan must fit; it minimises recompute under it)",
            options.strategy
        ))
    })
}

/// The traced order, unchanged.
pub(crate) fn original(ctx: &Context<'_>) -> Vec<(OpId, bool)> {
    (0..ctx.n).map(|i| (OpId::new(i), false)).collect()
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

pub(crate) use sublinear::candidates as sublinear_candidates;
