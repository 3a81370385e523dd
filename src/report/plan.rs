//! The report of a plan, as `sgc plan` prints it and as the Python bindings return it:
//! unplanned vs planned peak, the per-op lower bound (and, with `--bound`, the least-peak
//! one and the bound on recompute), the bytes kept from the forward for
//! the backward against the traced order's, the arena against its aligned live peak,
//! recompute share and its cost source, and what the search did. One implementation
//! for the command line (text and `--json`) and for `sgc.Plan.report()` in Python.

use crate::ir::{Graph, OpId};
use crate::plan::{LowerBoundKind, Plan, PlanOptions, PlanStats, SearchStats};
use crate::units::human_bytes;
use serde::Serialize;

/// What `sgc plan` reports (`--json` writes it as is; [`PlanReport::render`] is the text).
#[derive(Serialize)]
pub struct PlanReport<'a> {
    pub file: String,
    pub graph: Option<&'a str>,
    pub strategy: &'a str,
    pub options: &'a PlanOptions,
    pub workers: usize,
    pub unplanned_peak_bytes: u64,
    pub planned_peak_bytes: u64,
    pub planned_over_unplanned: f64,
    pub lower_bound_bytes: u64,
    pub planned_over_lower_bound: f64,
    pub persistent_bytes: u64,
    /// Bytes the plan keeps from its forward for its backward
    /// ([`sgc_plan::plan::saved_bytes`]: what `torch.compile`'s partition saves, and what
    /// `--budget-of saved` bounds), beside the traced order's.
    pub saved_bytes: u64,
    pub unplanned_saved_bytes: u64,
    pub saved_over_unplanned: f64,
    pub recompute_share: f64,
    pub recompute_cost: f64,
    pub step_cost: f64,
    pub cost_source: &'a str,
    pub checkpoints: usize,
    pub recomputed_ops: usize,
    pub recompute_steps: usize,
    pub steps: usize,
    /// The most times any one op runs in the step (1: nothing is recomputed).
    pub max_op_runs: u32,
    /// The plan's offloads and their predicted cost (absent without offloads).
    pub offload: Option<&'a sgc_plan::offload::OffloadSummary>,
    /// The plan's arena (absent with `--no-arena`).
    pub arena: Option<ArenaReport>,
    pub plan_time_s: f64,
    /// Choosing the schedule (the search) and placing the arena, parts of `plan_time_s`.
    pub schedule_time_s: f64,
    pub arena_time_s: f64,
    /// What the sublinear search did (absent for the other strategies).
    pub search: Option<SearchReport>,
    /// Why the strategy gave up and the plan is the traced order (`dtr` only).
    pub fallback: Option<String>,
    /// The strategy whose candidate met a `sublinear` budget, when another's: `dtr` (an
    /// eviction plan) or `partition` (a kept set); the plan's strategy is then that one.
    pub met_by: Option<String>,
    /// How far from optimal the plan can be: a proven lower bound on the recompute of any
    /// plan within its peak (`--bound`, and always for `optimal`).
    pub bound: Option<BoundReport>,
    /// How far below its peak any plan of the graph can go: the least-peak lower bound
    /// (`--bound`, for plans without offloads, and always for `optimal`).
    pub peak_bound: Option<PeakBoundReport>,
    /// What the `optimal` strategy's solver did.
    pub solver: Option<SolverReport>,
    pub verified: bool,
    pub written_to: Option<String>,
    /// One rank's terms when the graph planned is a rank's (`--world-size`, `--shard`,
    /// `--optimizer`: `sgc_ir::distributed`); every byte figure above is then that rank's.
    pub per_rank: Option<crate::ir::distributed::PerRank>,
}

/// A proven lower bound next to the plan's recompute.
#[derive(Serialize)]
pub struct BoundReport {
    /// No plan within the peak recomputes less than this share of a step.
    pub recompute_share: f64,
    /// The plan's recompute share minus the bound: the most it can be above optimal.
    pub gap: f64,
    pub method: &'static str,
    /// The op at whose first run the cut bound is reached.
    pub at_op: Option<String>,
}

/// A proven lower bound on the peak of any plan that keeps or recomputes, next to the
/// plan's peak.
#[derive(Serialize)]
pub struct PeakBoundReport {
    /// No plan that keeps or recomputes (without offloads), and for `kept-outputs` keeps
    /// each graph output from when it is made, peaks below this, persistent bytes included.
    pub bytes: u64,
    /// `planned_peak_bytes / bytes`: how far above the bound the plan peaks.
    pub planned_over_bound: f64,
    /// `least-peak` (`sgc_plan::least_peak`) or `kept-outputs` (`sgc_plan::peak_bounds`,
    /// for every strategy's plans but `optimal`'s).
    pub method: &'static str,
    /// The op whose run sets it.
    pub at_op: Option<String>,
}

/// What the `optimal` strategy's solver did.
#[derive(Serialize)]
pub struct SolverReport {
    /// The plan is optimal (HiGHS closed the relative gap to `sgc_plan::optimal::GAP`).
    pub proven: bool,
    /// The heuristic plan it started from, its recompute share.
    pub warm_start_recompute_share: Option<f64>,
    pub columns: usize,
    pub rows: usize,
    pub seconds: f64,
    /// Branch-and-bound nodes explored (0: settled at the root).
    pub nodes: u64,
}

impl<'a> PlanReport<'a> {
    /// Adds a bound, keeping the larger when there is one already.
    pub fn with_bound(&mut self, graph: &Graph, b: &crate::plan::Bound) {
        if self
            .bound
            .as_ref()
            .is_some_and(|old| old.recompute_share >= b.recompute)
        {
            return;
        }
        self.bound = Some(BoundReport {
            recompute_share: b.recompute,
            gap: self.recompute_share - b.recompute,
            method: b.method.as_str(),
            at_op: b.at_op.map(|o| graph.op(o).name.clone()),
        });
    }
}

impl PlanReport<'_> {
    /// Adds the lower bound on the peak of any plan `strategy` (the plan's) can make of
    /// `graph` (the plan's graph): the kept-outputs bound for a strategy that keeps graph
    /// outputs once made, else the least-peak bound.
    pub fn with_peak_bound(&mut self, graph: &Graph, strategy: crate::plan::Strategy) {
        let (b, kind) = crate::plan::peak_bound_of(graph, strategy);
        self.peak_bound = Some(PeakBoundReport {
            bytes: b.bytes,
            planned_over_bound: ratio(self.planned_peak_bytes, b.bytes),
            method: match kind {
                LowerBoundKind::KeptOutputs => "kept-outputs",
                _ => "least-peak",
            },
            at_op: b.op.map(|o| graph.op(o).name.clone()),
        });
    }
}

/// What the sublinear search did.
#[derive(Serialize)]
pub struct SearchReport {
    /// Candidates proposed, repeats included.
    pub candidates: usize,
    /// Distinct discard plans whose schedules were built.
    pub schedules_built: usize,
    /// Candidates of the memory-for-speed step (part of `candidates`).
    pub memory_for_speed_candidates: usize,
    /// Candidates per second of the schedule phase.
    pub candidates_per_s: f64,
    /// When the plan traded a little peak for recompute (at most 1% of it, each 1% of
    /// memory for at least 20% of a step): the lowest peak found and its recompute share.
    pub lowest_peak_bytes: Option<u64>,
    pub lowest_peak_recompute_share: Option<f64>,
}

fn search_report(s: &SearchStats, stats: &PlanStats) -> SearchReport {
    SearchReport {
        candidates: s.candidates,
        schedules_built: s.evaluated,
        memory_for_speed_candidates: s.relax_candidates,
        candidates_per_s: s.candidates as f64 / stats.schedule_secs.max(1e-9),
        lowest_peak_bytes: s.traded_from.map(|t| t.peak),
        lowest_peak_recompute_share: s.traded_from.map(|t| t.recompute_share()),
    }
}

/// The plan's arena next to its bound.
#[derive(Serialize)]
pub struct ArenaReport {
    pub arena_bytes: u64,
    /// The peak of live bytes with every size padded to `align`.
    pub live_peak_bytes: u64,
    pub arena_over_live_peak: f64,
    /// `100 * (arena / live peak - 1)`; negative when in-place sharing beats the bound.
    pub fragmentation_percent: f64,
    /// What a device needs: the arena plus the persistent bytes.
    pub device_bytes: u64,
    pub align: u64,
    pub algorithm: String,
    pub in_place_pairs: usize,
}

fn arena_report(plan: &Plan) -> Option<ArenaReport> {
    let a = plan.arena.as_ref()?;
    Some(ArenaReport {
        arena_bytes: a.size,
        live_peak_bytes: a.lower_bound,
        arena_over_live_peak: a.ratio(),
        fragmentation_percent: a.fragmentation_percent(),
        device_bytes: a.size + plan.summary.persistent_bytes,
        align: a.align,
        algorithm: a.algorithm.clone(),
        in_place_pairs: a.in_place.len(),
    })
}

/// The worker threads a planning run uses: `workers`, else one per core.
pub fn workers_used(workers: Option<usize>) -> usize {
    workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The arena's excess over the aligned live peak; an arena below it (in-place sharing
/// packs outputs over their inputs) has none.
pub fn fragmentation(percent: f64) -> String {
    if percent < 0.0 {
        format!(
            "{:.2}% below it through in-place sharing, no fragmentation",
            -percent
        )
    } else {
        format!("fragmentation {percent:.2}%")
    }
}

impl<'a> PlanReport<'a> {
    /// The report of `plan`, made from `file` (as given) in `secs` on `workers` threads;
    /// `stats` of the run that made it (none for a plan read from a file), `written_to`
    /// where it was saved.
    pub fn new(
        plan: &'a Plan,
        graph: &Graph,
        stats: Option<&PlanStats>,
        file: String,
        workers: usize,
        secs: f64,
        written_to: Option<String>,
    ) -> PlanReport<'a> {
        let mut report = build(plan, graph, file, workers, secs, written_to);
        if let Some(stats) = stats {
            report.search = stats.search.as_ref().map(|s| search_report(s, stats));
            report.schedule_time_s = stats.schedule_secs;
            report.arena_time_s = stats.arena_secs;
            report.fallback = stats.fallback.clone();
            report.met_by = stats.met_by.map(|m| m.to_string());
            if let Some(o) = &stats.optimal {
                report.solver = Some(SolverReport {
                    proven: o.proven,
                    warm_start_recompute_share: o.warm_start,
                    columns: o.columns,
                    rows: o.rows,
                    seconds: o.seconds,
                    nodes: o.nodes,
                });
                report.with_bound(graph, &o.bound);
                report.with_peak_bound(graph, plan.options.strategy);
            }
        }
        report
    }

    /// The text `sgc plan` prints.
    pub fn render(&self) -> String {
        render(self)
    }
}

/// ` at op `NAME`` for a bound set at an op, else nothing.
fn at_op(op: &Option<String>) -> String {
    op.as_ref()
        .map_or(String::new(), |o| format!(" at op `{o}`"))
}

/// `a / b`, 1 when `b` is 0.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

fn build<'a>(
    plan: &'a Plan,
    graph: &Graph,
    file: String,
    workers: usize,
    secs: f64,
    written_to: Option<String>,
) -> PlanReport<'a> {
    let s = &plan.summary;
    let steps: Vec<(OpId, bool)> = plan.steps.iter().map(|s| (s.op, s.recompute)).collect();
    let traced: Vec<(OpId, bool)> = graph.op_ids().map(|op| (op, false)).collect();
    let saved = sgc_plan::plan::saved_bytes(graph, &steps);
    let unplanned_saved = sgc_plan::plan::saved_bytes(graph, &traced);
    PlanReport {
        file,
        graph: plan.graph.name.as_deref(),
        strategy: plan.options.strategy.as_str(),
        options: &plan.options,
        workers,
        unplanned_peak_bytes: s.unplanned_peak,
        planned_peak_bytes: s.planned_peak,
        planned_over_unplanned: ratio(s.planned_peak, s.unplanned_peak),
        lower_bound_bytes: s.lower_bound,
        planned_over_lower_bound: ratio(s.planned_peak, s.lower_bound),
        persistent_bytes: s.persistent_bytes,
        saved_bytes: saved,
        unplanned_saved_bytes: unplanned_saved,
        saved_over_unplanned: ratio(saved, unplanned_saved),
        recompute_share: s.recompute_share,
        recompute_cost: s.recompute_cost,
        step_cost: s.step_cost,
        cost_source: &s.cost_source,
        checkpoints: s.checkpoints,
        recomputed_ops: s.recomputed_ops,
        recompute_steps: s.recompute_steps,
        steps: s.steps,
        max_op_runs: s.max_op_runs,
        offload: s.offload.as_ref(),
        arena: arena_report(plan),
        plan_time_s: secs,
        schedule_time_s: 0.0,
        arena_time_s: 0.0,
        search: None,
        fallback: None,
        met_by: None,
        bound: None,
        peak_bound: None,
        solver: None,
        verified: true,
        written_to,
        per_rank: None,
    }
}

/// The offload lines: what goes to host and back, and the predicted step against the
/// unplanned one (both on the plan's clock, `time_us` or the profile's roofline).
fn render_offload(s: &mut String, r: &PlanReport<'_>, o: &sgc_plan::offload::OffloadSummary) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "offloaded          {:>12} ({} storages to host and back; pinned host pool holds {} at most, {:.4e} us on the link)",
        human_bytes(o.bytes),
        o.offloads,
        human_bytes(o.host_peak),
        o.transfer_us
    );
    let over = |t: f64| {
        if r.step_cost > 0.0 {
            t / r.step_cost
        } else {
            1.0
        }
    };
    let _ = writeln!(
        s,
        "predicted step     {:>11.4e} us ({:.3}x the unplanned {:.4e} us: compute {:.4e} with recomputations, copies exposed {:.4e})",
        o.step_us,
        over(o.step_us),
        r.step_cost,
        o.compute_us,
        o.exposed_us
    );
}

/// The per-rank lines: the world, and the persistent bytes term by term.
fn render_per_rank(s: &mut String, p: &crate::ir::distributed::PerRank) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "per rank           world size {}, shard {}, optimizer {}: every figure is one rank's",
        p.world_size,
        p.shard.as_str(),
        p.optimizer
    );
    let _ = writeln!(
        s,
        "  parameters       {:>12}  (of {} on one process)",
        human_bytes(p.rank_parameter_bytes),
        human_bytes(p.parameter_bytes)
    );
    if p.gradient_bytes > 0 {
        let _ = writeln!(
            s,
            "  gradient shards  {:>12}",
            human_bytes(p.gradient_bytes)
        );
    }
    if p.optimizer_bytes > 0 {
        let _ = writeln!(
            s,
            "  optimizer state  {:>12}",
            human_bytes(p.optimizer_bytes)
        );
    } else if p.optimizer == crate::ir::distributed::Optimizer::None {
        let _ = writeln!(
            s,
            "  optimizer state  none counted (--optimizer adam or momentum adds the optimizer's buffers)"
        );
    }
    if let Some((unit, u)) = &p.largest_unit {
        let unit = if unit.is_empty() {
            "the root"
        } else {
            unit.as_str()
        };
        let _ = writeln!(
            s,
            "  unsharded blocks {:>12}  (3 x the largest of {} units, {}: {}: all-gathered now and next, one unit's gradients reduce-scattered)",
            human_bytes(p.unsharded_bytes),
            p.units,
            unit,
            human_bytes(*u)
        );
    }
}

fn render(r: &PlanReport<'_>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let bytes = |b: u64| format!("{:>12} ({b} B)", human_bytes(b));
    let o = r.options;
    let _ = writeln!(
        s,
        "graph              {} ({})",
        r.graph.unwrap_or("(unnamed)"),
        r.file
    );
    let _ = writeln!(s, "unplanned peak     {}", bytes(r.unplanned_peak_bytes));
    let _ = writeln!(s, "planned peak       {}", bytes(r.planned_peak_bytes));
    let _ = writeln!(s, "planned/unplanned  {:>11.3}x", r.planned_over_unplanned);
    let _ = writeln!(
        s,
        "per-op lower bound {}  (planned/bound {:.3}x)",
        bytes(r.lower_bound_bytes),
        r.planned_over_lower_bound
    );
    let _ = writeln!(s, "persistent         {}", bytes(r.persistent_bytes));
    if let Some(p) = &r.per_rank {
        render_per_rank(&mut s, p);
    }
    let _ = writeln!(
        s,
        "kept for backward  {}  ({:.3}x the traced order's {})",
        bytes(r.saved_bytes),
        r.saved_over_unplanned,
        human_bytes(r.unplanned_saved_bytes)
    );
    if let Some(a) = &r.arena {
        let _ = writeln!(
            s,
            "arena              {}  ({:.4}x the aligned live peak {}: {})",
            bytes(a.arena_bytes),
            a.arena_over_live_peak,
            human_bytes(a.live_peak_bytes),
            fragmentation(a.fragmentation_percent)
        );
        if a.fragmentation_percent > 1.0 && o.arena_effort == sgc_plan::alloc::ArenaEffort::Plan {
            let _ = writeln!(
                s,
                "                   (--arena-effort default searches the arena longer and may close the gap)"
            );
        }
        let _ = writeln!(
            s,
            "arena + persistent {}  (what the device needs; align {} B, by {}, {} in-place pairs)",
            bytes(a.device_bytes),
            a.align,
            a.algorithm,
            a.in_place_pairs
        );
    }
    let _ = writeln!(
        s,
        "recompute          {:>11.1}% of one step's cost ({:.4e} of {:.4e}, from {})",
        100.0 * r.recompute_share,
        r.recompute_cost,
        r.step_cost,
        r.cost_source
    );
    let _ = writeln!(s, "checkpoints        {:>12}", r.checkpoints);
    if let Some(o) = r.offload {
        render_offload(&mut s, r, o);
    }
    let runs = match r.max_op_runs {
        0 | 1 => "no op runs twice".to_string(),
        2 => "no op runs more than twice".to_string(),
        n => format!("no op runs more than {n} times"),
    };
    let _ = writeln!(
        s,
        "recomputed ops     {:>12} ({} of {} steps recompute; {runs})",
        r.recomputed_ops, r.recompute_steps, r.steps
    );
    let _ = writeln!(
        s,
        "plan time          {:>11.3}s on {} workers (schedule {:.3}s, arena {:.3}s; plan verified)",
        r.plan_time_s, r.workers, r.schedule_time_s, r.arena_time_s
    );
    if let Some(why) = &r.fallback {
        let _ = writeln!(
            s,
            "fallback           {} gave up ({why}); the plan is the traced order",
            r.strategy
        );
    }
    if let Some(by) = &r.met_by {
        let what = match by.as_str() {
            "dtr" => "static DTR (eviction)",
            "partition" => "a forward/backward partition (partition's kept set)",
            other => other,
        };
        let _ = writeln!(
            s,
            "budget             met by {what}: it recomputes least of the plans whose device bytes fit"
        );
    }
    if let Some(x) = &r.solver {
        let start =
            x.warm_start_recompute_share
                .map_or("no heuristic plan fitted".to_string(), |w| {
                    format!(
                        "started from a heuristic plan recomputing {:.3}%",
                        100.0 * w
                    )
                });
        let _ = writeln!(
            s,
            "solver             HiGHS, {:.1}s, {} columns, {} rows, {} nodes; {}; {}",
            x.seconds,
            x.columns,
            x.rows,
            x.nodes,
            start,
            if x.proven {
                format!(
                    "proven optimal (relative gap within {})",
                    crate::plan::optimal::GAP
                )
            } else {
                "not proven optimal (stopped by its time limit, or by SGC_HIGHS_OPTIONS): the best \
                 plan found"
                    .to_string()
            }
        );
    }
    if let Some(b) = &r.bound {
        let at = at_op(&b.at_op);
        let _ = writeln!(
            s,
            "optimality         within {:.3}% of a step of optimal: no plan in the traced order within this peak recomputes less than {:.3}% ({}{at})",
            100.0 * b.gap.max(0.0),
            100.0 * b.recompute_share,
            b.method
        );
    }
    if let Some(b) = &r.peak_bound {
        let at = at_op(&b.at_op);
        let _ = writeln!(
            s,
            "peak bound         {}  (planned/bound {:.3}x): no plan that keeps or recomputes{} peaks lower ({} bound{at})",
            bytes(b.bytes),
            b.planned_over_bound,
            if b.method == "kept-outputs" {
                " and keeps each graph output from when it is made"
            } else {
                ""
            },
            b.method
        );
    }
    if let Some(x) = &r.search {
        let _ = writeln!(
            s,
            "search             {:>12} candidates ({:.0}/s; {} trading memory for speed), {} schedules built",
            x.candidates,
            x.candidates_per_s,
            x.memory_for_speed_candidates,
            x.schedules_built
        );
        if let (Some(low), Some(share)) = (x.lowest_peak_bytes, x.lowest_peak_recompute_share) {
            let _ = writeln!(
                s,
                "near lowest peak   {:+.3}% peak for {:.2}% of a step less recompute: the lowest peak found, {}, recomputes {:.2}% (each 1% of memory must save {}% of a step)",
                100.0 * (r.planned_peak_bytes as f64 / low.max(1) as f64 - 1.0),
                100.0 * (share - r.recompute_share),
                human_bytes(low),
                100.0 * share,
                sgc_plan::PEAK_WORTH
            );
        }
    }
    let reads = crate::plan::strategies::of(o.strategy).reads();
    let goal = if reads.contains(&"goal") {
        format!(", goal {}", o.goal.as_str())
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "strategy           {} (seed {}{goal})",
        r.strategy, o.seed
    );
    if let Some(d) = &o.device_profile {
        let _ = writeln!(
            s,
            "device profile     {} ({} TFLOP/s f32, {} TFLOP/s f16/bf16, {} GB/s): ops without time_us costed by their roofline estimate",
            d.name(),
            d.f32_tflops(),
            d.half_tflops(),
            d.bandwidth_gbps()
        );
    }
    let _ = writeln!(s, "options            {}", options_text(o, reads));
    if let Some(w) = &r.written_to {
        let _ = writeln!(s, "plan written to    {w}");
    }
    s
}

/// The options line: the budget, the options the strategy reads (`reads`: its
/// [`Strategy::reads`](crate::plan::strategies::Strategy::reads)), and the arena's effort.
fn options_text(o: &PlanOptions, reads: &[&str]) -> String {
    let size = |b: Option<u64>| b.map_or("-".to_string(), human_bytes);
    let time_limit = o
        .time_limit_s
        .unwrap_or(sgc_plan::optimal::DEFAULT_TIME_LIMIT_S);
    let specific = [
        ("lb_memory", size(o.lb_memory)),
        ("thresh_tries", o.thresh_tries.to_string()),
        ("genetic_iters", o.genetic_iters.to_string()),
        ("pool_size", o.pool_size.to_string()),
        ("eviction_threshold", size(o.eviction_threshold)),
        ("evictee_min_size", human_bytes(o.evictee_min_size)),
        ("sqrt_sampling", o.sqrt_sampling.to_string()),
        ("time_limit_s", format!("{time_limit} s")),
    ];
    let mut parts = vec![format!("budget {}", budget_text(o))];
    parts.extend(
        specific
            .into_iter()
            .filter(|(field, _)| reads.contains(field))
            .map(|(field, value)| format!("{} {value}", &crate::defaults::flag_of(field)[2..])),
    );
    parts.push(format!("arena-effort {}", o.arena_effort.as_str()));
    parts.join(", ")
}

/// The budget and, when it is not device bytes, what it bounds.
fn budget_text(o: &PlanOptions) -> String {
    match (o.budget, o.budget_of) {
        (Some(b), sgc_plan::BudgetOf::Peak) => format!("{} (of the peak)", human_bytes(b)),
        (Some(b), sgc_plan::BudgetOf::Saved) => {
            format!("{} (kept for the backward)", human_bytes(b))
        }
        (b, _) => b.map_or("-".to_string(), human_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::options_text;
    use crate::plan::strategies::REGISTRY;
    use crate::plan::PlanOptions;

    /// A DTR plan's report listed `genetic-iters 20`, an option only sublinear reads: each
    /// strategy's line names its own options, whatever the others are set to.
    #[test]
    fn the_options_line_names_only_what_the_strategy_reads() {
        let fields = [
            "lb_memory",
            "thresh_tries",
            "genetic_iters",
            "pool_size",
            "eviction_threshold",
            "evictee_min_size",
            "sqrt_sampling",
            "time_limit_s",
        ];
        for s in REGISTRY {
            let o = PlanOptions {
                strategy: s.name(),
                ..PlanOptions::default()
            };
            let line = options_text(&o, s.reads());
            assert!(line.starts_with("budget ") && line.ends_with("arena-effort plan"));
            for field in fields {
                let flag = crate::defaults::flag_of(field);
                assert_eq!(
                    line.contains(&format!(" {} ", &flag[2..])),
                    s.reads().contains(&field),
                    "{}: {line}",
                    s.name()
                );
            }
        }
    }
}
