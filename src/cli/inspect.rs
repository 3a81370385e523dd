//! `sgc inspect FILE` (the report is `sgc::report::inspect`): what a graph holds and what its unplanned step costs in memory,
//! always next to the per-op lower bound, and in time, with the cost's source. With
//! `--device-profile`, ops without `time_us` are costed by their roofline estimate and the
//! report gives the share of estimated time spent in memory-bound ops. With `--device`,
//! the ops that backend cannot run (known without the device: CI checks CUDA coverage on
//! machines with no GPU).

use super::{CliResult, DeviceProfileArg};
use sgc::exec::coverage::Target;
use sgc::report::inspect::InspectReport;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file or a Checkmate node-link file.
    file: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// How many of the largest tensors to list.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    top: usize,
    /// Alignment of the unplanned arena (offsets are multiples of it, sizes padded).
    #[arg(long, value_parser = sgc::units::parse_size, default_value_t = super::defaults::ALIGN)]
    align: u64,
    #[command(flatten)]
    device: DeviceProfileArg,
    /// List the ops this backend cannot run (per op type, with the reason), or say that it
    /// runs them all; works in a build without CUDA and on a machine without a GPU.
    #[arg(long = "device", value_name = "BACKEND")]
    backend: Option<BackendArg>,
}

/// `--device` values of `inspect`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum BackendArg {
    Cpu,
    Cuda,
}

pub fn run(args: Args) -> CliResult {
    let graph = sgc::ir::load_any(&args.file)?;
    let file = args.file.display().to_string();
    let device = args.device.device_profile;
    let report = InspectReport::new(&graph, &file, args.top, device.as_ref(), args.align)
        .map_err(|e| format!("{file}: {e}"))?;
    let report = match args.backend {
        Some(BackendArg::Cpu) => report.with_coverage(&graph, Target::Cpu),
        Some(BackendArg::Cuda) => report.with_coverage(&graph, Target::Cuda),
        None => report,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(())
}
