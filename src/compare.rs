//! Peak memory with and without planning over a set of graphs, and the guard that keeps it
//! from getting worse.
//!
//! [`compare_graph`] plans one graph the way a user would (`sgc plan` defaults plus
//! `--genetic-iters 20 --seed 0`) and records, next to each other: the unplanned peak, the
//! planned peak, the device bytes after static memory sharing (arena + persistent), the
//! per-op lower bound, the recompute share and the plan time. Small graphs (the tiny zoo
//! models) are also executed on the CPU backend, unplanned and planned, so that the bytes
//! the allocator really handed out stand beside the bytes the plan predicted.
//!
//! A [`Baseline`] (committed as `benches/peak_memory.json`) records the figures of main;
//! [`check`] fails a change that makes a planned peak or an arena more than 1% larger,
//! that loses a saving planning used to give, or whose executor measurement departs from
//! the prediction. Improvements pass, with a hint to refresh the baseline.

use serde::{Deserialize, Serialize};
use sgc_exec::{CpuBackend, Executor};
use sgc_ir::{DeviceProfile, Graph};
use sgc_plan::{Plan, PlanOptions, Strategy};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// Relative growth over the baseline that fails the check.
pub const TOLERANCE: f64 = 0.01;

/// Graphs with at most this many ops are also executed on the CPU backend.
pub const EXECUTE_MAX_OPS: usize = 400;

/// How [`compare_graph`] plans.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    pub genetic_iters: usize,
    pub seed: u64,
    /// Execute small graphs (by name `tiny_*`) on the CPU backend.
    pub execute: bool,
    /// Cost ops without `time_us` by their roofline estimate on this device (the recompute
    /// share, and the search's trade-offs); `None`: the format's rule.
    pub device_profile: Option<DeviceProfile>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            genetic_iters: 20,
            seed: 0,
            execute: true,
            device_profile: None,
        }
    }
}

/// One graph's figures.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// The file's stem: the key in the baseline.
    pub graph: String,
    pub ops: usize,
    pub unplanned_peak: u64,
    pub planned_peak: u64,
    /// Device bytes of the planned schedule after memory sharing: arena + persistent.
    pub arena: u64,
    pub lower_bound: u64,
    pub recompute_share: f64,
    /// Where the recompute share's costs come from (`flops`, `roofline estimate (a100)`, ...).
    #[serde(default)]
    pub cost_source: String,
    pub plan_seconds: f64,
    /// Executor measurements, for graphs small enough to run.
    pub measured: Option<Measured>,
}

/// Bytes the CPU allocator handed out against the bytes the plans predicted.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Measured {
    pub unplanned_predicted: u64,
    pub unplanned_measured: u64,
    pub planned_predicted: u64,
    pub planned_measured: u64,
    /// Whether the planned and unplanned losses of one step are bitwise equal.
    pub loss_equal: bool,
}

/// Why one graph of a comparison failed; each names the graph file.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Load(#[from] sgc_ir::LoadError),
    #[error("{file}: {source}")]
    Plan {
        file: String,
        source: sgc_plan::PlanError,
    },
    #[error("{file}: running one step: {source}")]
    Exec {
        file: String,
        source: sgc_exec::ExecError,
    },
    #[error("{file}: the plan carries no arena layout (planned with `arena: false`)")]
    NoArena { file: String },
}

/// Plans (and maybe executes) one graph file.
pub fn compare_graph(path: &Path, options: &CompareOptions) -> Result<Row, CompareError> {
    let graph = sgc_ir::load_any(path)?;
    let file = path.display().to_string();
    let plan_options = PlanOptions {
        genetic_iters: options.genetic_iters,
        seed: options.seed,
        device_profile: options.device_profile.clone(),
        ..PlanOptions::default()
    };
    let started = Instant::now();
    let plan = sgc_plan::plan(&graph, &plan_options, &Default::default()).map_err(|source| {
        CompareError::Plan {
            file: file.clone(),
            source,
        }
    })?;
    let plan_seconds = started.elapsed().as_secs_f64();
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let measured =
        if options.execute && stem.starts_with("tiny") && graph.num_ops() <= EXECUTE_MAX_OPS {
            Some(measure(&graph, &plan, &file)?)
        } else {
            None
        };
    Ok(Row {
        graph: stem,
        ops: graph.num_ops(),
        unplanned_peak: plan.summary.unplanned_peak,
        planned_peak: plan.summary.planned_peak,
        arena: device_bytes(&plan).ok_or(CompareError::NoArena { file })?,
        lower_bound: plan.summary.lower_bound,
        recompute_share: plan.summary.recompute_share,
        cost_source: plan.summary.cost_source.clone(),
        plan_seconds,
        measured,
    })
}

/// Device bytes a plan needs: its arena after memory sharing plus persistent bytes (`None`
/// for a plan made without an arena).
pub fn device_bytes(plan: &Plan) -> Option<u64> {
    Some(plan.arena.as_ref()?.size + plan.summary.persistent_bytes)
}

/// Runs one step unplanned (the `none` plan's layout) and one step planned on the CPU.
fn measure(graph: &Graph, plan: &Plan, file: &str) -> Result<Measured, CompareError> {
    let none = sgc_plan::plan(
        graph,
        &PlanOptions {
            strategy: Strategy::None,
            ..PlanOptions::default()
        },
        &Default::default(),
    )
    .map_err(|source| CompareError::Plan {
        file: file.to_string(),
        source,
    })?;
    let exec = |source| CompareError::Exec {
        file: file.to_string(),
        source,
    };
    let no_arena = || CompareError::NoArena {
        file: file.to_string(),
    };
    let (unplanned_measured, unplanned_loss) = run_one_step(graph, &none).map_err(exec)?;
    let (planned_measured, planned_loss) = run_one_step(graph, plan).map_err(exec)?;
    Ok(Measured {
        unplanned_predicted: device_bytes(&none).ok_or_else(no_arena)?,
        unplanned_measured,
        planned_predicted: device_bytes(plan).ok_or_else(no_arena)?,
        planned_measured,
        loss_equal: unplanned_loss.to_bits() == planned_loss.to_bits(),
    })
}

fn run_one_step(graph: &Graph, plan: &Plan) -> Result<(u64, f32), sgc_exec::ExecError> {
    let mut exec = Executor::from_plan(graph, plan, CpuBackend::new())?;
    exec.bind_seeded(0)?;
    let losses = exec.run(1)?;
    Ok((exec.report().allocator.peak_bytes, losses[0]))
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

/// The comparison as one markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mib = crate::units::human_bytes;
    let mut s = String::from(
        "| graph | ops | unplanned peak | planned peak | arena + persistent | per-op lower bound | planned / unplanned | arena / lower bound | recompute share | plan time (s) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.1}% | {:.3} |\n",
            r.graph,
            r.ops,
            mib(r.unplanned_peak),
            mib(r.planned_peak),
            mib(r.arena),
            mib(r.lower_bound),
            ratio(r.planned_peak, r.unplanned_peak),
            ratio(r.arena, r.lower_bound),
            r.recompute_share * 100.0,
            r.plan_seconds
        );
    }
    let measured: Vec<&Row> = rows.iter().filter(|r| r.measured.is_some()).collect();
    if !measured.is_empty() {
        s += "\n| graph | unplanned: predicted (B) | unplanned: measured (B) | planned: predicted (B) | planned: measured (B) | loss bitwise equal |\n|---|---:|---:|---:|---:|---|\n";
        for r in measured {
            let m = r.measured.expect("filtered");
            s += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                r.graph,
                m.unplanned_predicted,
                m.unplanned_measured,
                m.planned_predicted,
                m.planned_measured,
                if m.loss_equal { "yes" } else { "NO" }
            );
        }
    }
    s
}

/// The line under the table that says where the recompute shares' costs come from when a
/// device profile estimates them: the graphs it estimated and those with measured times.
pub fn cost_note(rows: &[Row], device: &DeviceProfile) -> String {
    let by_source = |pick: fn(&str) -> bool| -> Vec<&str> {
        rows.iter()
            .filter(|r| pick(&r.cost_source))
            .map(|r| r.graph.as_str())
            .collect()
    };
    let estimated = by_source(|s| s.contains("roofline"));
    let measured = by_source(|s| !s.contains("roofline"));
    let mut note = format!(
        "Recompute share: of one step's time, ops without time_us estimated by roofline on {} ({} TFLOP/s f32, {} TFLOP/s f16/bf16, {} GB/s)",
        device.name(),
        device.f32_tflops(),
        device.half_tflops(),
        device.bandwidth_gbps()
    );
    if !estimated.is_empty() {
        note += &format!(": {}", estimated.join(", "));
    }
    if !measured.is_empty() {
        note += &format!("; every op has time_us in {}", measured.join(", "));
    }
    note + "."
}

/// The committed figures of main, per graph. Reading refuses a field it does not know (and
/// the CLI a key named twice), so a misspelt figure is an error, not a figure left unchecked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// How to refresh this file.
    pub refresh: String,
    pub graphs: BTreeMap<String, BaselineEntry>,
}

/// One graph's committed figures.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BaselineEntry {
    pub unplanned_peak: u64,
    pub planned_peak: u64,
    pub arena: u64,
}

/// The command that refreshes the baseline (a `just` recipe).
pub const REFRESH: &str = "just baseline";

impl Baseline {
    /// The baseline that `rows` would commit.
    pub fn from_rows(rows: &[Row]) -> Baseline {
        Baseline {
            refresh: REFRESH.to_string(),
            graphs: rows
                .iter()
                .map(|r| {
                    let e = BaselineEntry {
                        unplanned_peak: r.unplanned_peak,
                        planned_peak: r.planned_peak,
                        arena: r.arena,
                    };
                    (r.graph.clone(), e)
                })
                .collect(),
        }
    }
}

/// What the guard found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckOutcome {
    /// Regressions: each fails the check.
    pub failures: Vec<String>,
    /// Figures better than the baseline by more than the tolerance, and new graphs.
    pub improvements: Vec<String>,
}

impl CheckOutcome {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Compares fresh figures with the baseline.
pub fn check(rows: &[Row], baseline: &Baseline) -> CheckOutcome {
    let mut out = CheckOutcome::default();
    for r in rows {
        check_measured(r, &mut out);
        let Some(b) = baseline.graphs.get(&r.graph) else {
            out.improvements
                .push(format!("{}: not in the baseline yet", r.graph));
            continue;
        };
        for (what, now, then) in [
            ("planned peak", r.planned_peak, b.planned_peak),
            ("arena", r.arena, b.arena),
        ] {
            if now as f64 > then as f64 * (1.0 + TOLERANCE) {
                out.failures.push(format!(
                    "{}: {what} grew from {then} B to {now} B ({:+.2}%, more than {:.0}%)",
                    r.graph,
                    (ratio(now, then) - 1.0) * 100.0,
                    TOLERANCE * 100.0
                ));
            } else if (now as f64) < then as f64 * (1.0 - TOLERANCE) {
                out.improvements.push(format!(
                    "{}: {what} fell from {then} B to {now} B ({:+.2}%)",
                    r.graph,
                    (ratio(now, then) - 1.0) * 100.0
                ));
            }
        }
        if b.planned_peak < b.unplanned_peak && r.planned_peak >= r.unplanned_peak {
            out.failures.push(format!(
                "{}: planning no longer gets below the unplanned peak ({} B planned, {} B unplanned; the baseline had {} B)",
                r.graph, r.planned_peak, r.unplanned_peak, b.planned_peak
            ));
        }
    }
    out
}

fn check_measured(r: &Row, out: &mut CheckOutcome) {
    let Some(m) = r.measured else { return };
    for (what, predicted, measured) in [
        ("unplanned", m.unplanned_predicted, m.unplanned_measured),
        ("planned", m.planned_predicted, m.planned_measured),
    ] {
        if predicted != measured {
            out.failures.push(format!(
                "{}: the executor allocated {measured} B for the {what} run, the plan predicted {predicted} B",
                r.graph
            ));
        }
    }
    if !m.loss_equal {
        out.failures.push(format!(
            "{}: the planned step's loss is not bitwise equal to the unplanned one",
            r.graph
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(graph: &str, planned: u64, arena: u64) -> Row {
        Row {
            graph: graph.into(),
            ops: 10,
            unplanned_peak: 1000,
            planned_peak: planned,
            arena,
            lower_bound: 100,
            recompute_share: 0.1,
            cost_source: "flops".into(),
            plan_seconds: 0.0,
            measured: None,
        }
    }

    #[test]
    fn the_guard_bites_on_growth_and_passes_improvements() {
        let base = Baseline::from_rows(&[row("g", 500, 520)]);
        assert!(check(&[row("g", 500, 520)], &base).passed());
        assert!(check(&[row("g", 504, 524)], &base).passed(), "within 1%");
        let worse = check(&[row("g", 510, 520)], &base);
        assert_eq!(worse.failures.len(), 1, "{worse:?}");
        assert!(worse.failures[0].contains("planned peak grew"));
        let worse_arena = check(&[row("g", 500, 530)], &base);
        assert!(worse_arena.failures[0].contains("arena grew"));
        let lost = check(&[row("g", 1000, 1000)], &base);
        assert!(lost
            .failures
            .iter()
            .any(|f| f.contains("no longer gets below")));
        let better = check(&[row("g", 400, 420)], &base);
        assert!(
            better.passed() && better.improvements.len() == 2,
            "{better:?}"
        );
    }

    #[test]
    fn the_guard_bites_when_measured_bytes_differ() {
        let mut r = row("tiny", 500, 520);
        r.measured = Some(Measured {
            unplanned_predicted: 10,
            unplanned_measured: 10,
            planned_predicted: 8,
            planned_measured: 9,
            loss_equal: true,
        });
        let base = Baseline::from_rows(std::slice::from_ref(&r));
        let out = check(&[r], &base);
        assert_eq!(out.failures.len(), 1);
        assert!(out.failures[0].contains("allocated 9 B for the planned run"));
    }
}
