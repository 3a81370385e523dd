//! `sgc.Plan`, `sgc.plan`, `sgc.verify` and `sgc.load_plan`: the planner, its verifier and
//! plan files, with the command line's defaults (`sgc::defaults`) and its report
//! (`sgc::report::plan`). Planning runs with the GIL released.

use crate::convert::{self, json_loads, named, opt_size, to_py, Source};
use crate::errors;
use crate::graph::Graph;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sgc::defaults;
use sgc::plan::{PlanOptions, PlanStats, RunConfig};
use sgc::report::plan::{workers_used, PlanReport};
use std::sync::Arc;
use std::time::Instant;

/// What a graph argument is called in reports when it was not read from a file.
pub const NO_FILE: &str = "<string>";

/// A verified checkpointing plan (format `sgc-plan`) for one graph.
#[pyclass(frozen, name = "Plan", module = "sgc")]
pub struct Plan {
    plan: sgc::plan::Plan,
    graph: Arc<sgc::ir::Graph>,
    /// One rank's terms when the graph planned is a rank's (`world_size`, `shard`, `optimizer`).
    per_rank: Option<sgc::ir::distributed::PerRank>,
    /// What made it (none for a plan read from a file).
    stats: Option<PlanStats>,
    file: String,
    workers: usize,
    secs: f64,
}

#[pymethods]
impl Plan {
    /// The plan file's JSON object, exactly what `sgc plan -o plan.json` writes.
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        json_loads(py, &self.plan.to_json())
    }

    /// The plan file's text.
    fn to_json(&self) -> String {
        self.plan.to_json()
    }

    /// Writes the plan file (atomically: a temporary file renamed into place).
    fn save(&self, path: std::path::PathBuf) -> PyResult<()> {
        let cannot = |e: std::io::Error| {
            pyo3::exceptions::PyOSError::new_err(format!("{}: cannot write: {e}", path.display()))
        };
        // A missing folder is made, as `sgc plan -o` makes it.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(cannot)?;
        }
        sgc::ir::file::write_atomic(&path, self.plan.to_json().as_bytes()).map_err(cannot)
    }

    /// The plan's figures (the plan file's `summary`), with `strategy`, `arena_bytes`,
    /// `device_bytes` (arena + persistent: what a device needs; None without an arena),
    /// `saved_bytes` (kept from the forward for the backward), `step_peak` (the most bytes
    /// the step allocates at once beyond parameters, state and its inputs: what PyTorch's
    /// allocator counts over a step) and `per_rank` (the terms of one rank's graph, or None).
    #[getter]
    fn summary(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let summary = to_py(py, &self.plan.summary)?;
        let dict = summary.bind(py).cast::<PyDict>()?;
        let arena = self.plan.arena.as_ref().map(|a| a.size);
        dict.set_item("strategy", self.plan.options.strategy.as_str())?;
        dict.set_item("arena_bytes", arena)?;
        dict.set_item(
            "device_bytes",
            arena.map(|a| a + self.plan.summary.persistent_bytes),
        )?;
        let steps: Vec<(sgc::ir::OpId, bool)> = self
            .plan
            .steps
            .iter()
            .map(|s| (s.op, s.recompute))
            .collect();
        dict.set_item(
            "saved_bytes",
            sgc::plan::plan::saved_bytes(&self.graph, &steps),
        )?;
        dict.set_item("step_peak", self.plan.step_peak(&self.graph))?;
        dict.set_item(
            "per_rank",
            self.per_rank.as_ref().map(|p| to_py(py, p)).transpose()?,
        )?;
        Ok(summary)
    }

    /// The schedule: `(op name, recompute)` per step.
    #[getter]
    fn steps(&self) -> Vec<(String, bool)> {
        self.plan
            .steps
            .iter()
            .map(|s| (self.graph.op(s.op).name.clone(), s.recompute))
            .collect()
    }

    /// The graph's fingerprint the plan was made for.
    #[getter]
    fn fingerprint(&self) -> &str {
        &self.plan.graph.fingerprint
    }

    /// The report `sgc plan` prints (progress lines excluded).
    fn report(&self) -> String {
        let stats = self.stats.as_ref();
        let mut report = PlanReport::new(
            &self.plan,
            &self.graph,
            stats,
            self.file.clone(),
            self.workers,
            self.secs,
            None,
        );
        report.per_rank = self.per_rank.clone();
        report.render()
    }

    fn __repr__(&self) -> String {
        let s = &self.plan.summary;
        format!(
            "<sgc.Plan {} for {}: planned peak {} B of unplanned {} B, recompute {:.1}%>",
            self.plan.options.strategy,
            self.plan.graph,
            s.planned_peak,
            s.unplanned_peak,
            100.0 * s.recompute_share
        )
    }
}

/// `world_size`, `shard` and `optimizer` as one rank's setting (`sgc_ir::distributed`).
pub(crate) fn distribution(
    world_size: u64,
    shard: &str,
    optimizer: &str,
) -> PyResult<sgc::ir::distributed::Distribution> {
    let bad =
        |what: &str, e: String| pyo3::exceptions::PyValueError::new_err(format!("{what}: {e}"));
    Ok(sgc::ir::distributed::Distribution {
        world_size,
        shard: shard.parse().map_err(|e| bad("shard", e))?,
        optimizer: optimizer.parse().map_err(|e| bad("optimizer", e))?,
    })
}

/// One rank's graph (the graph itself when `d` asks for nothing), and what it added.
pub(crate) fn rank_graph(
    py: Python<'_>,
    graph: &Arc<sgc::ir::Graph>,
    d: &sgc::ir::distributed::Distribution,
    path: Option<&str>,
) -> PyResult<(Arc<sgc::ir::Graph>, Option<sgc::ir::distributed::PerRank>)> {
    if d.is_identity() && d.world_size == 1 {
        return Ok((Arc::clone(graph), None));
    }
    let (g, r) = sgc::ir::distributed::per_rank(graph, d).map_err(|e| {
        let at = path.map(|p| format!("{p}: ")).unwrap_or_default();
        let _ = py;
        errors::GraphError::new_err(format!("{at}{e}"))
    })?;
    Ok((Arc::new(g), Some(r)))
}

/// The graph's file as reports name it, and as errors are prefixed (None: not a file).
fn file_of(graph: &Graph) -> (String, Option<String>) {
    let path = graph.path.clone();
    (path.clone().unwrap_or_else(|| NO_FILE.to_string()), path)
}

/// Plans checkpointing (and the arena) for a graph and verifies the plan; the options and
/// defaults are those of `sgc plan`. Sizes take ints or strings such as `"10GiB"`;
/// `time_limit_s` is `--time-limit` (strategy `optimal`: the seconds it may take, its starts
/// and the solver together; None: 60).
#[pyfunction]
#[pyo3(signature = (
    graph, strategy="sublinear", genetic_iters=defaults::GENETIC_ITERS, budget=None,
    seed=defaults::seed(), workers=None, arena=true, align=None, goal=None, lb_memory=None,
    thresh_tries=defaults::thresh_tries(), pool_size=defaults::pool_size(),
    eviction_threshold=None, evictee_min_size=None, sqrt_sampling=false, device_profile=None,
    budget_of="device", arena_effort="plan", host_link=None, host_memory=None, offload=true,
    world_size=1, shard="none", optimizer="none", time_limit_s=None,
))]
#[allow(clippy::too_many_arguments)]
pub fn plan(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    strategy: &str,
    #[pyo3(from_py_with = crate::convert::counts::genetic_iters)] genetic_iters: usize,
    budget: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = crate::convert::counts::seed)] seed: u64,
    #[pyo3(from_py_with = crate::convert::counts::workers)] workers: Option<usize>,
    arena: bool,
    align: Option<&Bound<'_, PyAny>>,
    goal: Option<&str>,
    lb_memory: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = crate::convert::counts::thresh_tries)] thresh_tries: usize,
    #[pyo3(from_py_with = crate::convert::counts::pool_size)] pool_size: usize,
    eviction_threshold: Option<&Bound<'_, PyAny>>,
    evictee_min_size: Option<&Bound<'_, PyAny>>,
    sqrt_sampling: bool,
    device_profile: Option<&str>,
    budget_of: &str,
    arena_effort: &str,
    host_link: Option<&str>,
    host_memory: Option<&Bound<'_, PyAny>>,
    offload: bool,
    #[pyo3(from_py_with = crate::convert::counts::world_size)] world_size: u64,
    shard: &str,
    optimizer: &str,
    #[pyo3(from_py_with = crate::convert::counts::time_limit_s)] time_limit_s: Option<u64>,
) -> PyResult<Plan> {
    let distribution = distribution(world_size, shard, optimizer)?;
    let mut options = PlanOptions {
        genetic_iters,
        seed,
        arena,
        thresh_tries,
        pool_size,
        sqrt_sampling,
        time_limit_s,
        ..PlanOptions::default()
    };
    options.strategy = named(strategy)?;
    options.goal = goal.map(named).transpose()?.unwrap_or_default();
    let budget = convert::budget(budget)?;
    options.budget_of = named(budget_of)?;
    options.arena_effort = named(arena_effort)?;
    options.lb_memory = opt_size(lb_memory, "lb_memory")?;
    options.eviction_threshold = opt_size(eviction_threshold, "eviction_threshold")?;
    if let Some(min) = opt_size(evictee_min_size, "evictee_min_size")? {
        options.evictee_min_size = min;
    }
    options.align = opt_size(align, "align")?.unwrap_or(defaults::ALIGN);
    options.device_profile = device_profile.map(named).transpose()?;
    let link = host_link.map(convert::host_link).transpose()?;
    let host_memory = opt_size(host_memory, "host_memory")?;
    let graph = Graph::of(graph)?;
    let graph = graph.get();
    let (file, path) = file_of(graph);
    let run = RunConfig {
        workers,
        progress: None,
    };
    let (g, per_rank) = rank_graph(py, &graph.graph, &distribution, path.as_deref())?;
    let g = &g;
    // The budget first: offload applies only under one.
    options.budget = budget
        .map(|b| py.detach(|| b.bytes(g, &options)))
        .transpose()
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("{file}: {e}")))?;
    let options = defaults::with_offload(options, link, host_memory, offload);
    let (result, secs) = py.detach(|| {
        let start = Instant::now();
        let result = sgc::plan::plan_with_stats(g, &options, &run);
        (result, start.elapsed().as_secs_f64())
    });
    let (mut plan, stats) = result.map_err(|e| errors::plan_error(py, e, path.as_deref()))?;
    plan.graph.path = path;
    Ok(Plan {
        plan,
        graph: Arc::clone(g),
        per_rank,
        stats: Some(stats),
        file,
        workers: workers_used(workers),
        secs,
    })
}

/// A plan of an explicit schedule (`steps`: op indices, in order; an op run again is a
/// recomputation) with storages offloaded to host memory and back (`offloads`: dicts of
/// the plan file's `offloads` entries, `root` a tensor index), as the planner assembles
/// its own; verified. Offloads need a `host_link` (`"h100"`, `"44,44,10"`) and ops with
/// `time_us` or a `device_profile` to time the copies against.
#[pyfunction]
#[pyo3(signature = (graph, steps, offloads=None, host_link=None, device_profile=None, arena=true, align=None))]
#[allow(clippy::too_many_arguments)]
pub fn plan_schedule(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    steps: Vec<usize>,
    offloads: Option<&Bound<'_, PyAny>>,
    host_link: Option<&str>,
    device_profile: Option<&str>,
    arena: bool,
    align: Option<&Bound<'_, PyAny>>,
) -> PyResult<Plan> {
    let graph = Graph::of(graph)?;
    let graph = graph.get();
    let (file, path) = file_of(graph);
    let g = &graph.graph;
    let options = PlanOptions {
        strategy: sgc::plan::Strategy::None,
        arena,
        align: opt_size(align, "align")?.unwrap_or(defaults::ALIGN),
        device_profile: device_profile.map(named).transpose()?,
        host_link: host_link.map(convert::host_link).transpose()?,
        ..PlanOptions::default()
    };
    let ops = convert::op_ids(g, &steps)?;
    let offloads: Vec<sgc::ir::Offload> = match offloads.filter(|o| !o.is_none()) {
        Some(list) => convert::from_py(list, "offloads")?,
        None => Vec::new(),
    };
    let start = Instant::now();
    let mut plan = py
        .detach(|| sgc::plan::plan_schedule_offloaded(g, &options, &ops, &offloads))
        .map_err(|e| errors::plan_error(py, e, path.as_deref()))?;
    plan.graph.path = path.clone();
    py.detach(|| sgc::plan::check(g, &plan))
        .map_err(|e| errors::check_error(py, e, path.as_deref()))?;
    Ok(Plan {
        plan,
        graph: Arc::clone(g),
        per_rank: None,
        stats: None,
        file,
        workers: workers_used(None),
        secs: start.elapsed().as_secs_f64(),
    })
}

/// A plan argument: an `sgc.Plan`, or a plan file, its text or its dict.
pub(crate) fn plan_of(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<(sgc::plan::Plan, Option<String>)> {
    if let Ok(p) = obj.cast::<Plan>() {
        return Ok((p.get().plan.clone(), None));
    }
    let (text, file) = match Source::of(obj, "a plan")? {
        Source::Text(text) => (text, None),
        Source::Path(path) => {
            let file = path.display().to_string();
            let text = py
                .detach(|| sgc::ir::file::read_limited(&path))
                .map_err(|e| {
                    errors::PlanError::new_err(format!("{file}: cannot read the plan: {e}"))
                })?;
            (text, Some(file))
        }
    };
    let plan = sgc::plan::Plan::from_json(&text)
        .map_err(|e| errors::plan_error(py, e.into(), file.as_deref()))?;
    Ok((plan, file))
}

/// Checks a plan against a graph as `sgc plan --check` does: the verifier's replay, the
/// budget its options state, and its summary reproduced. Returns the verified figures;
/// raises `PlanRejected` listing the violations.
#[pyfunction]
pub fn verify(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    plan: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let graph = Graph::of(graph)?;
    let g = &graph.get().graph;
    let (plan, file) = plan_of(py, plan)?;
    let peak = py
        .detach(|| sgc::plan::check(g, &plan))
        .map_err(|e| errors::check_error(py, e, file.as_deref()))?;
    let out = PyDict::new(py);
    let persistent = g.persistent_bytes();
    let arena = plan.arena.as_ref().map(|a| a.size);
    out.set_item("peak_bytes", peak.peak_bytes)?;
    out.set_item("peak_step", peak.peak_step)?;
    out.set_item("persistent_bytes", persistent)?;
    out.set_item("arena_bytes", arena)?;
    out.set_item("device_bytes", arena.map(|a| a + persistent))?;
    out.set_item("steps", plan.steps.len())?;
    out.set_item("summary_reproduced", true)?;
    Ok(out.into_any().unbind())
}

/// Reads a plan (a file, its text or its dict) for `graph`: refuses a plan made for
/// another graph (`GraphMismatch`) and one the verifier rejects (`PlanRejected`).
#[pyfunction]
pub fn load_plan(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    graph: &Bound<'_, PyAny>,
) -> PyResult<Plan> {
    let graph = Graph::of(graph)?;
    let graph = graph.get();
    let (plan, plan_file) = plan_of(py, source)?;
    let located = plan_file.as_deref();
    plan.check_graph(&graph.graph)
        .map_err(|e| errors::plan_error(py, e.into(), located))?;
    let g = &graph.graph;
    py.detach(|| sgc::plan::check(g, &plan))
        .map_err(|e| errors::check_error(py, e, located))?;
    Ok(Plan {
        plan,
        graph: Arc::clone(g),
        per_rank: None,
        stats: None,
        file: file_of(graph).0,
        workers: workers_used(None),
        secs: 0.0,
    })
}
