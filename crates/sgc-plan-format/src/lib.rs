//! sgc plan files: what a plan is, and the checks that make one safe to run.
//!
//! A plan is plain data ([`Plan`]): the graph it was made for, the options it was made
//! with, its steps (each op's original run or a recomputed copy, and the storages freed
//! after it), every storage's lifetime, the arena offset of each, the offloads to host
//! memory and their place in the pinned host pool, and a summary of its figures. The
//! planner (`sgc-plan`) writes plans; the executor (`sgc-exec`) runs them. Neither trusts
//! the other: the executor depends on this crate alone, and runs a plan only after
//! [`check`] has replayed it against the graph.
//!
//! Modules, from the data down to what checks it:
//! - [`options`]: what the planner was asked for ([`PlanOptions`], [`Strategy`], [`Goal`],
//!   [`BudgetOf`], [`ArenaEffort`]), stored in every plan so a file says how it was made;
//! - [`streams`]: a step's time on the compute stream and two copy streams ([`HostLink`]);
//! - [`offload`]: a plan's offloads as copies on those streams, and what they cost;
//! - [`plan`](mod@plan): the plan itself, its summary ([`Summary`]) recomputed from the
//!   steps, and the file's reader and writer;
//! - [`verify()`] and [`check`]: the independent replay of a plan against the graph alone
//!   (`violation`: what it reports).
//!
//! ```
//! // A file of another version is refused before anything reads its steps.
//! let err = sgc_plan_format::Plan::from_json(r#"{"format": "sgc-plan", "version": 2}"#);
//! assert!(err.unwrap_err().to_string().contains("unsupported plan version"));
//! ```

#[macro_use]
mod names;

mod error;
pub mod offload;
pub mod options;
pub mod plan;
pub mod streams;
pub mod verify;
mod violation;

pub use error::FormatError;
pub use options::{ArenaEffort, BudgetOf, Goal, PlanOptions, Strategy, DEFAULT_ALIGN};
pub use plan::{ArenaLayout, GraphRef, Lifetime, Plan, Step, Summary};
pub use streams::HostLink;
pub use verify::{check, verify, CheckError, VerifiedPeak, Violation, ViolationKind};
