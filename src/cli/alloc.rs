//! `sgc alloc FILE.csv`: static offsets for a minimalloc-format buffer list, reported
//! against the lower bound; the placement is validated before anything is written.

use super::{output, CliResult};
use serde::Serialize;
use sgc::plan::alloc::{self, csv, AllocOptions, Effort, SearchSummary, Skipped, Trial};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// A CSV file with the header `id,lower,upper,size` (lifetimes [lower, upper)).
    file: PathBuf,
    /// Write the rows with an `offset` column to this file.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Offsets are multiples of this many bytes; sizes are padded to it.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    align: u64,
    /// How hard to search: fast (heuristics only), default, thorough, plan (what `sgc plan`
    /// spends on an arena), or a search work budget such as 5e8 (about 10^8 to 10^9 a
    /// second; the default is 2e9).
    #[arg(long, default_value = "default")]
    effort: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    file: String,
    buffers: usize,
    align: u64,
    arena: u64,
    lower_bound: u64,
    arena_over_lower_bound: f64,
    algorithm: String,
    trials: Vec<Trial>,
    skipped: Vec<Skipped>,
    search: SearchSummary,
    seconds: f64,
    output: Option<String>,
}

pub fn run(args: Args) -> CliResult {
    if let Some(out) = &args.output {
        output::refuse_input(out, &[&args.file])?;
    }
    let effort = parse_effort(&args.effort)?;
    let file = args.file.display();
    let rows = csv::read(&args.file).map_err(|e| match e {
        csv::CsvError::Io { .. } => e.to_string(), // names the file already
        _ => format!("{file}: {e}"),
    })?;
    let buffers = csv::buffers(&rows);
    let options = AllocOptions {
        align: args.align,
        effort,
        in_place: Vec::new(),
    };
    let start = Instant::now();
    let placement = alloc::allocate(&buffers, &options).map_err(|e| format!("{file}: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    if let Err(violations) = alloc::validate(&buffers, &placement, args.align) {
        let shown: Vec<String> = violations
            .iter()
            .take(20)
            .map(|v| format!("  {v}"))
            .collect();
        return Err(format!(
            "bug: the allocator produced an invalid placement ({} violations; please report):\n{}",
            violations.len(),
            shown.join("\n")
        )
        .into());
    }
    if let Some(out) = &args.output {
        output::write(out, csv::write(&rows, &placement.offsets).as_bytes())?;
    }
    let report = Report {
        file: args.file.display().to_string(),
        buffers: buffers.len(),
        align: args.align,
        arena: placement.arena,
        lower_bound: placement.lower_bound,
        arena_over_lower_bound: ratio(placement.arena, placement.lower_bound),
        algorithm: placement.algorithm.clone(),
        trials: placement.trials.clone(),
        skipped: placement.skipped.clone(),
        search: placement.search,
        seconds,
        output: args.output.map(|p| p.display().to_string()),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// A named effort, or a search work budget such as `5e8` (the default effort otherwise).
fn parse_effort(text: &str) -> Result<Effort, String> {
    let work = text
        .parse::<f64>()
        .ok()
        .filter(|w| w.is_finite() && *w >= 0.0);
    if let Ok(named) = text.parse::<sgc::plan::alloc::ArenaEffort>() {
        return Ok(named.into());
    }
    Ok(match (text, work) {
        (_, Some(w)) => Effort {
            search_work: w as u64,
            ..Effort::DEFAULT
        },
        (other, None) => {
            return Err(format!(
                "unknown effort {other:?}: use fast, default, thorough, plan or a work budget such as 5e8"
            ))
        }
    })
}

fn ratio(arena: u64, bound: u64) -> f64 {
    if bound == 0 {
        1.0
    } else {
        arena as f64 / bound as f64
    }
}

fn render(r: &Report) -> String {
    let mut s = format!("{}: {} buffers, align {}\n", r.file, r.buffers, r.align);
    s += &format!(
        "arena        {} bytes ({:.4}x the lower bound), by {} in {:.3} s\n",
        r.arena, r.arena_over_lower_bound, r.algorithm, r.seconds
    );
    s += &format!("lower bound  {} bytes\n", r.lower_bound);
    for t in &r.trials {
        s += &format!(
            "  {:<16} {} ({:.4}x)\n",
            t.algorithm,
            t.arena,
            ratio(t.arena, r.lower_bound)
        );
    }
    for k in &r.skipped {
        s += &format!("  {:<16} skipped: {}\n", k.algorithm, k.reason);
    }
    s += &format!("search       {}\n", describe_search(&r.search, r.buffers));
    if let Some(out) = &r.output {
        s += &format!("wrote {out}\n");
    }
    s
}

fn describe_search(s: &SearchSummary, buffers: usize) -> String {
    use alloc::SearchStop;
    let work = format!(
        "{:.0}M of {:.0}M work",
        s.work as f64 / 1e6,
        s.budget as f64 / 1e6
    );
    match s.stop {
        SearchStop::TooLarge => format!(
            "skipped: {buffers} buffers (or their time overlaps) are more than this effort \
             searches; the best heuristic is kept (--effort thorough searches up to 20000 buffers)"
        ),
        SearchStop::Optimal => format!("{} ({work})", s.stop.describe()),
        SearchStop::WorkBudget | SearchStop::TimeCap => format!(
            "{} ({work}); arenas from {} bytes up are not ruled out",
            s.stop.describe(),
            s.proven_bound
        ),
        _ => s.stop.describe().to_string(),
    }
}
