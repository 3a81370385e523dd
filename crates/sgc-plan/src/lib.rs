//! The sgc planner: gradient-checkpointing plans for a training-step graph.
//!
//! What a plan is (the plain-data [`Plan`], its options, its summary) and the verifier that
//! checks one live in `sgc-plan-format`, which the executor depends on instead of this
//! crate; they are re-exported here ([`plan`](mod@plan), [`verify()`], [`streams`]).
//!
//! This file is the front door: docs and re-exports. The work lives in modules named after
//! the stages, from the entry points down:
//! - `planner`: [`plan()`], [`plan_with_stats`], [`plan_budgets`] ([`BudgetSweep`]),
//!   [`plan_schedule`]: check the options, run a strategy, and make the plan of its
//!   schedule (summary, arena, verifier);
//! - [`strategies`]: one file per strategy behind one trait ([`strategies::Strategy`]: its
//!   name, the options it reads, what it needs, its schedule), listed once in
//!   [`strategies::REGISTRY`]; with a budget, the choice among candidates (`budget`); with a
//!   budget and a host link, `offload_search` chooses for each activation to keep it,
//!   recompute it or offload it to host memory;
//! - the methods the strategies use: `sublinear/` (the split-point search, a folder with one file per
//!   phase; its module doc walks them in order), `dtr` (static DTR over `schedule`'s
//!   eviction walk), `partition` (a forward/backward partition, as `torch.compile` makes,
//!   chosen by parametric minimum cut: `maxflow`);
//! - `device`: a schedule's device bytes (its arena placed, or the arena's floor);
//! - `context` (private): per-graph facts every strategy reuses (accesses, gaps, what may be
//!   recomputed and until when);
//! - [`arena`]: the plan's arena: its lifetimes and in-place pairs placed by [`alloc`]
//!   (static memory sharing: offsets in one arena for any set of buffers), stored in the
//!   plan (`Plan::arena`) and checked by the verifier;
//! - [`fit`]: the largest batch whose plan fits a memory size, per strategy;
//! - `options`: how the planner runs ([`RunConfig`]: workers, progress); what it is asked
//!   for ([`PlanOptions`], [`BudgetOf`]) is the plan format's;
//! - [`offload`]: a plan's offloads placed in one pinned host pool (their copies and the
//!   step time they give are the plan format's).
//!
//! Module dependencies point one way, down this list (`tests/module_graph.rs` checks the
//! layer order and that no module reaches up into this file).
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
pub mod bound;
mod budget;
mod context;
mod device;
mod dtr;
mod error;
mod exchange;
pub mod fit;
mod least_peak;
mod maxflow;
pub mod offload;
mod offload_search;
pub mod optimal;
mod options;
mod partition;
mod planner;
mod schedule;
mod squeeze;
pub mod strategies;
mod sublinear;

pub use error::{LowerBoundKind, NotAChain, OffloadReach, PlanError, Retry};
// The plan format and its verifier (`sgc-plan-format`): what this crate makes.
pub use bound::{Bound, BoundMethod};
pub use optimal::OptimalStats;
pub use options::{
    ArenaEffort, BudgetOf, Goal, PlanOptions, Progress, ProgressFn, RunConfig, Strategy,
    DEFAULT_ALIGN,
};
pub use plan::{ArenaLayout, GraphRef, Lifetime, Plan, Step, Summary};
pub use planner::{
    bound, kept_device_bytes, least_device_bytes, least_peak, peak_bound_of, peak_bounds, plan,
    plan_budgets, plan_by, plan_schedule, plan_schedule_offloaded, plan_with_stats, BudgetSweep,
    PlanStats,
};
pub use sgc_plan_format::{plan, streams, verify, FormatError};
pub use sublinear::search::{SearchStats, Traded};
pub use sublinear::{NEAR_PEAK_SPAN, PEAK_WORTH};
pub use verify::{check, CheckError, VerifiedPeak, Violation, ViolationKind};

/// What the crate's unit tests share.
#[cfg(test)]
pub(crate) mod testing {
    /// A graph of this repository, by its path from the repository root.
    pub fn load(rel: &str) -> sgc_ir::Graph {
        let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel);
        sgc_ir::load_any(&p).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }
}
