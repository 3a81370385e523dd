//! `sgc fit FILE --memory 11GiB`: the largest batch whose arena plus persistent bytes fit
//! the memory, unplanned and under each requested strategy, and the batch past which the
//! per-op lower bound alone exceeds it. The method is in `sgc::fit`.

use super::defaults;
use super::{CliResult, DeviceProfileArg};
use sgc::fit::{fit, FitOptions, FitReport, Probe};
use sgc::plan::alloc::ArenaEffort;
use sgc::plan::PlanOptions;
use sgc::units::{human_bytes, parse_size};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file whose data inputs declare `batch_dim`.
    file: PathBuf,
    /// Device memory (e.g. 11GiB, 24GB, 80GiB).
    #[arg(long, value_parser = parse_size)]
    memory: u64,
    /// Memory kept free for everything else on the device (CUDA context, workspaces).
    #[arg(long, value_parser = parse_size, default_value = "0")]
    reserve: u64,
    /// The most a fitting plan may recompute, as a share of one step: 1/3, 0.5, 25%, or
    /// none (no limit: the largest batch whatever it costs).
    #[arg(long, value_parser = parse_share, default_value = defaults::FIT_MAX_RECOMPUTE_TEXT)]
    max_recompute: Share,
    /// Strategies to search, comma-separated or repeated, in this order.
    #[arg(long, value_delimiter = ',', default_values_t = defaults::FIT_STRATEGIES, value_parser = super::strategy_parser())]
    strategy: Vec<sgc::plan::Strategy>,
    /// sublinear: generations of genetic refinement (0 = off).
    #[arg(long, default_value_t = defaults::GENETIC_ITERS, allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    genetic_iters: usize,
    /// sublinear: evenly spaced thresholds to try.
    #[arg(long, default_value_t = defaults::thresh_tries(), allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    thresh_tries: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = defaults::seed(), allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    seed: u64,
    /// Arena offsets are multiples of this many bytes.
    #[arg(long, default_value_t = defaults::ALIGN, allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    align: u64,
    /// How hard to search the arenas fit places itself, one per batch probed, for the
    /// strategies planned without a budget (all but sublinear and dtr): the values of `sgc
    /// plan --arena-effort`. The default here is `fast` (heuristics only), not plan's `plan`;
    /// sublinear and dtr place theirs while planning, at plan's default.
    #[arg(long, value_parser = super::arena_effort(), default_value = "fast")]
    arena_effort: ArenaEffort,
    /// Deprecated: the old name of --arena-effort (same values).
    #[arg(long, hide = true, value_parser = super::arena_effort(), conflicts_with = "arena_effort")]
    alloc_effort: Option<ArenaEffort>,
    /// Planner worker threads (default: all cores); results do not depend on it.
    #[arg(long)]
    #[arg(allow_negative_numbers = true, value_parser = super::within::<u64>(defaults::WORKERS))]
    workers: Option<u64>,
    /// Print every probe to stderr as it completes.
    #[arg(long, short)]
    verbose: bool,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    device: DeviceProfileArg,
    #[command(flatten)]
    distribution: super::DistributionArg,
}

pub fn run(args: Args) -> CliResult {
    if args.alloc_effort.is_some() {
        eprintln!("warning: --alloc-effort is deprecated: use --arena-effort (the same values)");
    }
    let effort = args.alloc_effort.unwrap_or(args.arena_effort);
    let file = args.file.display().to_string();
    let graph = sgc::ir::load_any(&args.file)?;
    let (graph, per_rank) = args.distribution.apply(graph, &file)?;
    let strategies: Vec<PlanOptions> = args
        .strategy
        .iter()
        .map(|&s| PlanOptions {
            strategy: s,
            seed: args.seed,
            genetic_iters: args.genetic_iters,
            thresh_tries: args.thresh_tries,
            device_profile: args.device.device_profile.clone(),
            ..PlanOptions::default()
        })
        .collect();
    let opts = FitOptions {
        memory: args.memory,
        reserve: args.reserve,
        align: args.align,
        effort,
        workers: args.workers.map(|w| w as usize),
        max_recompute: args.max_recompute.0,
    };
    let verbose = args.verbose;
    // Each probe plans the rescaled graph: seconds in all on a large one.
    let bar = super::progress::bar(args.quiet, 0, "{spinner} {msg} {elapsed}");
    let mut observe = |strategy: &str, p: &Probe| {
        if let Some(b) = &bar {
            let fits = if p.fits { "fits" } else { "does not fit" };
            b.set_message(format!("{strategy}: batch {} {fits}", p.batch));
            b.tick();
        }
        if verbose {
            eprintln!(
                "{strategy:>10} batch {:>6}: {} (arena {}, peak {}, {:.2}s)",
                p.batch,
                if p.fits { "fits" } else { "does not fit" },
                human_bytes(p.arena),
                human_bytes(p.peak),
                p.plan_seconds
            );
        }
    };
    let report = fit(&graph, &strategies, &opts, &mut observe);
    super::progress::done(&bar);
    let report = report.map_err(|e| format!("{file}: {e}"))?;
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        if let (Some(map), Some(p)) = (value.as_object_mut(), &per_rank) {
            map.insert("per_rank".into(), serde_json::to_value(p)?);
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        if let Some(p) = &per_rank {
            print!("{}", per_rank_line(p));
        }
        print!("{}", table(&file, &report));
    }
    nothing_fits(&report).map_or(Ok(()), |why| Err(format!("{file}: {why}").into()))
}

/// Why no strategy fits even batch 1, if none does: the per-op lower bound, or every
/// strategy's plans above the limit (persistent bytes above it are the library's error).
fn nothing_fits(r: &FitReport) -> Option<String> {
    if r.strategies.iter().any(|f| f.batch > 0) {
        return None;
    }
    let limit = human_bytes(r.limit);
    Some(if r.lower_bound_batch == 0 {
        format!(
            "no batch fits: at batch 1 the per-op lower bound alone is {} (limit {limit}); give --memory at least that",
            human_bytes(r.lower_bound_next)
        )
    } else if r.least_peak_batch == 0 {
        format!(
            "no batch fits: at batch 1 no plan that keeps or recomputes needs less than {} (the least-peak lower bound; limit {limit}); give --memory at least that",
            human_bytes(r.least_peak_next)
        )
    } else if r.kept_outputs_batch == 0 {
        format!(
            "no batch fits: at batch 1 no plan that keeps or recomputes and keeps each graph output from when it is made (every strategy's but optimal's) needs less than {} (the kept-outputs lower bound; limit {limit}); give --memory at least that",
            human_bytes(r.kept_outputs_next)
        )
    } else {
        format!(
            "no strategy fits batch 1 within the limit {limit} (the lower bounds would allow batch {}; every plan tried needs more, or recomputes more than --max-recompute): give more --memory, a larger --max-recompute, or another --strategy",
            r.kept_outputs_batch
        )
    })
}

/// What the graph planned is: one rank's, with its persistent terms.
fn per_rank_line(p: &sgc::ir::distributed::PerRank) -> String {
    format!(
        "per rank: world size {}, shard {}, optimizer {}: parameters {}, gradient shards {}, optimizer state {}, unsharded blocks {}\n",
        p.world_size,
        p.shard.as_str(),
        p.optimizer,
        human_bytes(p.rank_parameter_bytes),
        human_bytes(p.gradient_bytes),
        human_bytes(p.optimizer_bytes),
        human_bytes(p.unsharded_bytes)
    )
}

/// A share of one step, or no limit.
#[derive(Clone, Copy, Debug)]
pub struct Share(Option<f64>);

/// `1/3`, `0.5`, `25%` or `none`.
fn parse_share(text: &str) -> Result<Share, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(Share(None));
    }
    let bad = || format!("`{text}`: expected a share of a step such as 1/3, 0.5 or 25%, or none");
    let value = if let Some(pct) = t.strip_suffix('%') {
        pct.trim().parse::<f64>().map_err(|_| bad())? / 100.0
    } else if let Some((a, b)) = t.split_once('/') {
        let (a, b): (f64, f64) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if b == 0.0 {
            return Err(bad());
        }
        a / b
    } else {
        t.parse::<f64>().map_err(|_| bad())?
    };
    if !value.is_finite() || value < 0.0 {
        return Err(bad());
    }
    Ok(Share(Some(value)))
}

fn table(file: &str, r: &FitReport) -> String {
    let mut s = format!(
        "{file}: {} (batch {} in the file); memory {} - reserve {} = limit {}; persistent {}\n",
        r.graph.as_deref().unwrap_or("(unnamed)"),
        r.graph_batch,
        human_bytes(r.memory),
        human_bytes(r.reserve),
        human_bytes(r.limit),
        human_bytes(r.persistent_bytes)
    );
    s += "a batch fits when its arena plus the persistent bytes are within the limit";
    s += &match r.max_recompute {
        Some(m) => format!(
            " and its plan recomputes at most {:.1}% of a step (--max-recompute; none: no limit)\n",
            100.0 * m
        ),
        None => ", whatever its plan recomputes (--max-recompute none)\n".into(),
    };
    s += "arena: held against the limit (plus the persistent bytes); model peak: the memory model's peak (persistent bytes included), for reference, not compared\n";
    s += &format!(
        "{:<11} {:>7} {:>8} {:>11} {:>11} {:>10} {:>10} {:>7} {:>9}\n",
        "strategy",
        "batch",
        "vs none",
        "model peak",
        "arena",
        "recompute",
        "plan time",
        "probes",
        "search"
    );
    let none = r
        .strategies
        .iter()
        .find(|f| f.strategy == "none")
        .map(|f| f.batch);
    for f in &r.strategies {
        let ratio = match none {
            Some(n) if n > 0 => format!("{:.2}x", f.batch as f64 / n as f64),
            _ => "-".to_string(),
        };
        let p = f.fitting.as_ref();
        s += &format!(
            "{:<11} {:>7} {:>8} {:>11} {:>11} {:>9.1}% {:>9.2}s {:>7} {:>8.1}s\n",
            f.strategy,
            f.batch,
            ratio,
            p.map_or("-".into(), |p| human_bytes(p.peak)),
            p.map_or("-".into(), |p| human_bytes(p.arena)),
            p.map_or(0.0, |p| 100.0 * p.recompute_share),
            p.map_or(0.0, |p| p.plan_seconds),
            f.probes.len(),
            f.search_seconds
        );
        if !f.non_monotone.is_empty() {
            s += &format!(
                "  note: {} is not monotone in the batch here: {:?} fit above a batch that did not\n",
                f.strategy, f.non_monotone
            );
        }
    }
    s += &trade(r);
    let sources: std::collections::BTreeSet<&str> = r
        .strategies
        .iter()
        .filter_map(|f| f.fitting.as_ref()?.cost_source.as_deref())
        .collect();
    if !sources.is_empty() {
        let sources: Vec<&str> = sources.into_iter().collect();
        s += &format!(
            "recompute: share of one step's cost, from {}\n",
            sources.join("; ")
        );
    }
    s += &format!(
        "per-op lower bound: batch {} at most; at batch {} the bound alone is {} (> limit): no plan fits it\n",
        r.lower_bound_batch,
        r.lower_bound_batch + 1,
        human_bytes(r.lower_bound_next)
    );
    s += &least_peak_line(r);
    s += &kept_outputs_line(r);
    s
}

/// What the least-peak lower bound allows, where it is tighter than the per-op one.
fn least_peak_line(r: &FitReport) -> String {
    if r.least_peak_batch == r.lower_bound_batch {
        return "least-peak lower bound: the same batch (no plan that keeps or recomputes needs less)\n"
            .into();
    }
    format!(
        "least-peak lower bound: {}; at batch {} no plan that keeps or recomputes needs less than {} (> limit)\n",
        at_most(r.least_peak_batch),
        r.least_peak_batch + 1,
        human_bytes(r.least_peak_next)
    )
}

/// What the kept-outputs lower bound allows, where it is tighter than the least-peak one.
fn kept_outputs_line(r: &FitReport) -> String {
    if r.kept_outputs_batch == r.least_peak_batch {
        return "kept-outputs lower bound: the same batch (no plan that keeps each graph output from when it is made needs less)\n"
            .into();
    }
    format!(
        "kept-outputs lower bound: {}; at batch {} no plan that keeps or recomputes and keeps each graph output from when it is made (every strategy's but optimal's) needs less than {} (> limit)\n",
        at_most(r.kept_outputs_batch),
        r.kept_outputs_batch + 1,
        human_bytes(r.kept_outputs_next)
    )
}

/// "batch B at most", or "no batch" for 0.
fn at_most(batch: u64) -> String {
    if batch == 0 {
        "no batch".into()
    } else {
        format!("batch {batch} at most")
    }
}

/// Per strategy whose recompute changes with the batch (the budget-aware ones), every
/// batch probed with its device bytes and recompute share: the trade between batch and
/// recompute, around the answer.
fn trade(r: &FitReport) -> String {
    let mut s = String::new();
    for f in &r.strategies {
        // Shares as printed (0.1% steps): chen-sqrt's differ only in rounding.
        let shares: std::collections::BTreeSet<i64> = f
            .probes
            .iter()
            .filter(|p| p.cost_source.is_some())
            .map(|p| (p.recompute_share * 1000.0).round() as i64)
            .collect();
        if shares.len() < 2 {
            continue;
        }
        s += &format!(
            "{}: batch against recompute (every batch probed)\n{:>9} {:>13} {:>10}  {}\n",
            f.strategy, "batch", "device bytes", "recompute", "fits"
        );
        for p in &f.probes {
            let planned = p.cost_source.is_some();
            let device = if planned {
                human_bytes(p.arena + p.persistent)
            } else {
                "-".into()
            };
            let share = if planned {
                format!("{:.1}%", 100.0 * p.recompute_share)
            } else {
                "-".into()
            };
            let fits = if p.fits {
                "yes".to_string()
            } else {
                format!("no: {}", p.note.as_deref().unwrap_or("no plan"))
            };
            s += &format!("{:>9} {:>13} {:>10}  {fits}\n", p.batch, device, share);
        }
    }
    s
}
