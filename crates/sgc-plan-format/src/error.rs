//! Why a plan file cannot be read, applied to a graph, or timed.

use thiserror::Error;

/// A plan file that is not one, one made for another graph, or offloads that cannot be
/// timed. Each message ends with what to do.
#[derive(Debug, Error)]
pub enum FormatError {
    #[error("this plan was made for graph {expected}, not for graph {found}: make a new plan for this graph with `sgc plan`")]
    GraphMismatch { expected: String, found: String },
    #[error("not a plan file: {0}")]
    NotAPlan(String),
    /// The copies of a plan's offloads cannot be timed (an op without a clock, an order
    /// of copies that cannot run).
    #[error("{0}")]
    Offloads(String),
}
