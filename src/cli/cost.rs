//! `sgc cost FILE --device-profile a100 -o OUT`: the graph with `time_us` filled in, by
//! the profile's roofline estimate, on every op that lacks it, and `meta.time_us_source`
//! recording the method and the rates (the method is in `sgc::ir::cost`). Ops that have
//! `time_us` keep it. The output is validated, written to a temporary file next to `OUT`
//! and renamed over it, so a failed write never leaves half a graph; it is gzip when `OUT`
//! ends in `.gz`. `OUT` may not be the input file.

use super::{output, CliResult, DeviceProfileArg};
use sgc::ir::cost::with_estimated_times;
use sgc::ir::{format, DeviceProfile, EstimateSummary};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file or a Checkmate node-link file (plain or .json.gz).
    file: PathBuf,
    #[command(flatten)]
    device: DeviceProfileArg,
    /// Write the graph with estimated times here (gzip when it ends in .gz).
    #[arg(short, long)]
    output: PathBuf,
}

pub fn run(args: Args) -> CliResult {
    let file = args.file.display().to_string();
    let device = args.device.device_profile.clone().ok_or(
        "sgc cost needs --device-profile NAME|F32/HALF/GBPS (v100, t4, a100, l4, h100, rtx4090, or rates such as 19.5/312/2039)",
    )?;
    output::refuse_input(&args.output, &[&args.file])?;
    let graph = sgc::ir::load_any(&args.file)?;
    let summary = EstimateSummary::of(&graph, &device);
    let (costed, estimated) =
        with_estimated_times(&graph, &device).map_err(|e| format!("{file}: {e}"))?;
    format::save(&costed, &args.output)
        .map_err(|e| format!("{}: cannot write: {e}", args.output.display()))?;
    println!(
        "{}",
        report(
            &file,
            &args.output,
            &device,
            &summary,
            estimated,
            graph.num_ops()
        )
    );
    Ok(())
}

fn report(
    file: &str,
    out: &Path,
    device: &DeviceProfile,
    s: &EstimateSummary,
    estimated: usize,
    ops: usize,
) -> String {
    if estimated == 0 {
        return format!(
            "{file}: every op already has time_us; nothing estimated; written to {}",
            out.display()
        );
    }
    format!(
        "{file}: time_us estimated on {estimated} of {ops} ops (roofline {}: {} TFLOP/s f32, {} TFLOP/s f16/bf16, {} GB/s): {:.4e} us, {:.1}% of it in {} memory-bound ops; written to {}",
        device.name(),
        device.f32_tflops(),
        device.half_tflops(),
        device.bandwidth_gbps(),
        s.estimated_time_us,
        100.0 * s.memory_bound_share(),
        s.memory_bound_ops,
        out.display()
    )
}
