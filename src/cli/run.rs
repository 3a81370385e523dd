//! `sgc run FILE`: execute training steps of a graph, planned or not, on a device, with
//! inputs and parameters initialised from a seed, and print what the backend measured:
//! bytes allocated (against the plan's arena + persistent bytes, the memory model's peak
//! and the lower bound), the host pool of a plan's offloads (against its host peak), time
//! per step and time spent recomputing. `--compare` also runs
//! the unplanned schedule and prints both, with whether their loss curves are bitwise
//! equal.

use super::CliResult;
use sgc::exec::timing::{self, Timed, TimingOptions};
use sgc::exec::{Backend, CpuBackend, CudaBackend, Executor, RunReport};
use sgc::ir::Graph;
use sgc::plan::{Plan, PlanOptions};
use sgc::units::human_bytes;
use std::path::PathBuf;

/// `--device` of `run` and `profile`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    Cpu,
    Cuda,
}

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file.
    file: PathBuf,
    /// A plan file written for this graph.
    #[arg(long, conflicts_with = "strategy")]
    plan: Option<PathBuf>,
    /// Plan the graph now with this strategy (neither --plan nor --strategy: unplanned).
    #[arg(long, value_parser = super::strategy_parser())]
    strategy: Option<sgc::plan::Strategy>,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    /// Timed training steps to run (after the warm-up).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    steps: usize,
    /// Untimed steps before the timed ones (first steps pay one-off costs; not with --dtr).
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = super::positive::<u64>(), conflicts_with = "dtr")]
    warmup: u64,
    /// Seed of the inputs and parameters.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    seed: u64,
    /// Also run the unplanned schedule and print both (with --plan, --strategy or --dtr).
    #[arg(long)]
    compare: bool,
    /// Print the reports as JSON.
    #[arg(long)]
    json: bool,
    /// Run under run-time DTR (MegEngine's dynamic eviction) instead of a plan.
    #[arg(long, conflicts_with_all = ["plan", "strategy"])]
    dtr: bool,
    #[command(flatten)]
    dtr_args: super::dtr::DtrArgs,
}

pub fn run(args: Args) -> CliResult {
    if args.dtr {
        let common = super::dtr::RunCommon {
            file: &args.file,
            steps: args.steps,
            seed: args.seed,
            compare: args.compare,
            json: args.json,
        };
        return match args.device {
            Device::Cpu => super::dtr::run(&common, &args.dtr_args, || Ok(CpuBackend::new())),
            Device::Cuda => super::dtr::run(&common, &args.dtr_args, || CudaBackend::new(0)),
        };
    }
    if args.compare && args.plan.is_none() && args.strategy.is_none() {
        return Err(format!(
            "{}: --compare runs a plan beside the unplanned run: name the plan with --strategy \
             (e.g. --strategy sublinear) or --plan FILE, or use --dtr to compare run-time eviction",
            args.file.display()
        )
        .into());
    }
    let graph = sgc::ir::load_any(&args.file)?;
    let plan = match (&args.plan, args.strategy) {
        (Some(path), _) => Some(read_plan(path, &graph)?),
        (None, Some(s)) => {
            // The same search `sgc plan` runs by default.
            let options = PlanOptions {
                strategy: s,
                seed: args.seed,
                genetic_iters: super::defaults::GENETIC_ITERS,
                ..Default::default()
            };
            Some(sgc::plan::plan(&graph, &options, &Default::default())?)
        }
        (None, None) => None,
    };
    match args.device {
        Device::Cpu => run_on(&args, &graph, plan.as_ref(), || Ok(CpuBackend::new())),
        Device::Cuda => run_on(&args, &graph, plan.as_ref(), || CudaBackend::new(0)),
    }
}

fn read_plan(path: &std::path::Path, graph: &Graph) -> Result<Plan, Box<dyn std::error::Error>> {
    let text = sgc::ir::file::read_limited(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let plan = Plan::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    plan.check_graph(graph)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // Refused here, before a backend starts (a CUDA context is slow to make and its error
    // would hide this one); the executor checks again for library callers.
    sgc::plan::check(graph, &plan).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(plan)
}

/// One run's result: its label, timed steps and report.
struct Outcome {
    label: String,
    timed: Timed,
    report: RunReport,
}

fn run_on<B: Backend>(
    args: &Args,
    graph: &Graph,
    plan: Option<&Plan>,
    backend: impl Fn() -> Result<B, sgc::exec::ExecError>,
) -> CliResult {
    let options = TimingOptions {
        warmup: args.warmup as usize,
        steps: args.steps,
    };
    let mut first = match plan {
        Some(p) => sgc::runner::planned(graph, p, backend()?)?,
        None => sgc::runner::unplanned(graph, backend()?)?,
    };
    first.bind_seeded(args.seed)?;
    let label = plan.map_or("unplanned".to_string(), |p| {
        format!("planned ({})", p.options.strategy)
    });
    let compare = args.compare && plan.is_some();
    let runs = if compare { 2 } else { 1 };
    // Steps of a large graph take seconds each: a bar on a terminal says how far it is.
    let bar = super::progress::bar(
        false,
        (runs * (options.warmup + options.steps)) as u64,
        "{msg:>12} step {pos}/{len} {elapsed}",
    );
    if let Some(b) = &bar {
        b.set_message(label.clone());
    }
    let tick = || bar.iter().for_each(|b| b.inc(1));
    let mut outcomes = Vec::new();
    if compare {
        let mut base = sgc::runner::unplanned(graph, backend()?)?;
        base.bind_seeded(args.seed)?;
        let c = timing::compare(&mut first, &mut base, &options, tick)?;
        outcomes.push(outcome(label, c.planned, &first));
        outcomes.push(outcome("unplanned".to_string(), c.unplanned, &base));
    } else {
        let t = timing::measure(&mut first, &options, tick)?;
        outcomes.push(outcome(label, t, &first));
    }
    super::progress::done(&bar);
    let predicted = plan.map(timing::predicted_ratio);
    if args.json {
        let v: Vec<_> = outcomes
            .iter()
            .map(|o| {
                serde_json::json!({"run": o.label, "losses": o.timed.losses, "timing": o.timed,
                    "predicted_time_ratio": predicted.filter(|_| o.label != "unplanned"),
                    "time_ratio": comparison(&outcomes).filter(|_| o.label != "unplanned").map(|c| c.time_ratio()),
                    "report": o.report})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} on {}, {} warm-up + {} timed step{}, seed {}",
        args.file.display(),
        outcomes[0].report.device,
        options.warmup,
        args.steps,
        if args.steps == 1 { "" } else { "s" },
        args.seed
    );
    for o in &outcomes {
        print_outcome(o, plan.filter(|_| o.label != "unplanned"));
    }
    if let (Some(c), Some(p)) = (comparison(&outcomes), plan) {
        print_comparison(&c, &outcomes[0].report, &outcomes[1].report, p);
    }
    Ok(())
}

fn outcome<B: Backend>(label: String, timed: Timed, ex: &Executor<B>) -> Outcome {
    Outcome {
        label,
        timed,
        report: ex.report(),
    }
}

/// The planned and unplanned runs of `--compare`, if both ran.
fn comparison(outcomes: &[Outcome]) -> Option<timing::Comparison> {
    match outcomes {
        [a, b] => Some(timing::Comparison {
            planned: a.timed.clone(),
            unplanned: b.timed.clone(),
        }),
        _ => None,
    }
}

fn print_comparison(c: &timing::Comparison, a: &RunReport, b: &RunReport, plan: &Plan) {
    let memory = a.allocator.peak_bytes as f64 / b.allocator.peak_bytes.max(1) as f64;
    println!(
        "planned vs unplanned: loss curves bitwise {}; planned / unplanned: memory {:.3}x, time {:.3}x (median of paired steps); plan predicted {:.3}x (costs from {})",
        if c.losses_bitwise_equal() { "equal" } else { "DIFFERENT" },
        memory,
        c.time_ratio(),
        timing::predicted_ratio(plan),
        plan.summary.cost_source
    );
}

fn print_outcome(o: &Outcome, plan: Option<&Plan>) {
    let r = &o.report;
    let t = &o.timed;
    println!("{}:", o.label);
    if let (Some(first), Some(last)) = (t.losses.first(), t.losses.last()) {
        println!("  loss {first:.6} -> {last:.6}");
    }
    println!(
        "  allocated {} (peak {}, {} allocations) = arena {} + persistent {}; plan promised {}",
        human_bytes(r.allocator.allocated_bytes),
        human_bytes(r.allocator.peak_bytes),
        r.allocator.allocations,
        human_bytes(r.arena_bytes),
        human_bytes(r.persistent_bytes),
        human_bytes(r.planned_bytes)
    );
    println!(
        "  memory model peak {} ({:.2}x the lower bound {}); arena packing {:.2}x the model peak",
        human_bytes(r.model_peak_bytes),
        r.model_peak_bytes as f64 / r.lower_bound_bytes.max(1) as f64,
        human_bytes(r.lower_bound_bytes),
        r.planned_bytes as f64 / r.model_peak_bytes.max(1) as f64
    );
    if r.offloads > 0 {
        let host_peak = plan.and_then(|p| p.host.as_ref()).map_or(0, |h| h.peak);
        println!(
            "  offloads: {} storage{} per step, {} to host and back; host pool {} (the plan's host peak {}), not device memory",
            r.offloads,
            if r.offloads == 1 { "" } else { "s" },
            human_bytes(r.offload_bytes),
            human_bytes(r.host_pool_bytes),
            human_bytes(host_peak)
        );
    }
    let (q1, q3) = t.times.quartiles();
    let predicted = plan.map_or(0.0, |p| p.summary.recompute_share);
    println!(
        "  {:.3} ms per step (median of {}; quartiles {:.3} ms to {:.3} ms; {}), {} ops ({} recomputed); recompute time {:.1}% (plan predicted {:.1}%)",
        t.times.median() * 1e3,
        t.times.seconds.len(),
        q1 * 1e3,
        q3 * 1e3,
        t.clock,
        r.schedule_len,
        r.recompute_steps,
        100.0 * t.recompute_share,
        100.0 * predicted
    );
}
