//! The sgc graph IR.
//!
//! - [`format`](mod@format): the version-1 graph file format (load, validate, save).
//! - [`file`](mod@file): graph files on disk, plain JSON or gzip (`.json.gz`).
//! - [`cost`]: op costs; the opt-in roofline estimate for a [`DeviceProfile`].
//! - [`checkmate`]: import of Checkmate / Moccasin node-link graphs.
//! - [`Graph`]: a validated training-step graph with typed ids ([`OpId`], [`TensorId`]).
//! - [`ops`]: the op vocabulary: every op type the builder and the exporter write, typed,
//!   with its batch rule, in-place and recompute facts and parameter initialisation.
//! - [`rescale`]: the graph at another batch size, through the `batch_dim` of its inputs.
//! - [`memory`]: the memory model (resident bytes per step, peak, lower bound), the one
//!   implementation that the planner and every report use.
//! - [`rng`]: splitmix64, the seeded generator of run values and test graphs.
//! - `testgen` (feature `testgen`): random valid graphs and damaged graph texts for tests.
//!
//! ```
//! let text = r#"{"format": "sgc-graph", "version": 1,
//!   "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "kind": "input"},
//!               {"name": "y", "dtype": "f32", "shape": [4]}],
//!   "ops": [{"name": "relu", "op": "relu", "inputs": ["x"], "outputs": ["y"]}],
//!   "outputs": ["y"]}"#;
//! let g = sgc_ir::format::from_str(text).unwrap();
//! assert_eq!(g.memory_profile().peak, 32);
//! ```

pub mod checkmate;
pub mod cost;
pub mod distributed;
pub mod error;
pub mod file;
pub mod format;
pub mod free_blocks;
mod graph;
mod ids;
pub mod json;
pub mod memory;
pub mod ops;
pub mod rescale;
pub mod rng;
#[cfg(feature = "testgen")]
pub mod testgen;
pub mod train;
pub mod units;
mod validate;
pub mod zoo;

pub use cost::{CostSources, DeviceProfile, EstimateSummary, ProfileError, Roofline};
pub use error::{GraphError, LoadError};
pub use graph::{CostSource, Graph, GraphDef, Op, OpDef, Tensor, TensorDef};
pub use ids::{DType, OpId, Phase, TensorId, TensorKind};
pub use memory::{
    simulate, simulate_offloaded, LowerBound, MemoryProfile, Offload, ScheduleError,
    StorageInstance,
};
pub use units::human_bytes;

use std::path::Path;

/// Parses JSON text that is either a version-1 graph or a Checkmate node-link graph.
pub fn parse_any(text: &str) -> Result<Graph, GraphError> {
    let value = format::parse_json(text)?;
    if value.get("format").is_none() && checkmate::is_node_link(&value) {
        checkmate::import(&value)
    } else {
        Graph::from_def(format::def_from_value(&value)?)
    }
}

/// Loads a file that is either a version-1 graph or a Checkmate node-link graph, plain or
/// gzip-compressed (told by its first bytes, see [`file`](mod@file)).
pub fn load_any(path: impl AsRef<Path>) -> Result<Graph, LoadError> {
    let path = path.as_ref();
    let text = file::read_text(path)?;
    parse_any(&text).map_err(|source| LoadError::Graph {
        path: path.display().to_string(),
        source,
    })
}
