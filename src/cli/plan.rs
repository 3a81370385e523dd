//! `sgc plan FILE`: plan checkpointing for a graph and report the result next to its
//! baseline (the unplanned peak) and bound (the per-op lower bound). The plan is verified
//! before it is reported or written. `--check PLAN` verifies an existing plan file against
//! the graph instead (and refuses a plan made for another graph).

use super::{defaults, output};
use super::{CliResult, DeviceProfileArg, GoalArg, StrategyArg};
use serde::Serialize;
use sgc::plan::{Plan, PlanOptions, Progress, RunConfig};
use sgc::units::{human_bytes, parse_size};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file or a Checkmate node-link file.
    file: PathBuf,
    /// Checkpointing strategy.
    #[arg(long, value_enum, default_value = "sublinear")]
    strategy: StrategyArg,
    /// Device memory the plan must fit (e.g. 5GB, 5GiB, 512MiB): its arena plus persistent
    /// bytes, what `sgc run` allocates; the plan that recomputes least wins, and a larger
    /// budget never recomputes more.
    #[arg(long, value_parser = parse_size)]
    budget: Option<u64>,
    /// What --budget bounds: `device` bytes (arena + persistent, what `sgc run` allocates)
    /// or the memory model's `peak` (unaligned live bytes plus persistent: what MegEngine's
    /// and Checkmate's budgets bound, to compare plans with theirs; the arena may need up to
    /// its alignment and fragmentation more).
    #[arg(long, value_enum, default_value = "device", requires = "budget")]
    budget_of: super::BudgetOfArg,
    /// Memory you are willing to spend to save recompute (sublinear): recomputed ops become
    /// checkpoints again, most expensive first, while the peak stays at or under it.
    #[arg(long, value_parser = parse_size)]
    lb_memory: Option<u64>,
    /// sublinear without a budget: `lowest-peak` (whatever it recomputes, then the least
    /// recompute; MegEngine's rule) or `balanced` (memory and recompute weighed equally, each
    /// as a share of what there is to gain: the knee of the memory/recompute front).
    #[arg(long, value_enum, default_value = "lowest-peak")]
    goal: GoalArg,
    /// sublinear: evenly spaced thresholds to try.
    #[arg(long, default_value_t = defaults::thresh_tries())]
    thresh_tries: usize,
    /// sublinear: generations of genetic refinement (0 = off).
    #[arg(long, default_value_t = defaults::GENETIC_ITERS)]
    genetic_iters: usize,
    /// sublinear: survivors per generation.
    #[arg(long, default_value_t = defaults::pool_size())]
    pool_size: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = defaults::seed())]
    seed: u64,
    /// Worker threads for the search (default: all cores); the plan does not depend on it.
    #[arg(long)]
    #[arg(value_parser = clap::value_parser!(u64).range(defaults::WORKERS))]
    workers: Option<u64>,
    /// dtr: resident memory above which tensors are evicted (default: the budget, else
    /// halfway between the lower bound and the unplanned peak).
    #[arg(long, value_parser = parse_size)]
    eviction_threshold: Option<u64>,
    /// dtr: smallest tensor that may be evicted.
    #[arg(long, value_parser = parse_size, default_value_t = defaults::evictee_min_size())]
    evictee_min_size: u64,
    /// dtr: score only ~sqrt(N) sampled candidates.
    #[arg(long)]
    sqrt_sampling: bool,
    /// Arena alignment: offsets are multiples of it and sizes are padded to it (e.g. 256, 512B).
    #[arg(long, value_parser = parse_size, default_value_t = defaults::ALIGN)]
    align: u64,
    /// Plan the schedule only: no arena offsets.
    #[arg(long)]
    no_arena: bool,
    /// How hard to search the arena: `plan` (hundredths of a second; plans of more than 600
    /// lifetimes keep the heuristics' arena), `default` (what `sgc alloc` spends, up to a few
    /// seconds: most real plans reach their aligned live peak), `thorough`, or `fast`
    /// (heuristics only). Under --budget it places every candidate, so it also decides
    /// which plans fit.
    #[arg(long, value_enum, default_value = "plan")]
    arena_effort: super::ArenaEffortArg,
    #[command(flatten)]
    device: DeviceProfileArg,
    /// Write the plan to this file.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Verify this existing plan file against the graph instead of planning.
    #[arg(long, conflicts_with = "output")]
    check: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    file: String,
    graph: Option<&'a str>,
    strategy: &'a str,
    options: &'a PlanOptions,
    workers: usize,
    unplanned_peak_bytes: u64,
    planned_peak_bytes: u64,
    planned_over_unplanned: f64,
    lower_bound_bytes: u64,
    planned_over_lower_bound: f64,
    persistent_bytes: u64,
    recompute_share: f64,
    recompute_cost: f64,
    step_cost: f64,
    cost_source: &'a str,
    checkpoints: usize,
    recomputed_ops: usize,
    recompute_steps: usize,
    steps: usize,
    /// The most times any one op runs in the step (1: nothing is recomputed).
    max_op_runs: u32,
    /// The plan's arena (absent with `--no-arena`).
    arena: Option<ArenaReport>,
    plan_time_s: f64,
    /// Choosing the schedule (the search) and placing the arena, parts of `plan_time_s`.
    schedule_time_s: f64,
    arena_time_s: f64,
    /// What the sublinear search did (absent for the other strategies).
    search: Option<SearchReport>,
    /// Why the strategy gave up and the plan is the traced order (`dtr` only).
    fallback: Option<String>,
    /// A `sublinear` budget was met by an eviction plan (strategy `dtr`).
    met_by_eviction: bool,
    verified: bool,
    written_to: Option<String>,
}

#[derive(Serialize)]
struct SearchReport {
    /// Candidates proposed, repeats included.
    candidates: usize,
    /// Distinct discard plans whose schedules were built.
    schedules_built: usize,
    /// Candidates of the memory-for-speed step (part of `candidates`).
    memory_for_speed_candidates: usize,
    /// Candidates per second of the schedule phase.
    candidates_per_s: f64,
}

fn search_report(s: &sgc::plan::SearchStats, stats: &sgc::plan::PlanStats) -> SearchReport {
    SearchReport {
        candidates: s.candidates,
        schedules_built: s.evaluated,
        memory_for_speed_candidates: s.relax_candidates,
        candidates_per_s: s.candidates as f64 / stats.schedule_secs.max(1e-9),
    }
}

#[derive(Serialize)]
struct ArenaReport {
    arena_bytes: u64,
    /// The peak of live bytes with every size padded to `align`.
    live_peak_bytes: u64,
    arena_over_live_peak: f64,
    /// `100 * (arena / live peak - 1)`; negative when in-place sharing beats the bound.
    fragmentation_percent: f64,
    /// What a device needs: the arena plus the persistent bytes.
    device_bytes: u64,
    align: u64,
    algorithm: String,
    in_place_pairs: usize,
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

pub fn run(args: Args) -> CliResult {
    if let Some(out) = &args.output {
        output::refuse_input(out, &[&args.file])?;
    }
    let graph = sgc::ir::load_any(&args.file)?;
    let file = args.file.display().to_string();
    if let Some(path) = &args.check {
        return check(&graph, path);
    }
    let options = PlanOptions {
        strategy: args.strategy.into(),
        seed: args.seed,
        budget: args.budget,
        budget_of: args.budget_of.into(),
        lb_memory: args.lb_memory,
        goal: args.goal.into(),
        thresh_tries: args.thresh_tries,
        genetic_iters: args.genetic_iters,
        pool_size: args.pool_size,
        eviction_threshold: args.eviction_threshold,
        evictee_min_size: args.evictee_min_size,
        sqrt_sampling: args.sqrt_sampling,
        arena: !args.no_arena,
        arena_effort: args.arena_effort.into(),
        align: args.align,
        device_profile: args.device.device_profile.clone(),
    };
    let bar = super::progress::bar(args.quiet, 1, "{msg:>26} [{bar:30}] {pos}/{len} {elapsed}");
    let callback = |p: Progress| {
        if let Some(b) = &bar {
            b.set_length(p.total as u64);
            b.set_position(p.done as u64);
            b.set_message(p.phase);
        }
    };
    let run = RunConfig {
        workers: args.workers.map(|w| w as usize),
        progress: Some(&callback),
    };
    let start = Instant::now();
    let result = sgc::plan::plan_with_stats(&graph, &options, &run);
    let secs = start.elapsed().as_secs_f64();
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let (mut plan, stats) = result.map_err(|e| format!("{file}: {e}"))?;
    plan.graph.path = Some(file.clone());
    if let Some(out) = &args.output {
        output::write(out, plan.to_json().as_bytes())?;
    }
    let workers = args.workers.map_or_else(rayon_threads, |w| w as usize);
    let mut report = build(&plan, file, workers, secs, args.output.as_ref());
    report.search = stats.search.map(|s| search_report(&s, &stats));
    report.schedule_time_s = stats.schedule_secs;
    report.arena_time_s = stats.arena_secs;
    report.fallback = stats.fallback.clone();
    report.met_by_eviction = stats.met_by_eviction;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
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

fn check(graph: &sgc::ir::Graph, path: &std::path::Path) -> CliResult {
    let text = sgc::ir::file::read_limited(path)
        .map_err(|e| format!("{}: cannot read the plan: {e}", path.display()))?;
    let plan = Plan::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    plan.check_graph(graph)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    match sgc::plan::check(graph, &plan) {
        Ok(peak) => {
            println!(
                "{}: plan verified; peak {} ({} B); summary reproduced (costs from {})",
                path.display(),
                human_bytes(peak.peak_bytes),
                peak.peak_bytes,
                plan.summary.cost_source
            );
            Ok(())
        }
        Err(sgc::plan::CheckError::Violations(violations)) => {
            for v in &violations {
                eprintln!("  {v}");
            }
            let first = violations
                .first()
                .map(ToString::to_string)
                .unwrap_or_default();
            let n = violations.len();
            Err(format!(
                "{}: the plan does not verify ({n} violation(s), listed above; the first: {first})",
                path.display()
            )
            .into())
        }
        Err(e) => Err(format!("{}: {e}", path.display()).into()),
    }
}

fn build<'a>(
    plan: &'a Plan,
    file: String,
    workers: usize,
    secs: f64,
    out: Option<&PathBuf>,
) -> Report<'a> {
    let s = &plan.summary;
    let ratio = |a: u64, b: u64| if b == 0 { 1.0 } else { a as f64 / b as f64 };
    Report {
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
        recompute_share: s.recompute_share,
        recompute_cost: s.recompute_cost,
        step_cost: s.step_cost,
        cost_source: &s.cost_source,
        checkpoints: s.checkpoints,
        recomputed_ops: s.recomputed_ops,
        recompute_steps: s.recompute_steps,
        steps: s.steps,
        max_op_runs: s.max_op_runs,
        arena: arena_report(plan),
        plan_time_s: secs,
        schedule_time_s: 0.0,
        arena_time_s: 0.0,
        search: None,
        fallback: None,
        met_by_eviction: false,
        verified: true,
        written_to: out.map(|p| p.display().to_string()),
    }
}

fn render(r: &Report<'_>) -> String {
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
    if let Some(a) = &r.arena {
        let _ = writeln!(
            s,
            "arena              {}  ({:.4}x the aligned live peak {}: {})",
            bytes(a.arena_bytes),
            a.arena_over_live_peak,
            human_bytes(a.live_peak_bytes),
            fragmentation(a.fragmentation_percent)
        );
        if a.fragmentation_percent > 1.0 && o.arena_effort == sgc::plan::alloc::ArenaEffort::Plan {
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
    if r.met_by_eviction {
        let _ = writeln!(
            s,
            "budget             met by static DTR (eviction): it recomputes least of the plans whose device bytes fit"
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
    }
    let size = |b: Option<u64>| b.map_or("-".to_string(), human_bytes);
    let _ = writeln!(
        s,
        "strategy           {} (seed {}, goal {})",
        r.strategy,
        o.seed,
        o.goal.as_str()
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
    let _ = writeln!(
        s,
        "options            budget {}, lb-memory {}, thresh-tries {}, genetic-iters {}, pool-size {}, eviction-threshold {}, evictee-min-size {}, sqrt-sampling {}, arena-effort {}",
        budget_text(o),
        size(o.lb_memory),
        o.thresh_tries,
        o.genetic_iters,
        o.pool_size,
        size(o.eviction_threshold),
        human_bytes(o.evictee_min_size),
        o.sqrt_sampling,
        o.arena_effort.as_str()
    );
    if let Some(w) = &r.written_to {
        let _ = writeln!(s, "plan written to    {w}");
    }
    s
}

/// The budget and, when it is not device bytes, what it bounds.
fn budget_text(o: &PlanOptions) -> String {
    match (o.budget, o.budget_of) {
        (Some(b), sgc::plan::BudgetOf::Peak) => format!("{} (of the peak)", human_bytes(b)),
        (b, _) => b.map_or("-".to_string(), human_bytes),
    }
}
