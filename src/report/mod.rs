//! Reports of the commands, as data (serde) and as the text the command line prints: one
//! implementation each, shared by the CLI (`src/cli`) and the Python bindings
//! (`crates/sgc-py`), so both give the same figures.
//!
//! - [`plan`]: `sgc plan` (a plan against its baseline and bound);
//! - [`inspect`]: `sgc inspect` (a graph's ops, tensors, memory and cost).

pub mod inspect;
pub mod plan;
