//! `sgc.Graph` and `sgc.load`: a validated graph, read from a file (plain or `.json.gz`),
//! JSON text or a dict in the graph format.

use crate::convert::{json_loads, Source};
use crate::errors;
use pyo3::prelude::*;
use std::sync::Arc;

/// A validated training-step graph (format `sgc-graph`, version 1).
#[pyclass(frozen, name = "Graph", module = "sgc")]
pub struct Graph {
    pub graph: Arc<sgc::ir::Graph>,
    /// The file it was read from, as given.
    pub path: Option<String>,
    fingerprint: String,
}

impl Graph {
    fn new(graph: sgc::ir::Graph, path: Option<String>) -> Graph {
        let fingerprint = sgc::plan::GraphRef::of(&graph).fingerprint;
        Graph {
            graph: Arc::new(graph),
            path,
            fingerprint,
        }
    }

    /// A graph argument: an `sgc.Graph`, or what [`load`] takes.
    pub fn of(obj: &Bound<'_, PyAny>) -> PyResult<Py<Graph>> {
        if let Ok(g) = obj.cast::<Graph>() {
            return Ok(g.clone().unbind());
        }
        Py::new(obj.py(), load(obj.py(), obj)?)
    }
}

#[pymethods]
impl Graph {
    /// The graph's `name` (None when it has none).
    #[getter]
    fn name(&self) -> Option<&str> {
        self.graph.name()
    }

    #[getter]
    fn num_ops(&self) -> usize {
        self.graph.num_ops()
    }

    #[getter]
    fn num_tensors(&self) -> usize {
        self.graph.num_tensors()
    }

    /// FNV-1a 64 of the graph's canonical text: what a plan's `graph.fingerprint` holds.
    #[getter]
    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The file it was read from (None for JSON text or a dict).
    #[getter]
    fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The graph in the format's canonical text.
    fn to_json(&self) -> String {
        sgc::ir::format::to_string(&self.graph)
    }

    /// The graph as the format's JSON object.
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        json_loads(py, &self.to_json())
    }

    fn __repr__(&self) -> String {
        format!(
            "<sgc.Graph {} ({} ops, {} tensors, fingerprint {})>",
            self.graph.name().unwrap_or("(unnamed)"),
            self.graph.num_ops(),
            self.graph.num_tensors(),
            self.fingerprint
        )
    }
}

/// Loads a graph: a path (plain or gzip JSON, a version-1 graph or a Checkmate node-link
/// file), JSON text, or a dict in the graph format. Raises `GraphError` naming the file,
/// the JSON line and column, or the op or tensor at fault.
#[pyfunction]
pub fn load(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<Graph> {
    match Source::of(source, "a graph")? {
        Source::Path(path) => {
            let graph = py
                .detach(|| sgc::ir::load_any(&path))
                .map_err(|e| errors::load_error(&e))?;
            Ok(Graph::new(graph, Some(path.display().to_string())))
        }
        Source::Text(text) => {
            let graph = py
                .detach(|| sgc::ir::parse_any(&text))
                .map_err(|e| errors::graph_error(&e))?;
            Ok(Graph::new(graph, None))
        }
    }
}
