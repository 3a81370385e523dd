//! `sgc compare FILES...`: peak memory with and without planning, as one markdown table,
//! and the CI guard against a committed baseline (`--check`).

use super::{defaults, output};
use super::{CliResult, DeviceProfileArg};
use sgc::compare::{self, Baseline, CompareOptions, Row};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Graph files (version-1 or Checkmate node-link).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Generations of genetic refinement (0 = off).
    #[arg(long, default_value_t = defaults::GENETIC_ITERS, allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    genetic_iters: usize,
    /// Seed of the search.
    #[arg(long, default_value_t = defaults::seed(), allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    seed: u64,
    /// Do not execute the tiny graphs on the CPU backend.
    #[arg(long)]
    no_exec: bool,
    /// Print the rows as JSON instead of markdown.
    #[arg(long)]
    json: bool,
    /// Fail (exit 1) when a figure is worse than this baseline file.
    #[arg(long, value_name = "BASELINE")]
    check: Option<PathBuf>,
    /// Write the figures as a new baseline file.
    #[arg(long, value_name = "BASELINE")]
    write_baseline: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceProfileArg,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
}

pub fn run(args: Args) -> CliResult {
    if let Some(out) = &args.write_baseline {
        // The graphs, and the baseline it would then check against (vacuously).
        let inputs: Vec<&std::path::Path> = args
            .files
            .iter()
            .map(PathBuf::as_path)
            .chain(args.check.as_deref())
            .collect();
        output::refuse_input(out, &inputs)?;
    }
    let options = CompareOptions {
        genetic_iters: args.genetic_iters,
        seed: args.seed,
        execute: !args.no_exec,
        device_profile: args.device.device_profile.clone(),
    };
    // Every graph is planned (and the tiny ones run): seconds in all.
    let bar = super::progress::bar(
        args.quiet,
        args.files.len() as u64,
        "{msg:>24} [{bar:30}] {pos}/{len} {elapsed}",
    );
    let mut rows = Vec::with_capacity(args.files.len());
    for f in &args.files {
        if let Some(b) = &bar {
            b.set_message(
                f.file_stem()
                    .map_or(String::new(), |s| s.to_string_lossy().into()),
            );
        }
        let row = compare::compare_graph(f, &options);
        if row.is_err() {
            super::progress::done(&bar);
        }
        rows.push(row?);
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    super::progress::done(&bar);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", compare::markdown(&rows));
        if let Some(d) = &options.device_profile {
            println!("\n{}", compare::cost_note(&rows, d));
        }
    }
    if let Some(path) = &args.write_baseline {
        let text = serde_json::to_string_pretty(&Baseline::from_rows(&rows))? + "\n";
        output::write(path, text.as_bytes())?;
        eprintln!("baseline written to {}", path.display());
    }
    match &args.check {
        Some(path) => check(&rows, path),
        None => Ok(()),
    }
}

fn check(rows: &[Row], path: &std::path::Path) -> CliResult {
    let text = sgc::ir::file::read_limited(path)
        .map_err(|e| format!("{}: cannot read the baseline: {e}", path.display()))?;
    let baseline: Baseline = sgc::ir::json::check_duplicate_keys(&text)
        .and_then(|()| serde_json::from_str(&text))
        .map_err(|e| format!("{}: not a baseline file: {e}", path.display()))?;
    let outcome = compare::check(rows, &baseline);
    for line in &outcome.improvements {
        eprintln!("improved: {line}");
    }
    if !outcome.improvements.is_empty() {
        eprintln!(
            "hint: figures improved; refresh the baseline with `{}`",
            compare::REFRESH
        );
    }
    if outcome.passed() {
        eprintln!(
            "peak-memory check passed against {} ({} graphs)",
            path.display(),
            rows.len()
        );
        return Ok(());
    }
    for line in &outcome.failures {
        eprintln!("regression: {line}");
    }
    Err(format!(
        "peak-memory check failed: {} regression(s) against {} (if intended, refresh it with `{}`)",
        outcome.failures.len(),
        path.display(),
        compare::REFRESH
    )
    .into())
}
