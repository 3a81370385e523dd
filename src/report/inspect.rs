//! The report of a graph, as `sgc inspect` prints it and as the Python bindings return it
//! (`sgc.inspect`): ops per phase, tensors, persistent bytes, the unplanned peak next to
//! the per-op and least-peak lower bounds, the unplanned arena, the step's cost and its source, and the
//! largest tensors. With a device profile, ops without `time_us` are costed by their
//! roofline estimate and the report gives the share of estimated time in memory-bound ops.
//! With a backend ([`InspectReport::with_coverage`]), the ops it cannot run, from the
//! executor's own checks ([`crate::exec::coverage`]), without its device.

use crate::exec::coverage::{self, Gap, Target};
use crate::ir::{
    CostSource, CostSources, DeviceProfile, EstimateSummary, Graph, Phase, TensorId, TensorKind,
};
use crate::plan::PlanError;
use crate::units::human_bytes;
use serde::Serialize;

/// What `sgc inspect` reports (`--json` writes it as is; [`InspectReport::render`] is the text).
#[derive(Serialize)]
pub struct InspectReport {
    pub file: String,
    pub name: Option<String>,
    pub ops: usize,
    pub ops_per_phase: PhaseCounts,
    pub tensors: usize,
    pub tensors_per_kind: KindCounts,
    pub views: usize,
    pub persistent_bytes: u64,
    pub unplanned_peak_bytes: u64,
    pub unplanned_peak_op: Option<String>,
    pub lower_bound_bytes: u64,
    pub lower_bound_op: Option<String>,
    pub peak_over_lower_bound: f64,
    /// The least-peak lower bound (`sgc_plan::least_peak`): no schedule that keeps or
    /// recomputes, without offloading, peaks below it; at least the per-op bound.
    pub least_peak_bytes: u64,
    pub least_peak_op: Option<String>,
    /// The kept-outputs lower bound (`sgc_plan::peak_bounds`): no such schedule that
    /// also keeps each graph output from when it is made (every strategy's but `optimal`'s)
    /// peaks below it; at least the least-peak bound, and equal to it (same op) where the
    /// graph outputs made before an op do not raise it.
    pub kept_outputs_bytes: u64,
    pub kept_outputs_op: Option<String>,
    /// The traced order's lifetimes placed in one arena by the same allocator as plans.
    pub unplanned_arena: Option<ArenaRow>,
    /// One unplanned step: every op's cost, from `cost_source`.
    pub total_cost: f64,
    /// `time_us`, `flops`, `bytes moved`, `roofline estimate (NAME)`, ... (`CostSources`).
    pub cost_source: String,
    pub cost_sources: CostCounts,
    /// The profile that estimates ops without `time_us` (absent without `--device-profile`).
    pub device_profile: Option<DeviceProfile>,
    /// What the estimates add up to, and the share of it in memory-bound ops.
    pub estimates: Option<EstimateRow>,
    pub largest_tensors: Vec<TensorRow>,
    /// The ops a backend cannot run (absent unless a backend was named).
    pub coverage: Option<CoverageRow>,
}

/// What `sgc inspect --device` adds: the ops `device` cannot run, and how many per type.
#[derive(Serialize)]
pub struct CoverageRow {
    pub device: Target,
    pub ops: usize,
    pub missing: Vec<Gap>,
    /// `(op type, ops)` of `missing`, in the order each type first appears.
    pub missing_per_type: Vec<(String, usize)>,
}

#[derive(Serialize)]
pub struct EstimateRow {
    pub estimated_ops: usize,
    pub estimated_time_us: f64,
    pub memory_bound_ops: usize,
    pub memory_bound_time_us: f64,
    /// Share of the estimated time in ops whose bytes term exceeds their flops term.
    pub memory_bound_share: f64,
}

impl From<EstimateSummary> for EstimateRow {
    fn from(s: EstimateSummary) -> Self {
        EstimateRow {
            estimated_ops: s.estimated_ops,
            estimated_time_us: s.estimated_time_us,
            memory_bound_ops: s.memory_bound_ops,
            memory_bound_time_us: s.memory_bound_time_us,
            memory_bound_share: s.memory_bound_share(),
        }
    }
}

#[derive(Serialize)]
pub struct ArenaRow {
    pub arena_bytes: u64,
    /// Peak of live bytes, each size padded to `align`.
    pub live_peak_bytes: u64,
    /// `100 * (arena / live peak - 1)`; negative when in-place sharing beats the bound.
    pub fragmentation_percent: f64,
    /// Arena plus persistent bytes: what the unplanned step needs on a device.
    pub device_bytes: u64,
    pub align: u64,
}

/// The unplanned schedule's arena: the `none` plan (traced order, free after last use).
fn unplanned_arena(g: &Graph, align: u64) -> Result<ArenaRow, PlanError> {
    let options = crate::plan::PlanOptions {
        strategy: crate::plan::Strategy::None,
        align,
        ..Default::default()
    };
    let plan = crate::plan::plan(g, &options, &Default::default())?;
    let a = plan.arena.as_ref().ok_or_else(|| {
        crate::plan::PlanError::Arena("the plan came back without an arena".into())
    })?;
    Ok(ArenaRow {
        arena_bytes: a.size,
        live_peak_bytes: a.lower_bound,
        fragmentation_percent: a.fragmentation_percent(),
        device_bytes: a.size + plan.summary.persistent_bytes,
        align,
    })
}

#[derive(Serialize, Default)]
pub struct PhaseCounts {
    pub forward: usize,
    pub backward: usize,
    pub update: usize,
    pub unknown: usize,
}

#[derive(Serialize, Default)]
pub struct KindCounts {
    pub activation: usize,
    pub input: usize,
    pub param: usize,
    pub state: usize,
    pub r#const: usize,
}

#[derive(Serialize, Default)]
pub struct CostCounts {
    pub time_us: usize,
    pub flops: usize,
    pub bytes: usize,
    pub roofline: usize,
}

#[derive(Serialize)]
pub struct TensorRow {
    pub name: String,
    pub kind: &'static str,
    pub dtype: &'static str,
    pub shape: Vec<u64>,
    pub bytes: u64,
}

impl InspectReport {
    /// The report of `g`, read from `file`: its `top` largest tensors, costs with
    /// `device`'s roofline estimate for ops without `time_us`, and the unplanned arena at
    /// `align`.
    pub fn new(
        g: &Graph,
        file: &str,
        top: usize,
        device: Option<&DeviceProfile>,
        align: u64,
    ) -> Result<InspectReport, PlanError> {
        let mut report = build(g, file, top, device);
        report.unplanned_arena = Some(unplanned_arena(g, align)?);
        Ok(report)
    }

    /// The report with the ops `device` cannot run.
    pub fn with_coverage(mut self, g: &Graph, device: Target) -> Self {
        let missing = coverage::gaps(g, device);
        self.coverage = Some(CoverageRow {
            device,
            ops: g.num_ops(),
            missing_per_type: coverage::per_type(&missing),
            missing,
        });
        self
    }

    /// The text `sgc inspect` prints.
    pub fn render(&self) -> String {
        render(self)
    }
}

fn build(g: &Graph, file: &str, top: usize, device: Option<&DeviceProfile>) -> InspectReport {
    let mut phases = PhaseCounts::default();
    let mut costs = CostCounts::default();
    let mut sources = CostSources::default();
    let mut total_cost = 0.0;
    for op in g.op_ids() {
        match g.phase(op) {
            Some(Phase::Forward) => phases.forward += 1,
            Some(Phase::Backward) => phases.backward += 1,
            Some(Phase::Update) => phases.update += 1,
            None => phases.unknown += 1,
        }
        let (c, source) = g.op_cost_with(op, device);
        total_cost += c;
        sources.insert(source);
        match source {
            CostSource::TimeUs => costs.time_us += 1,
            CostSource::Flops => costs.flops += 1,
            CostSource::Bytes => costs.bytes += 1,
            CostSource::Roofline => costs.roofline += 1,
        }
    }
    let mut kinds = KindCounts::default();
    for t in g.tensors() {
        match t.kind {
            TensorKind::Activation => kinds.activation += 1,
            TensorKind::Input => kinds.input += 1,
            TensorKind::Param => kinds.param += 1,
            TensorKind::State => kinds.state += 1,
            TensorKind::Const => kinds.r#const += 1,
        }
    }
    let profile = g.memory_profile();
    let lb = g.lower_bound();
    let (least, kept) = crate::plan::peak_bounds(g);
    let op_name = |s: usize| g.ops()[s].name.clone();
    InspectReport {
        file: file.to_string(),
        name: g.name().map(str::to_string),
        ops: g.num_ops(),
        ops_per_phase: phases,
        tensors: g.num_tensors(),
        tensors_per_kind: kinds,
        views: g.tensors().iter().filter(|t| t.alias_of.is_some()).count(),
        persistent_bytes: profile.persistent_bytes,
        unplanned_peak_bytes: profile.peak,
        unplanned_peak_op: profile.peak_step.map(op_name),
        lower_bound_bytes: lb.bytes,
        lower_bound_op: lb.op.map(|o| op_name(o.index())),
        peak_over_lower_bound: ratio(profile.peak, lb.bytes),
        least_peak_bytes: least.bytes,
        least_peak_op: least.op.map(|o| op_name(o.index())),
        kept_outputs_bytes: kept.bytes,
        kept_outputs_op: kept.op.map(|o| op_name(o.index())),
        unplanned_arena: None,
        total_cost,
        cost_source: sources.describe(device),
        cost_sources: costs,
        device_profile: device.cloned(),
        estimates: device.map(|d| EstimateSummary::of(g, d).into()),
        largest_tensors: largest(g, top),
        coverage: None,
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

/// The largest tensors that own storage (views excluded), largest first, ties by name.
fn largest(g: &Graph, top: usize) -> Vec<TensorRow> {
    let mut ids: Vec<TensorId> = g
        .tensor_ids()
        .filter(|&t| g.tensor(t).alias_of.is_none())
        .collect();
    ids.sort_by(|&a, &b| {
        g.tensor(b)
            .size
            .cmp(&g.tensor(a).size)
            .then_with(|| g.tensor(a).name.cmp(&g.tensor(b).name))
    });
    ids.into_iter()
        .take(top)
        .map(|t| {
            let tensor = g.tensor(t);
            TensorRow {
                name: tensor.name.clone(),
                kind: tensor.kind.as_str(),
                dtype: tensor.dtype.as_str(),
                shape: tensor.shape.clone(),
                bytes: tensor.size,
            }
        })
        .collect()
}

/// The step's total cost and its source; with estimates, how much of them is memory-bound.
fn cost_lines(r: &InspectReport) -> String {
    let c = &r.cost_sources;
    let mut s = format!(
        "total cost  {:.4e}, from {}: time_us on {} ops, flops on {}, bytes moved on {}",
        r.total_cost, r.cost_source, c.time_us, c.flops, c.bytes
    );
    if r.device_profile.is_some() {
        s += &format!(", roofline estimate on {}", c.roofline);
    }
    s += "\n";
    match (&r.device_profile, &r.estimates) {
        (Some(d), Some(e)) if e.estimated_ops == 0 => {
            s += &format!("estimated   nothing: every op has time_us ({} unused)\n", d.name());
        }
        (Some(d), Some(e)) => s += &format!(
            "estimated   {:.4e} us on {} ops (roofline {}: {} TFLOP/s f32, {} TFLOP/s f16/bf16, {} GB/s): {:.1}% of it in {} memory-bound ops (bytes take longer than flops)\n",
            e.estimated_time_us,
            e.estimated_ops,
            d.name(),
            d.f32_tflops(),
            d.half_tflops(),
            d.bandwidth_gbps(),
            100.0 * e.memory_bound_share,
            e.memory_bound_ops
        ),
        _ => {}
    }
    s
}

/// `all N ops run on DEVICE`, or each op type that does not with its count and the
/// executor's reason for its first op.
fn coverage_lines(c: &CoverageRow) -> String {
    let device = c.device.name();
    if c.missing.is_empty() {
        return format!("coverage    all {} ops run on {device}\n", c.ops);
    }
    let mut s = format!(
        "coverage    {} of {} ops do not run on {device} ({} op types):\n",
        c.missing.len(),
        c.ops,
        c.missing_per_type.len()
    );
    for (op_type, count) in &c.missing_per_type {
        if let Some(first) = c.missing.iter().find(|g| &g.op_type == op_type) {
            s += &format!("  {count:>5} x {op_type}: {}\n", first.reason);
        }
    }
    s
}

fn render(r: &InspectReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let p = &r.ops_per_phase;
    let k = &r.tensors_per_kind;
    let _ = writeln!(
        s,
        "graph       {} ({})",
        r.name.as_deref().unwrap_or("(unnamed)"),
        r.file
    );
    let phase_text = if p.unknown == r.ops && r.ops > 0 {
        "no phase information: a plain sequence".to_string()
    } else {
        format!(
            "forward {}, backward {}, update {}, unknown {}",
            p.forward, p.backward, p.update, p.unknown
        )
    };
    let _ = writeln!(s, "ops         {} ({phase_text})", r.ops);
    let _ = writeln!(
        s,
        "tensors     {} (activation {}, input {}, param {}, state {}, const {}; {} views)",
        r.tensors, k.activation, k.input, k.param, k.state, k.r#const, r.views
    );
    let _ = writeln!(s, "persistent  {}", human_bytes(r.persistent_bytes));
    let at = |o: &Option<String>| {
        o.as_ref()
            .map(|n| format!(" at op `{n}`"))
            .unwrap_or_default()
    };
    let bytes = |b: u64| format!("{:>12} ({b} B)", human_bytes(b));
    let _ = writeln!(
        s,
        "unplanned peak     {}{}",
        bytes(r.unplanned_peak_bytes),
        at(&r.unplanned_peak_op)
    );
    let _ = writeln!(
        s,
        "per-op lower bound {}{}",
        bytes(r.lower_bound_bytes),
        at(&r.lower_bound_op)
    );
    let _ = writeln!(s, "peak / lower bound {:>11.2}x", r.peak_over_lower_bound);
    let _ = writeln!(
        s,
        "least-peak bound   {}{}  (no plan that keeps or recomputes peaks lower; offloading can)",
        bytes(r.least_peak_bytes),
        at(&r.least_peak_op)
    );
    if r.kept_outputs_bytes > r.least_peak_bytes {
        let _ = writeln!(
            s,
            "kept-outputs bound {}{}  (no plan that also keeps each graph output, such as a gradient, from when it is made peaks lower: every strategy's but optimal's)",
            bytes(r.kept_outputs_bytes),
            at(&r.kept_outputs_op)
        );
    }
    if let Some(a) = &r.unplanned_arena {
        let _ = writeln!(
            s,
            "unplanned arena    {}  (aligned live peak {}, {}; arena + persistent {}, align {} B)",
            bytes(a.arena_bytes),
            human_bytes(a.live_peak_bytes),
            super::plan::fragmentation(a.fragmentation_percent),
            human_bytes(a.device_bytes),
            a.align
        );
    }
    s += &cost_lines(r);
    let _ = writeln!(s, "largest tensors:");
    for (i, t) in r.largest_tensors.iter().enumerate() {
        let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        let _ = writeln!(
            s,
            "  {:>2}. {:>10}  {:<10} {:<4} [{}]  {}",
            i + 1,
            human_bytes(t.bytes),
            t.kind,
            t.dtype,
            shape.join(", "),
            t.name
        );
    }
    if let Some(c) = &r.coverage {
        s += &coverage_lines(c);
    }
    s
}
