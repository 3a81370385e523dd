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

impl RunConfig<'_> {
    /// The threads a run may use: `workers`, or all cores (rayon's default, which
    /// `RAYON_NUM_THREADS` sets).
    pub fn threads(&self) -> usize {
        match self.workers {
            Some(w) if w > 0 => w,
            _ => rayon::current_num_threads(),
        }
    }
}
