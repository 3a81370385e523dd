//! The model zoo: training-step graphs of well-known models, built with [`crate::train`].
//!
//! `sgc zoo --out graphs/` writes each model as `graphs/<name>.json`; the repository
//! checks the files in and a test fails when they differ from what this module builds.

use crate::Graph;

/// One zoo model.
pub struct ZooModel {
    /// File stem: the model is written to `<name>.json`.
    pub name: &'static str,
    /// One line for listings.
    pub description: &'static str,
    /// Builds the full training step (forward, backward, SGD update).
    pub build: fn() -> Graph,
}

/// Every zoo model, in a fixed order.
pub fn models() -> Vec<ZooModel> {
    Vec::new()
}
