//! `sgc profile FILE --device cpu|cuda -o timed.json`: runs the graph's training step on the
//! device and writes the graph with each op's measured time as `time_us` (the median over
//! `--steps` steps after `--warmup` untimed ones; per op, the device time between the
//! backend's marks around its launch: CUDA events on CUDA, the wall clock on the CPU;
//! `sgc::exec::timing`), and `meta.time_us_source` saying how. Every op's `time_us` is
//! replaced (`sgc cost` fills in estimates instead, keeping times that are there). A plan
//! of the timed graph predicts its planned / unplanned time on that device, which
//! `sgc run --compare` prints beside what it measures. Writing is as `sgc cost`'s: the
//! output is validated, written atomically, gzip when `OUT` ends in `.gz`, never over the
//! input.

use super::run::Device;
use super::{output, CliResult};
use sgc::exec::timing::{self, Measured, TimingOptions};
use sgc::exec::{Backend, CpuBackend, CudaBackend, ExecError};
use sgc::ir::{format, Graph};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file (plain or .json.gz).
    file: PathBuf,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    /// Timed steps; each op's time is its median over them.
    #[arg(long, default_value_t = 5, allow_negative_numbers = true, value_parser = super::positive::<u64>())]
    steps: u64,
    /// Untimed steps first (first steps pay one-off costs).
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = super::positive::<u64>())]
    warmup: u64,
    /// Seed of the inputs and parameters.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    seed: u64,
    /// Write the graph with measured times here (gzip when it ends in .gz).
    #[arg(short, long)]
    output: PathBuf,
}

pub fn run(args: Args) -> CliResult {
    output::refuse_input(&args.output, &[&args.file])?;
    let graph = sgc::ir::load_any(&args.file)?;
    match args.device {
        Device::Cpu => profile_on(&args, &graph, CpuBackend::new()),
        Device::Cuda => profile_on(&args, &graph, CudaBackend::new(0)?),
    }
}

fn profile_on<B: Backend>(args: &Args, graph: &Graph, backend: B) -> CliResult {
    let file = args.file.display();
    let options = TimingOptions {
        warmup: args.warmup as usize,
        steps: args.steps as usize,
    };
    let mut ex = sgc::runner::unplanned(graph, backend)?;
    ex.bind_seeded(args.seed)?;
    let bar = super::progress::bar(
        false,
        (options.warmup + options.steps) as u64,
        "profiling step {pos}/{len} {elapsed}",
    );
    let tick = || bar.iter().for_each(|b| b.inc(1));
    let seconds =
        timing::profile(&mut ex, &options, tick).map_err(|e: ExecError| format!("{file}: {e}"))?;
    super::progress::done(&bar);
    let device = ex.report().device;
    let how = Measured {
        device: device.clone(),
        clock: B::CLOCK,
        options,
    };
    let timed = timing::timed_graph(graph, &seconds, &how).map_err(|e| format!("{file}: {e}"))?;
    format::save(&timed, &args.output)
        .map_err(|e| format!("{}: cannot write: {e}", args.output.display()))?;
    let step_us: f64 = timed.op_ids().filter_map(|o| timed.op(o).time_us).sum();
    println!(
        "{file}: time_us measured on all {} ops on {device} ({}, median of {} steps after {} warm-up): {:.3} ms per step; written to {}",
        graph.num_ops(),
        B::CLOCK,
        options.steps,
        options.warmup,
        step_us / 1e3,
        args.output.display()
    );
    Ok(())
}
