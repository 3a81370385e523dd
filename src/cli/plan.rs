//! `sgc plan FILE`: plan checkpointing for a graph and report the result (`sgc::report::plan`) next to its
//! baseline (the unplanned peak) and bound (the per-op lower bound). The plan is verified
//! before it is reported or written. `--check PLAN` verifies an existing plan file against
//! the graph instead (and refuses a plan made for another graph).

use super::{defaults, output};
use super::{CliResult, DeviceProfileArg, GoalArg};
use sgc::budget::Budget;
use sgc::plan::streams::HostLink;
use sgc::plan::{Plan, PlanOptions, Progress, RunConfig};
use sgc::report::plan::{workers_used, PlanReport};
use sgc::units::{human_bytes, parse_size};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file or a Checkmate node-link file.
    file: PathBuf,
    /// Checkpointing strategy.
    #[arg(long, default_value = "sublinear", value_parser = super::strategy_parser())]
    strategy: sgc::plan::Strategy,
    /// Device memory the plan must fit (e.g. 5GB, 5GiB, 512MiB): its arena plus persistent
    /// bytes, what `sgc run` allocates; the plan that recomputes least wins, and a larger
    /// budget never recomputes more. A share such as `70%` is of the unplanned figure that
    /// --budget-of names (device bytes, peak or saved bytes), rounded down to a byte.
    #[arg(long, value_name = "SIZE|SHARE%", value_parser = Budget::parse)]
    budget: Option<Budget>,
    /// What --budget bounds: `device` bytes (arena + persistent, what `sgc run` allocates),
    /// the memory model's `peak` (unaligned live bytes plus persistent: what MegEngine's
    /// and Checkmate's budgets bound, to compare plans with theirs; the arena may need up to
    /// its alignment and fragmentation more), or the bytes `saved` from the forward for the
    /// backward (with --strategy partition: what torch.compile's activation_memory_budget
    /// bounds).
    #[arg(long, value_enum, default_value = "device", requires = "budget")]
    budget_of: super::BudgetOfArg,
    /// Memory you are willing to spend to save recompute (sublinear): recomputed ops become
    /// checkpoints again, most expensive first, while the peak stays at or under it.
    #[arg(long, value_parser = parse_size)]
    lb_memory: Option<u64>,
    /// sublinear without a budget: `lowest-peak` (MegEngine's rule, then the least recompute
    /// there; a plan at most 1% above it wins when each 1% of memory saves at least 20% of a
    /// step) or `balanced` (memory and recompute weighed equally, each
    /// as a share of what there is to gain: the knee of the memory/recompute front).
    #[arg(long, value_enum, default_value = "lowest-peak")]
    goal: GoalArg,
    /// sublinear: evenly spaced thresholds to try.
    #[arg(long, default_value_t = defaults::thresh_tries(), allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    thresh_tries: usize,
    /// sublinear: generations of genetic refinement (0 = off).
    #[arg(long, default_value_t = defaults::GENETIC_ITERS, allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    genetic_iters: usize,
    /// sublinear: survivors per generation.
    #[arg(long, default_value_t = defaults::pool_size(), allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    pool_size: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = defaults::seed(), allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    seed: u64,
    /// Worker threads for the search (default: all cores); the plan does not depend on it.
    #[arg(long)]
    #[arg(allow_negative_numbers = true, value_parser = super::within::<u64>(defaults::WORKERS))]
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
    #[arg(long, value_parser = super::arena_effort(), default_value = "plan")]
    arena_effort: sgc::plan::alloc::ArenaEffort,
    #[command(flatten)]
    device: DeviceProfileArg,
    #[command(flatten)]
    distribution: super::DistributionArg,
    /// Keep or recompute every activation, never offload one to host memory (the plans
    /// sgc made before offload existed, byte for byte).
    #[arg(long)]
    no_offload: bool,
    /// The device's link to host memory that offload copies are priced on:
    /// TO_HOST_GBPS,TO_DEVICE_GBPS[,LATENCY_US] or a profile name (h100, a100). Default: the
    /// --device-profile's link when the profile has one. With a --budget and sublinear or
    /// partition, the plan may offload activations to pinned host memory.
    #[arg(long, value_parser = parse_link, conflicts_with = "no_offload")]
    host_link: Option<HostLink>,
    /// Offload: the most pinned host memory the plan may hold at once (default: unbounded).
    #[arg(long, value_parser = parse_size, conflicts_with = "no_offload")]
    host_memory: Option<u64>,
    /// optimal: seconds the strategy may take (its heuristic starts, then the solver with
    /// what is left); stopped by it, the plan is the best found and the report gives the
    /// proven bound next to it.
    #[arg(long, allow_negative_numbers = true, value_parser = super::positive::<u64>())]
    time_limit: Option<u64>,
    /// Also prove how far from optimal the plan can be: a lower bound on the recompute of
    /// any plan within its peak (the cut bound; for small graphs with the `optimal` feature,
    /// the integer program's linear relaxation too), printed as "within X of optimal".
    #[arg(long)]
    bound: bool,
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

fn parse_link(text: &str) -> Result<HostLink, String> {
    HostLink::parse(text)
}

pub fn run(args: Args) -> CliResult {
    if let Some(out) = &args.output {
        output::refuse_input(out, &[&args.file])?;
    }
    let graph = sgc::ir::load_any(&args.file)?;
    let file = args.file.display().to_string();
    let (graph, per_rank) = args.distribution.apply(graph, &file)?;
    if let Some(path) = &args.check {
        return check(&graph, path);
    }
    let mut options = PlanOptions {
        strategy: args.strategy,
        seed: args.seed,
        budget: None,
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
        arena_effort: args.arena_effort,
        align: args.align,
        device_profile: args.device.device_profile.clone(),
        host_link: None,
        host_memory: None,
        time_limit_s: args.time_limit,
    };
    options.budget = args
        .budget
        .map(|b| b.bytes(&graph, &options))
        .transpose()
        .map_err(|e| format!("{file}: {e}"))?;
    let options =
        defaults::with_offload(options, args.host_link, args.host_memory, !args.no_offload);
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
    let workers = workers_used(args.workers.map(|w| w as usize));
    let written_to = args.output.as_ref().map(|p| p.display().to_string());
    let mut report = PlanReport::new(
        &plan,
        &graph,
        Some(&stats),
        file.clone(),
        workers,
        secs,
        written_to,
    );
    report.per_rank = per_rank;
    if args.bound {
        let b = sgc::plan::bound(&graph, &plan).map_err(|e| format!("{file}: {e}"))?;
        report.with_bound(&graph, &b);
        report.with_peak_bound(&graph, plan.options.strategy);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(())
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
