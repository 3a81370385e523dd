//! `sgc run FILE`: execute training steps of a graph, planned or not, on a device, with
//! inputs and parameters initialised from a seed, and print what the backend measured:
//! bytes allocated (against the plan's arena + persistent bytes, the memory model's peak
//! and the lower bound), time per step and time spent recomputing. `--compare` also runs
//! the unplanned schedule and prints both, with whether their loss curves are bitwise
//! equal.

use super::{CliResult, StrategyArg};
use sgc::exec::{Backend, CpuBackend, CudaBackend, ExecError, Executor, RunReport};
use sgc::ir::Graph;
use sgc::plan::{Plan, PlanOptions};
use sgc::units::human_bytes;
use std::path::PathBuf;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Device {
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
    #[arg(long, value_enum)]
    strategy: Option<StrategyArg>,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    /// Training steps to run.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Seed of the inputs and parameters.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also run the unplanned schedule and print both.
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
    let graph = sgc::ir::load_any(&args.file)?;
    let plan = match (&args.plan, args.strategy) {
        (Some(path), _) => Some(read_plan(path, &graph)?),
        (None, Some(s)) => {
            // The same search `sgc plan` runs by default.
            let options = PlanOptions {
                strategy: s.into(),
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

/// One run's result: its label, loss curve and report.
struct Outcome {
    label: String,
    losses: Vec<f32>,
    report: RunReport,
}

fn run_on<B: Backend>(
    args: &Args,
    graph: &Graph,
    plan: Option<&Plan>,
    backend: impl Fn() -> Result<B, ExecError>,
) -> CliResult {
    let mut outcomes = Vec::new();
    let planned = match plan {
        Some(p) => Executor::from_plan(graph, p, backend()?)?,
        None => Executor::unplanned(graph, backend()?)?,
    };
    let label = plan.map_or("unplanned".to_string(), |p| {
        format!("planned ({})", p.options.strategy)
    });
    outcomes.push(execute(planned, label, args)?);
    if args.compare && plan.is_some() {
        let base = Executor::unplanned(graph, backend()?)?;
        outcomes.push(execute(base, "unplanned".to_string(), args)?);
    }
    if args.json {
        let v: Vec<_> = outcomes
            .iter()
            .map(|o| serde_json::json!({"run": o.label, "losses": o.losses, "report": o.report}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} on {}, {} step{}, seed {}",
        args.file.display(),
        outcomes[0].report.device,
        args.steps,
        if args.steps == 1 { "" } else { "s" },
        args.seed
    );
    for o in &outcomes {
        print_outcome(o, plan.filter(|_| o.label != "unplanned"));
    }
    if let [a, b] = outcomes.as_slice() {
        let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let same = bits(&a.losses) == bits(&b.losses);
        let memory =
            a.report.allocator.peak_bytes as f64 / b.report.allocator.peak_bytes.max(1) as f64;
        let time = a.report.seconds / b.report.seconds.max(f64::MIN_POSITIVE);
        println!(
            "planned vs unplanned: loss curves bitwise {}; planned / unplanned: memory {:.3}x, time {:.3}x",
            if same { "equal" } else { "DIFFERENT" },
            memory,
            time
        );
    }
    Ok(())
}

fn execute<B: Backend>(
    mut ex: Executor<B>,
    label: String,
    args: &Args,
) -> Result<Outcome, ExecError> {
    ex.bind_seeded(args.seed)?;
    // Steps of a large graph take seconds each: a bar on a terminal says how far it is.
    let bar = super::progress::bar(
        false,
        args.steps as u64,
        "{msg:>12} step {pos}/{len} {elapsed}",
    );
    if let Some(b) = &bar {
        b.set_message(label.clone());
    }
    let mut losses = Vec::with_capacity(args.steps);
    for _ in 0..args.steps {
        losses.extend(ex.run(1)?);
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    super::progress::done(&bar);
    Ok(Outcome {
        label,
        losses,
        report: ex.report(),
    })
}

fn print_outcome(o: &Outcome, plan: Option<&Plan>) {
    let r = &o.report;
    println!("{}:", o.label);
    if let (Some(first), Some(last)) = (o.losses.first(), o.losses.last()) {
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
    let per_step = r.seconds / r.steps.max(1) as f64;
    let predicted = plan.map_or(0.0, |p| p.summary.recompute_share);
    println!(
        "  {:.3} ms per step, {} ops ({} recomputed); recompute time {:.1}% (plan predicted {:.1}%)",
        per_step * 1e3,
        r.schedule_len,
        r.recompute_steps,
        100.0 * r.recompute_seconds / r.seconds.max(f64::MIN_POSITIVE),
        100.0 * predicted
    );
}
