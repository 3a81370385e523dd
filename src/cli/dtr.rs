//! Run-time DTR on the command line: `sgc run FILE --dtr` (run steps with eviction decided
//! while they run, on a real pool allocator) and `sgc dtr-sweep FILE` (the same engine
//! simulated over a range of thresholds, beside the static plan at the same bytes).

use super::CliResult;
use sgc::exec::dtr::{DtrExecutor, DtrOptions, DtrReport, DEFAULT_EVICTEE_MIN_SIZE};
use sgc::exec::{Backend, ExecError, HostTensor};
use sgc::ir::Graph;
use sgc::units::{human_bytes, parse_size};
use std::path::{Path, PathBuf};

/// The knobs of `sgc run --dtr` (MegEngine's names).
#[derive(clap::Args, Clone, Debug)]
pub struct DtrArgs {
    /// With --dtr: device bytes, one pool that holds everything (default: what the traced
    /// order touches in the pool when nothing is evicted)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "dtr")]
    memory: Option<u64>,
    /// With --dtr: evict before each op while live bytes (persistent included) exceed
    /// this; without it, evict only when no free block can serve a request
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "dtr")]
    eviction_threshold: Option<u64>,
    /// With --dtr: smallest tensor that may be evicted
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value_t = DEFAULT_EVICTEE_MIN_SIZE, requires = "dtr")]
    evictee_min_size: u64,
    /// With --dtr: score only about sqrt(N) sampled candidates (seeded by --seed)
    #[arg(long, requires = "dtr")]
    sqrt_sampling: bool,
}

/// What `sgc run` passes on.
pub struct RunCommon<'a> {
    pub file: &'a Path,
    pub steps: usize,
    pub seed: u64,
    pub compare: bool,
    pub json: bool,
}

/// `sgc run FILE --dtr` on `backend`.
pub fn run<B: Backend>(
    common: &RunCommon<'_>,
    args: &DtrArgs,
    backend: impl Fn() -> Result<B, ExecError>,
) -> CliResult {
    let graph = sgc::ir::load_any(common.file)?;
    let memory = match args.memory {
        Some(m) => m,
        None => default_memory(&graph)?,
    };
    let options = DtrOptions {
        eviction_threshold: args.eviction_threshold,
        evictee_min_size: args.evictee_min_size,
        sqrt_sampling: args.sqrt_sampling,
        seed: common.seed,
        ..DtrOptions::new(memory)
    };
    let mut ex = DtrExecutor::new(&graph, backend()?, &options)?;
    ex.bind_seeded(common.seed)?;
    let bar = super::progress::bar(
        false,
        common.steps as u64,
        "run-time DTR step {pos}/{len} {elapsed}",
    );
    let mut losses = Vec::new();
    for _ in 0..common.steps {
        losses.extend(ex.run(1)?);
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    super::progress::done(&bar);
    let report = ex.report();
    let compared = if common.compare {
        let mut base = sgc::runner::unplanned(&graph, backend()?)?;
        base.bind_seeded(common.seed)?;
        let start = std::time::Instant::now();
        let base_losses = base.run(common.steps)?;
        let base_wall = start.elapsed().as_secs_f64();
        let same = outputs(&graph, |n| ex.read(n))? == outputs(&graph, |n| base.read(n))?;
        Some((base_losses, base.report(), base_wall, same))
    } else {
        None
    };
    if common.json {
        let mut v = serde_json::json!({"run": "run-time DTR", "losses": losses, "report": report});
        if let Some((l, r, wall, same)) = &compared {
            v["unplanned"] = serde_json::json!({
                "losses": l, "report": r, "wall_seconds": wall, "outputs_bitwise_equal": same
            });
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} on {}, {} step{}, seed {}",
        common.file.display(),
        report.device,
        common.steps,
        if common.steps == 1 { "" } else { "s" },
        common.seed
    );
    print_report(&report, &losses);
    if let Some((base_losses, base, base_wall, same_outputs)) = compared {
        let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let base_bytes = base.allocator.peak_bytes;
        println!(
            "run-time DTR vs unplanned: loss curves bitwise {}, loss and every gradient bitwise {}; DTR / unplanned: device bytes {:.3}x ({} vs {}), wall time {:.3}x",
            if bits(&losses) == bits(&base_losses) { "equal" } else { "DIFFERENT" },
            if same_outputs { "equal" } else { "DIFFERENT" },
            report.pool.touched_bytes as f64 / base_bytes.max(1) as f64,
            human_bytes(report.pool.touched_bytes),
            human_bytes(base_bytes),
            report.wall_seconds / base_wall.max(f64::MIN_POSITIVE)
        );
    }
    Ok(())
}

/// The pool the traced order touches under DTR's allocator when nothing is evicted (a
/// simulation in an unbounded pool without threshold): enough for a run that never has to
/// evict without a threshold.
fn default_memory(graph: &Graph) -> Result<u64, ExecError> {
    let unbounded = DtrOptions::new(u64::MAX / 4);
    Ok(sgc::exec::dtr::simulate(graph, &unbounded, 1)?
        .pool
        .touched_bytes)
}

/// Every graph output's bits, by name.
fn outputs(
    g: &Graph,
    mut read: impl FnMut(&str) -> Result<HostTensor, ExecError>,
) -> Result<Vec<(String, Vec<u8>)>, ExecError> {
    g.outputs()
        .iter()
        .map(|&t| {
            let n = g.tensor(t).name.clone();
            let bytes = read(&n)?.to_bytes();
            Ok((n, bytes))
        })
        .collect()
}

fn print_report(r: &DtrReport, losses: &[f32]) {
    let c = &r.counters;
    let steps = c.steps.max(1) as f64;
    let threshold = r.eviction_threshold.map_or(
        "none (evict only when a request cannot be served)".to_string(),
        human_bytes,
    );
    println!(
        "run-time DTR: pool {}, eviction threshold {}, evictee min size {}, sqrt sampling {}",
        human_bytes(r.memory),
        threshold,
        human_bytes(r.evictee_min_size),
        if r.sqrt_sampling { "on" } else { "off" }
    );
    if let (Some(first), Some(last)) = (losses.first(), losses.last()) {
        println!("  loss {first:.6} -> {last:.6}");
    }
    let vs_threshold = r
        .eviction_threshold
        .map(|t| {
            format!(
                "{:.2}x the threshold; ",
                r.pool.peak_live_bytes as f64 / t.max(1) as f64
            )
        })
        .unwrap_or_default();
    println!(
        "  live peak {} ({}{:.2}x the unplanned peak {}, {:.2}x the lower bound {})",
        human_bytes(r.pool.peak_live_bytes),
        vs_threshold,
        r.pool.peak_live_bytes as f64 / r.unplanned_peak.max(1) as f64,
        human_bytes(r.unplanned_peak),
        r.pool.peak_live_bytes as f64 / r.lower_bound.max(1) as f64,
        human_bytes(r.lower_bound)
    );
    println!(
        "  pool bytes touched {} of {} ({:.2}x the live peak: blocks scattered by frees)",
        human_bytes(r.pool.touched_bytes),
        human_bytes(r.memory),
        r.pool.touched_bytes as f64 / r.pool.peak_live_bytes.max(1) as f64
    );
    println!(
        "  per step: {:.1} evictions ({}), {:.1} recomputations, {:.1} drops at last use, {:.1} requests no free block served, {:.1} defragmentations ({} moved)",
        c.evictions as f64 / steps,
        human_bytes((c.evicted_bytes as f64 / steps) as u64),
        c.recomputes as f64 / steps,
        c.drops as f64 / steps,
        c.unserved_requests as f64 / steps,
        c.defrags as f64 / steps,
        human_bytes((c.moved_bytes as f64 / steps) as u64)
    );
    let ms = |s: f64| s / steps * 1e3;
    let ops = (c.launches + c.recomputes).max(1) as f64;
    println!(
        "  {:.3} ms per step: kernels {:.3} ms, recomputation {:.3} ms, defragmentation {:.3} ms, bookkeeping {:.3} ms ({:.4} ms per kernel launch)",
        ms(r.wall_seconds),
        ms(c.compute),
        ms(c.recompute),
        ms(c.defrag),
        ms(r.bookkeeping_seconds),
        r.bookkeeping_seconds / ops * 1e3,
    );
    println!(
        "  recompute time {:.1}% of first runs' (graph costs predict {:.1}%); bookkeeping time {:.1}% of kernel time",
        100.0 * r.measured_recompute_share(),
        100.0 * r.recompute_share,
        100.0 * r.bookkeeping_seconds / (c.compute + c.recompute).max(f64::MIN_POSITIVE)
    );
}

/// `sgc dtr-sweep FILE`.
#[derive(clap::Args)]
pub struct SweepArgs {
    /// A version-1 graph file.
    file: PathBuf,
    /// Device bytes: the pool run-time DTR allocates from
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    memory: u64,
    /// Eviction thresholds: A..B (nine, evenly spaced), A..B:STEP, or A,B,C
    #[arg(long, value_name = "RANGE")]
    thresholds: String,
    /// Smallest tensor that may be evicted
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value_t = DEFAULT_EVICTEE_MIN_SIZE)]
    evictee_min_size: u64,
    /// Score only about sqrt(N) sampled candidates
    #[arg(long)]
    sqrt_sampling: bool,
    /// Seed of the sampling and of the static planner
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    seed: u64,
    #[command(flatten)]
    profile: super::DeviceProfileArg,
    /// Skip the static plans (DTR only)
    #[arg(long)]
    no_static: bool,
    /// Generations of the static planner's genetic refinement
    #[arg(long, default_value_t = super::defaults::GENETIC_ITERS, allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    genetic_iters: usize,
    /// Draw step cost and peak against the threshold (SVG)
    #[arg(long, value_name = "SVG")]
    plot: Option<PathBuf>,
    /// Print the sweep as JSON
    #[arg(long)]
    json: bool,
}

pub fn sweep(args: SweepArgs) -> CliResult {
    let graph = sgc::ir::load_any(&args.file)?;
    let thresholds =
        sgc::sweep::parse_thresholds(&args.thresholds).map_err(|e| format!("--thresholds: {e}"))?;
    if let Some(p) = &args.plot {
        super::output::refuse_input(p, &[args.file.as_path()])?;
    }
    let options = sgc::sweep::SweepOptions {
        memory: args.memory,
        thresholds,
        evictee_min_size: args.evictee_min_size,
        sqrt_sampling: args.sqrt_sampling,
        seed: args.seed,
        device_profile: args.profile.device_profile.clone(),
        static_plans: !args.no_static,
        genetic_iters: args.genetic_iters,
        workers: None,
    };
    let bar = super::progress::bar(
        false,
        options.thresholds.len() as u64,
        "dtr-sweep threshold {pos}/{len} {elapsed}",
    );
    let s = sgc::sweep::sweep(&graph, &options, |_, _| {
        if let Some(b) = &bar {
            b.inc(1);
        }
    })?;
    super::progress::done(&bar);
    if let Some(p) = &args.plot {
        super::output::write(p, sgc::sweep::svg(&s).as_bytes())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    print!("{}", sgc::sweep::markdown(&s));
    if !args.no_static {
        for (t, v) in sgc::sweep::verdicts(&s) {
            if let Err(why) = v {
                println!(
                    "at threshold {:.2} GB the static plan does not beat DTR: {why}",
                    t as f64 / 1e9
                );
            }
        }
    }
    if let Some(p) = &args.plot {
        println!("plot written to {}", p.display());
    }
    Ok(())
}
