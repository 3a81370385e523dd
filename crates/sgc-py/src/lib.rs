//! Python bindings of sgc: the extension module `sgc` (typed by `python/sgc.pyi`), built
//! by maturin from `python/pyproject.toml` into one abi3 wheel with the exporter `sgc_trace`.
//!
//! This crate only converts: Python arguments into the library's types (graphs, plans,
//! sizes, names, with the command line's defaults from `sgc::defaults`), the library's
//! results into Python objects (serde data through the `json` module, so a dict is the JSON
//! the CLI writes), and its errors into the exceptions of `errors`. Planning, checking,
//! reports and fitting are the library's (`sgc::plan`, `sgc::report`, `sgc::fit`), the same
//! functions `sgc plan`, `sgc inspect` and `sgc fit` call; long work runs with the GIL
//! released.

mod convert;
mod errors;
mod graph;
mod info;
mod plan;
mod run;

use convert::{named, opt_size, size, to_py};
use graph::Graph;
use pyo3::prelude::*;
use pyo3::types::PyString;
use sgc::defaults;
use sgc::plan::{PlanOptions, Strategy};
use sgc::report::inspect::InspectReport;

/// What `sgc inspect` reports, as data (`sgc inspect --json`); with `device` (`cpu` or
/// `cuda`), `coverage`: the ops that backend cannot run (`sgc inspect --device`).
#[pyfunction]
#[pyo3(signature = (graph, top=10, align=None, device_profile=None, device=None))]
fn inspect(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = crate::convert::counts::top)] top: usize,
    align: Option<&Bound<'_, PyAny>>,
    device_profile: Option<&str>,
    device: Option<&str>,
) -> PyResult<Py<PyAny>> {
    let backend = match device {
        None => None,
        Some("cpu") => Some(sgc::exec::coverage::Target::Cpu),
        Some("cuda") => Some(sgc::exec::coverage::Target::Cuda),
        Some(other) => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "device={other:?}: expected \"cpu\" or \"cuda\" (the backend whose missing ops to list)"
            )))
        }
    };
    let graph = Graph::of(graph)?;
    let graph = graph.get();
    let align = opt_size(align, "align")?.unwrap_or(defaults::ALIGN);
    let device = device_profile.map(named).transpose()?;
    let file = graph.path.as_deref().unwrap_or(plan::NO_FILE);
    let g = &graph.graph;
    let report = py
        .detach(|| {
            let report = InspectReport::new(g, file, top, device.as_ref(), align)?;
            Ok(match backend {
                Some(target) => report.with_coverage(g, target),
                None => report,
            })
        })
        .map_err(|e| errors::plan_error(py, e, graph.path.as_deref()))?;
    to_py(py, &report)
}

/// Strategies given as a list of names or one comma-separated string.
fn strategies(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Strategy>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(defaults::FIT_STRATEGIES.to_vec());
    };
    let names: Vec<String> = match obj.cast::<PyString>() {
        Ok(s) => s
            .to_str()?
            .split(',')
            .map(|n| n.trim().to_string())
            .collect(),
        Err(_) => obj.extract()?,
    };
    names.iter().map(|n| named(n)).collect()
}

/// What `sgc fit` reports, as data (`sgc fit --json`): the largest batch whose arena plus
/// persistent bytes fit `memory - reserve` and whose plan recomputes at most
/// `max_recompute` of a step (`None`: no limit), unplanned and per strategy. When the
/// persistent bytes alone exceed `memory - reserve`, `BudgetNotMet` (`budget`: that limit,
/// `lower_bound`: the persistent bytes). `arena_effort` takes the values of `plan`'s
/// (`fit`'s default is `fast`); `alloc_effort`, its old name, still works (deprecated).
#[pyfunction]
#[pyo3(signature = (
    graph, memory, reserve=None, strategy=None, genetic_iters=defaults::GENETIC_ITERS,
    thresh_tries=defaults::thresh_tries(), seed=defaults::seed(), align=None,
    arena_effort="fast", workers=None, device_profile=None,
    max_recompute=Some(defaults::FIT_MAX_RECOMPUTE), world_size=1, shard="none", optimizer="none",
    alloc_effort=None,
))]
#[allow(clippy::too_many_arguments)]
fn fit(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    memory: &Bound<'_, PyAny>,
    reserve: Option<&Bound<'_, PyAny>>,
    strategy: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = crate::convert::counts::genetic_iters)] genetic_iters: usize,
    #[pyo3(from_py_with = crate::convert::counts::thresh_tries)] thresh_tries: usize,
    #[pyo3(from_py_with = crate::convert::counts::seed)] seed: u64,
    align: Option<&Bound<'_, PyAny>>,
    arena_effort: &str,
    #[pyo3(from_py_with = crate::convert::counts::workers)] workers: Option<usize>,
    device_profile: Option<&str>,
    max_recompute: Option<f64>,
    #[pyo3(from_py_with = crate::convert::counts::world_size)] world_size: u64,
    shard: &str,
    optimizer: &str,
    alloc_effort: Option<&str>,
) -> PyResult<Py<PyAny>> {
    let distribution = plan::distribution(world_size, shard, optimizer)?;
    if let Some(m) = max_recompute.filter(|m| !m.is_finite() || *m < 0.0) {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "max_recompute={m}: expected a share of a step of at least 0 (1/3: a third), or None for no limit"
        )));
    }
    let base = PlanOptions {
        seed,
        genetic_iters,
        thresh_tries,
        device_profile: device_profile.map(named).transpose()?,
        ..PlanOptions::default()
    };
    let options: Vec<PlanOptions> = strategies(strategy)?
        .into_iter()
        .map(|strategy| PlanOptions {
            strategy,
            ..base.clone()
        })
        .collect();
    let mut opts = sgc::fit::FitOptions::new(size(memory, "memory")?);
    opts.reserve = opt_size(reserve, "reserve")?.unwrap_or(0);
    opts.align = opt_size(align, "align")?.unwrap_or(defaults::ALIGN);
    opts.effort = match alloc_effort {
        None => named(arena_effort)?,
        Some(_) if arena_effort != "fast" => {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "alloc_effort is the old name of arena_effort: give one of them",
            ))
        }
        Some(old) => {
            PyErr::warn(
                py,
                &py.get_type::<pyo3::exceptions::PyDeprecationWarning>(),
                c"alloc_effort is deprecated: use arena_effort (the same values)",
                1,
            )?;
            named(old)?
        }
    };
    opts.workers = workers;
    opts.max_recompute = max_recompute;
    let graph = Graph::of(graph)?;
    let graph = graph.get();
    let (g, per_rank) = plan::rank_graph(py, &graph.graph, &distribution, graph.path.as_deref())?;
    let g = &g;
    let report = py
        .detach(|| sgc::fit::fit(g, &options, &opts, &mut |_, _| {}))
        .map_err(|e| errors::fit_error(py, e, graph.path.as_deref()))?;
    let out = to_py(py, &report)?;
    if let Some(p) = per_rank {
        out.bind(py).set_item("per_rank", to_py(py, &p)?)?;
    }
    Ok(out)
}

/// The module `sgc`.
#[pymodule]
#[pyo3(name = "sgc")]
fn sgc_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Graph>()?;
    m.add_class::<plan::Plan>()?;
    m.add_function(wrap_pyfunction!(graph::load, m)?)?;
    m.add_function(wrap_pyfunction!(plan::plan, m)?)?;
    m.add_function(wrap_pyfunction!(plan::plan_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(plan::verify, m)?)?;
    m.add_function(wrap_pyfunction!(plan::load_plan, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(fit, m)?)?;
    m.add_function(wrap_pyfunction!(run::execute, m)?)?;
    run::register(m)?;
    m.add_function(wrap_pyfunction!(info::device_profiles, m)?)?;
    m.add_function(wrap_pyfunction!(info::device_profile, m)?)?;
    m.add_function(wrap_pyfunction!(info::roofline, m)?)?;
    m.add_function(wrap_pyfunction!(info::dtype_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(info::executor_ops, m)?)?;
    m.add_function(wrap_pyfunction!(info::option_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(info::strategies, m)?)?;
    m.add_function(wrap_pyfunction!(info::figures, m)?)?;
    m.add_function(wrap_pyfunction!(info::storage_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(info::storage_sizes, m)?)?;
    errors::register(m)
}
