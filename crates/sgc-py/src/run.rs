//! `sgc.execute`: one or more training steps of a graph on the executor's CPU backend, with
//! the caller's values, returning the graph's outputs. It is how Python compares sgc's
//! kernels with PyTorch on the same numbers (the torchvision sweep, the OpInfo check):
//! values cross as little-endian bytes of each tensor's declared dtype and shape, the form
//! `torch.Tensor.view(torch.uint8)` gives, so no array library is involved.

use crate::errors::SgcError;
use crate::graph::Graph;
use crate::plan::plan_of;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use sgc::exec::{CpuBackend, HostTensor};

pyo3::create_exception!(
    sgc,
    ExecutionError,
    SgcError,
    "A graph could not be run: a value of the wrong size, an op the backend lacks, a kernel that refused its operands."
);

/// The host tensor of `name` from `bytes`, checked against the graph's declaration.
fn host_value(g: &sgc::ir::Graph, name: &str, bytes: &[u8]) -> PyResult<HostTensor> {
    let bad = |m: String| pyo3::exceptions::PyValueError::new_err(format!("values[{name:?}]: {m}"));
    let t = g
        .tensor_by_name(name)
        .ok_or_else(|| bad("the graph has no tensor of this name".into()))?;
    let decl = g.tensor(t);
    if bytes.len() as u64 != decl.size {
        return Err(bad(format!(
            "{} bytes, but the graph declares {} {:?} ({} bytes)",
            bytes.len(),
            decl.dtype.as_str(),
            decl.shape,
            decl.size
        )));
    }
    let shape = decl.shape.iter().map(|&d| d as usize).collect();
    HostTensor::from_bytes(decl.dtype, shape, bytes).ok_or_else(|| {
        bad(format!(
            "the executor holds no {} tensors on the host (f32, f16, bf16, i64, i32 and bool only)",
            decl.dtype.as_str()
        ))
    })
}

/// Runs `steps` training steps of `graph` on the CPU backend, unplanned or under `plan` (a
/// `sgc.Plan`, a plan file, its text or its dict; verified before anything runs), with
/// `values` (name -> bytes) bound to its inputs and persistent tensors. Every input and
/// persistent tensor needs a value, unless `seed` is given: then the ones left out get
/// the seeded values `sgc run --seed` uses. Returns name -> bytes of every graph output (the
/// loss, the gradients) and of each name in `read` (a persistent tensor after the steps).
#[pyfunction]
#[pyo3(signature = (graph, values, plan=None, steps=1, seed=None, read=None))]
pub fn execute<'py>(
    py: Python<'py>,
    graph: &Bound<'py, PyAny>,
    values: &Bound<'py, PyDict>,
    plan: Option<&Bound<'py, PyAny>>,
    #[pyo3(from_py_with = crate::convert::counts::steps)] steps: usize,
    #[pyo3(from_py_with = crate::convert::counts::opt_seed)] seed: Option<u64>,
    read: Option<Vec<String>>,
) -> PyResult<Bound<'py, PyDict>> {
    let graph = Graph::of(graph)?;
    let graph = graph.get();
    let file = graph.path.as_deref();
    let g = &graph.graph;
    let mut bound = Vec::with_capacity(values.len());
    for (k, v) in values.iter() {
        let name: String = k.extract()?;
        let bytes: Vec<u8> = v.extract().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "values[{name:?}]: expected bytes (tensor.contiguous().view(torch.uint8).numpy().tobytes())"
            ))
        })?;
        let value = host_value(g, &name, &bytes)?;
        bound.push((name, value));
    }
    let plan = plan.map(|p| plan_of(py, p)).transpose()?;
    let mut names: Vec<String> = g
        .outputs()
        .iter()
        .map(|&t| g.tensor(t).name.clone())
        .collect();
    names.extend(read.unwrap_or_default());
    let outputs = py
        .detach(|| -> Result<Vec<(String, Vec<u8>)>, PyErrText> {
            let backend = CpuBackend::new();
            let mut ex = match &plan {
                Some((p, plan_file)) => sgc::runner::planned(g, p, backend)
                    .map_err(|e| PyErrText::exec(e, plan_file.as_deref().or(file)))?,
                None => sgc::runner::unplanned(g, backend).map_err(|e| PyErrText::exec(e, file))?,
            };
            if let Some(seed) = seed {
                ex.bind_seeded(seed).map_err(|e| PyErrText::exec(e, file))?;
            }
            ex.bind_all(&bound).map_err(|e| PyErrText::exec(e, file))?;
            ex.run(steps).map_err(|e| PyErrText::exec(e, file))?;
            names
                .iter()
                .map(|n| {
                    Ok((
                        n.clone(),
                        ex.read(n).map_err(|e| PyErrText::exec(e, file))?.to_bytes(),
                    ))
                })
                .collect()
        })
        .map_err(|e| ExecutionError::new_err(e.0))?;
    let out = PyDict::new(py);
    for (name, bytes) in outputs {
        out.set_item(name, PyBytes::new(py, &bytes))?;
    }
    Ok(out)
}

/// An error's message, made while the GIL is released and raised once it is held again.
struct PyErrText(String);

impl PyErrText {
    fn exec(e: impl std::fmt::Display, file: Option<&str>) -> Self {
        PyErrText(match file {
            Some(f) => format!("{f}: {e}"),
            None => e.to_string(),
        })
    }
}

/// Registers the exception class on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ExecutionError", m.py().get_type::<ExecutionError>())?;
    Ok(())
}
