//! `sgc rescale FILE --batch N -o OUT`: the graph at another batch size (shapes through
//! the op types, `bytes` overrides and op costs scaled), validated before it is written.
//! The method is in `sgc_ir::rescale`.

use super::{output, CliResult};
use sgc::ir::{format, rescale};
use sgc::units::human_bytes;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file whose data inputs declare `batch_dim`.
    file: PathBuf,
    /// The new batch size.
    #[arg(long, allow_negative_numbers = true, value_parser = super::positive::<u64>())]
    batch: u64,
    /// Write the rescaled graph here.
    #[arg(short, long)]
    output: PathBuf,
}

pub fn run(args: Args) -> CliResult {
    output::refuse_input(&args.output, &[&args.file])?;
    let file = args.file.display().to_string();
    let graph = sgc::ir::load_any(&args.file)?;
    let old = rescale::batch_size(&graph).map_err(|e| format!("{file}: {e}"))?;
    let scaled = rescale::rescale(&graph, args.batch).map_err(|e| format!("{file}: {e}"))?;
    format::save(&scaled, &args.output)
        .map_err(|e| format!("{}: cannot write: {e}", args.output.display()))?;
    println!(
        "{file}: batch {old} -> {}; unplanned peak {} -> {}, per-op lower bound {} -> {}; written to {}",
        args.batch,
        human_bytes(graph.memory_profile().peak),
        human_bytes(scaled.memory_profile().peak),
        human_bytes(graph.lower_bound().bytes),
        human_bytes(scaled.lower_bound().bytes),
        args.output.display()
    );
    Ok(())
}
