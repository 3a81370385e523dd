//! `sgc pareto FILE`: every strategy's plans across budgets, as device bytes against
//! recompute, each with the bound on how far from optimal it can be (`sgc::pareto`); a
//! markdown table, and with `--plot` one SVG.

use super::{defaults, CliResult, DeviceProfileArg};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A version-1 graph file or a Checkmate node-link file.
    file: PathBuf,
    /// Strategies, comma-separated or repeated (optimal needs a build with --features
    /// optimal and a small graph).
    #[arg(long, value_delimiter = ',', default_values_t = sgc::plan::Strategy::ALL, value_parser = super::strategy_parser())]
    strategy: Vec<sgc::plan::Strategy>,
    /// Budgets, evenly spaced in device bytes from the least any budget is met with (the
    /// default planner's budget candidates, eviction plans included) to the unplanned
    /// step's.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true, value_parser = super::positive::<u64>())]
    budgets: u64,
    /// sublinear: generations of genetic refinement.
    #[arg(long, default_value_t = defaults::GENETIC_ITERS, allow_negative_numbers = true, value_parser = super::whole::<usize>())]
    genetic_iters: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = defaults::seed(), allow_negative_numbers = true, value_parser = super::whole::<u64>())]
    seed: u64,
    /// optimal: seconds the strategy may take at each budget (its starts included).
    #[arg(long, allow_negative_numbers = true, value_parser = super::positive::<u64>())]
    time_limit: Option<u64>,
    /// Skip the lower bound beside each plan.
    #[arg(long)]
    no_bound: bool,
    #[command(flatten)]
    device: DeviceProfileArg,
    /// Draw the front (SVG).
    #[arg(long, value_name = "SVG")]
    plot: Option<PathBuf>,
    /// Print the front as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    if let Some(p) = &args.plot {
        super::output::refuse_input(p, &[args.file.as_path()])?;
    }
    let graph = sgc::ir::load_any(&args.file)?;
    let file = args.file.display().to_string();
    let options = sgc::pareto::ParetoOptions {
        strategies: args.strategy,
        budgets: args.budgets as usize,
        seed: args.seed,
        genetic_iters: args.genetic_iters,
        workers: None,
        device_profile: args.device.device_profile.clone(),
        time_limit_s: args.time_limit,
        bound: !args.no_bound,
    };
    let front = sgc::pareto::sweep(&graph, &options).map_err(|e| format!("{file}: {e}"))?;
    if let Some(p) = &args.plot {
        super::output::write(p, sgc::pareto::svg(&front).as_bytes())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&front)?);
        return Ok(());
    }
    print!("{}", sgc::pareto::markdown(&front));
    if let Some(p) = &args.plot {
        println!("\nplot written to {}", p.display());
    }
    Ok(())
}
