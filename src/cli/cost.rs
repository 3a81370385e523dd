//! `sgc cost FILE --device-profile a100 -o OUT`: the graph with `time_us` filled in, by
//! the profile's roofline estimate, on every op that lacks it, and `meta.time_us_source`
//! recording the method and the rates (the method is in `sgc::ir::cost`). Ops that have
//! `time_us` keep it. The output is validated, written to a temporary file next to `OUT`
//! and renamed over it, so a failed write never leaves half a graph; it is gzip when `OUT`
//! ends in `.gz`. `OUT` may not be the input file.

use super::{CliResult, DeviceProfileArg};
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
    if same_file(&args.file, &args.output) {
        return Err(format!(
            "{}: -o names the input file; write the costed graph to another path",
            args.output.display()
        )
        .into());
    }
    let graph = sgc::ir::load_any(&args.file)?;
    let summary = EstimateSummary::of(&graph, &device);
    let (costed, estimated) =
        with_estimated_times(&graph, &device).map_err(|e| format!("{file}: {e}"))?;
    write_atomically(&costed, &args.output)?;
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

/// Whether two paths name the same file (the output may not exist yet).
fn same_file(input: &Path, output: &Path) -> bool {
    match (input.canonicalize(), output.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => input == output,
    }
}

/// Writes the graph to a temporary file beside `out` (same suffix, so `.gz` compresses
/// alike), then renames it over `out`.
fn write_atomically(graph: &sgc::ir::Graph, out: &Path) -> CliResult {
    let name = out
        .file_name()
        .ok_or_else(|| format!("{}: not a file path", out.display()))?
        .to_string_lossy();
    let tmp = out.with_file_name(format!(".{}.tmp.{name}", std::process::id()));
    let written = format::save(graph, &tmp).and_then(|()| std::fs::rename(&tmp, out));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}: cannot write: {e}", out.display()).into());
    }
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
