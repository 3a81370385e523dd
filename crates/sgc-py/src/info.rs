//! What sgc knows that the Python side would otherwise copy: device profiles and their
//! roofline costs (`sgc_ir::cost`), dtype sizes, the command line's defaults
//! (`sgc::defaults`), and a plan's figures in the terms PyTorch measures. `sgc_trace` reads
//! all of them from here, so that one formula, one table and one default serve both.

use crate::convert::to_py;
use crate::errors;
use crate::graph::Graph;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sgc::defaults as cli;
use sgc::ir::{DType, DeviceProfile, OpId, Roofline};
use sgc::plan::PlanOptions;

/// A profile as a dict: `name`, `f32_tflops`, `half_tflops`, `bandwidth_gbps`.
fn profile_dict<'py>(py: Python<'py>, p: &DeviceProfile) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", p.name())?;
    d.set_item("f32_tflops", p.f32_tflops())?;
    d.set_item("half_tflops", p.half_tflops())?;
    d.set_item("bandwidth_gbps", p.bandwidth_gbps())?;
    Ok(d)
}

/// Parses a device profile (`DeviceProfile::from_str`): a name or custom rates.
fn parse(text: &str) -> PyResult<DeviceProfile> {
    text.parse::<DeviceProfile>()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The named device profiles, in order: name -> the profile's dict.
#[pyfunction]
pub fn device_profiles(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let out = PyDict::new(py);
    for p in DeviceProfile::named() {
        out.set_item(p.name(), profile_dict(py, &p)?)?;
    }
    Ok(out.into_any().unbind())
}

/// One device profile: a name (`a100`, any case) or custom rates `F32/HALF/GBPS`, as a
/// dict (`name` is the canonical name; custom rates are named by their rates). Raises
/// `ValueError` with the accepted forms.
#[pyfunction]
pub fn device_profile(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    Ok(profile_dict(py, &parse(text)?)?.into_any().unbind())
}

/// The roofline estimate of every op of `graph` on `device_profile`, microseconds, in op
/// order (the op's own `time_us` is ignored), and `meta.time_us_source`'s object for it.
#[pyfunction]
pub fn roofline(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    device_profile: &str,
) -> PyResult<(Vec<f64>, Py<PyAny>)> {
    let device = parse(device_profile)?;
    let graph = Graph::of(graph)?;
    let g = &graph.get().graph;
    let times = py.detach(|| {
        (0..g.num_ops())
            .map(|i| Roofline::of(g, OpId::new(i), &device).time_us())
            .collect()
    });
    let source = serde_json::Value::Object(device.time_us_source());
    Ok((times, to_py(py, &source)?))
}

/// The op types the executor has kernels for: type -> whether the CUDA backend runs it too
/// (attribute values and dtypes may still rule out one op; `inspect(graph, device=)` says).
#[pyfunction]
pub fn executor_ops(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let out = PyDict::new(py);
    for (kind, cuda) in sgc::exec::kernel::kernels() {
        out.set_item(kind.name(), cuda)?;
    }
    Ok(out.into_any().unbind())
}

/// Bytes per element of every dtype of the graph format: name -> size.
#[pyfunction]
pub fn dtype_sizes(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let out = PyDict::new(py);
    for d in DType::ALL {
        out.set_item(d.as_str(), d.size())?;
    }
    Ok(out.into_any().unbind())
}

/// The defaults of `sgc plan` and `sgc fit` that a Python caller leaves out: the planner's
/// knobs, the arena's alignment, the genetic refinement of the command line, and the
/// device profile the exporter costs ops on.
#[pyfunction]
#[pyo3(name = "defaults")]
pub fn option_defaults(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let lib = PlanOptions::default();
    let out = PyDict::new(py);
    out.set_item("strategy", lib.strategy.as_str())?;
    out.set_item("genetic_iters", cli::GENETIC_ITERS)?;
    out.set_item("seed", cli::seed())?;
    out.set_item("thresh_tries", cli::thresh_tries())?;
    out.set_item("pool_size", cli::pool_size())?;
    out.set_item("evictee_min_size", cli::evictee_min_size())?;
    out.set_item("align", cli::ALIGN)?;
    out.set_item("max_recompute", cli::FIT_MAX_RECOMPUTE)?;
    out.set_item("device_profile", cli::DEVICE_PROFILE)?;
    Ok(out.into_any().unbind())
}

/// The strategies `plan(strategy=...)` takes, in order, each a dict: `name`, `about`,
/// `reads` (the keywords of `plan` it reads beyond the common ones), `needs_budget`,
/// `budget_of` (the budget kinds it plans for), `can_offload`; the command line's
/// `--strategy` help is made from the same registry.
#[pyfunction]
pub fn strategies(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let out = pyo3::types::PyList::empty(py);
    for s in sgc::plan::strategies::REGISTRY {
        let d = PyDict::new(py);
        d.set_item("name", s.name().as_str())?;
        d.set_item("about", s.about())?;
        d.set_item("reads", s.reads().to_vec())?;
        d.set_item("needs_budget", s.needs_budget())?;
        let kinds: Vec<&str> = s.budget_kinds().iter().map(|k| k.as_str()).collect();
        d.set_item("budget_of", kinds)?;
        d.set_item("can_offload", s.can_offload())?;
        out.append(d)?;
    }
    Ok(out.into_any().unbind())
}

/// A plan's figures in the terms PyTorch measures a step in (the plan verified first):
/// `step_peak` (the most bytes its storages hold at once, the graph's inputs excluded: a
/// step's allocations beyond parameters, state and the batch), `saved_bytes` (what its
/// forward keeps for its backward, `sgc_plan::plan::saved_bytes`), `persistent_bytes`,
/// `device_bytes` (arena + persistent; None without an arena) and `planned_peak`.
#[pyfunction]
pub fn figures(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    plan: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let graph = Graph::of(graph)?;
    let g = &graph.get().graph;
    let (plan, file) = crate::plan::plan_of(py, plan)?;
    plan.check_graph(g)
        .map_err(|e| errors::plan_error(py, e.into(), file.as_deref()))?;
    py.detach(|| sgc::plan::check(g, &plan))
        .map_err(|e| errors::check_error(py, e, file.as_deref()))?;
    let schedule: Vec<(OpId, bool)> = plan.steps.iter().map(|s| (s.op, s.recompute)).collect();
    let out = PyDict::new(py);
    let persistent = g.persistent_bytes();
    out.set_item("step_peak", plan.step_peak(g))?;
    out.set_item("saved_bytes", sgc::plan::plan::saved_bytes(g, &schedule))?;
    out.set_item("persistent_bytes", persistent)?;
    out.set_item(
        "device_bytes",
        plan.arena.as_ref().map(|a| a.size + persistent),
    )?;
    out.set_item("planned_peak", plan.summary.planned_peak)?;
    Ok(out.into_any().unbind())
}

/// Bytes of each named tensor's storage (its base's, for a view), in order.
#[pyfunction]
pub fn storage_sizes(graph: &Bound<'_, PyAny>, names: Vec<String>) -> PyResult<Vec<u64>> {
    let graph = Graph::of(graph)?;
    let g = &graph.get().graph;
    names
        .iter()
        .map(|name| {
            let t = g
                .tensor_by_name(name)
                .ok_or_else(|| PyValueError::new_err(format!("no tensor `{name}` in the graph")))?;
            Ok(g.storage_bytes(g.storage_root(t)))
        })
        .collect()
}

/// Bytes of the storages of the named tensors (a view counts its base, each storage once);
/// persistent storages only when `persistent`.
#[pyfunction]
#[pyo3(signature = (graph, names, persistent=false))]
pub fn storage_bytes(
    graph: &Bound<'_, PyAny>,
    names: Vec<String>,
    persistent: bool,
) -> PyResult<u64> {
    let graph = Graph::of(graph)?;
    let g = &graph.get().graph;
    let mut roots = std::collections::BTreeSet::new();
    for name in &names {
        let t = g
            .tensor_by_name(name)
            .ok_or_else(|| PyValueError::new_err(format!("no tensor `{name}` in the graph")))?;
        let root = g.storage_root(t);
        if persistent || !g.is_persistent(root) {
            roots.insert(root);
        }
    }
    Ok(roots.iter().map(|&r| g.storage_bytes(r)).sum())
}
