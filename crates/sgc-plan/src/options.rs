//! How to run the planner ([`RunConfig`]: workers and progress, which never change the
//! plan). What the planner is asked for lives with the plan format
//! ([`sgc_plan_format::options`], stored in every plan) and is re-exported here.

pub use sgc_plan_format::options::{
    ArenaEffort, BudgetOf, Goal, PlanOptions, Strategy, DEFAULT_ALIGN,
};

/// Progress of a search, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// What the search is doing.
    pub phase: &'static str,
    /// Units of work done and expected (generations, or candidates).
    pub done: usize,
    pub total: usize,
}

/// A progress callback.
pub type ProgressFn<'a> = &'a (dyn Fn(Progress) + Sync);

/// How to run the planner; nothing here changes the plan.
#[derive(Clone, Copy, Default)]
pub struct RunConfig<'a> {
    /// Worker threads for candidate evaluation; `None`: all cores.
    pub workers: Option<usize>,
    /// Called as the search advances.
    pub progress: Option<ProgressFn<'a>>,
}
