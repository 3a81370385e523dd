//! sgc: a static-graph compiler that lets deep-learning training fit in less GPU memory.
//!
//! This facade re-exports the workspace crates:
//! - [`ir`]: the graph IR (format, validation, memory model, training builder, zoo);
//! - [`plan`]: the planner (checkpoint search, memory sharing, verifier);
//! - [`exec`]: the executor (CPU reference backend, CUDA behind `--features cuda`).
//!
//! The largest batch that fits a memory size, with and without planning: [`fit`] (the
//! planner's, re-exported).
//! Plan, then run, in one call: [`runner`] (the executor runs plans and makes none).
//! Run-time DTR swept over eviction thresholds beside the static plan: [`sweep`].
//! Human-readable sizes for reports live in [`units`]; the reports of `sgc plan` and
//! `sgc inspect`, as data and text, in [`report`]; the command line's defaults in
//! [`defaults`]. The CLI and the Python bindings (`crates/sgc-py`) share all three.

pub use sgc_exec as exec;
pub use sgc_ir as ir;
pub use sgc_plan as plan;
pub use sgc_plan::fit;

pub mod budget;
pub mod chart;
pub mod compare;
pub mod defaults;
pub mod pareto;
pub mod plot;
pub mod report;
pub mod runner;
pub mod sweep;
pub mod units;
