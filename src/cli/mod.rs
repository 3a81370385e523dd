//! Command-line parsing and dispatch.

mod alloc;
mod compare;
mod cost;
mod dtr;
mod fit;
mod inspect;
mod output;
mod pareto;
mod plan;
mod plot;
mod profile;
mod progress;
mod rescale;
mod run;
mod zoo;

use clap::{Parser, Subcommand};
use sgc::defaults;
use std::process::ExitCode;

/// `--strategy`, shared by `plan`, `run` and `fit`: the name of a registered strategy
/// (`sgc::plan::strategies::REGISTRY`, which also gives each value's help).
pub fn strategy_parser() -> impl clap::builder::TypedValueParser<Value = sgc::plan::Strategy> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let values = sgc::plan::strategies::REGISTRY
        .iter()
        .map(|s| PossibleValue::new(s.name().as_str()).help(strategy_help(*s)));
    PossibleValuesParser::new(values).map(|name| {
        name.parse::<sgc::plan::Strategy>()
            .expect("every registered strategy parses by its name")
    })
}

/// A strategy's line of `--strategy` help: what it does, whether it needs a budget, and
/// the options it reads beyond the common ones, as flags.
fn strategy_help(s: &dyn sgc::plan::strategies::Strategy) -> String {
    let mut help = s.about().to_string();
    if s.needs_budget() {
        help.push_str("; needs --budget");
    }
    if !s.reads().is_empty() {
        let flags: Vec<String> = s.reads().iter().map(|f| flag_of(f)).collect();
        help.push_str(&format!("; reads {}", flags.join(", ")));
    }
    help
}

pub use sgc::defaults::flag_of;

/// `--device-profile`, shared by `plan`, `inspect`, `compare` and `fit` (flattened into
/// their arguments): ops without `time_us` are costed by their roofline estimate on this
/// device (`sgc::ir::cost`) instead of `flops` or bytes moved.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DeviceProfileArg {
    /// Cost ops without time_us by a roofline estimate on this device: v100, t4, a100, l4,
    /// h100, rtx4090, or custom rates F32/HALF/GBPS (TFLOP/s f32, TFLOP/s f16/bf16, GB/s),
    /// e.g. 19.5/312/2039.
    #[arg(long, value_name = "NAME|F32/HALF/GBPS")]
    pub device_profile: Option<sgc::ir::DeviceProfile>,
}

/// `--world-size`, `--shard` and `--optimizer`, shared by `plan` and `fit` (flattened):
/// one rank's graph of the step (`sgc::ir::distributed`), planned instead of the traced one.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DistributionArg {
    /// Ranks the step runs on (with --shard fsdp2: parameters, gradients and optimizer
    /// state are split over them, and every figure is one rank's).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = positive::<u64>())]
    pub world_size: u64,
    /// How the ranks hold the model: none (every rank all of it: one process, or DDP) or
    /// fsdp2 (fully_shard per block and on the root; see docs/method.md).
    #[arg(long, default_value = "none", value_parser = parse_shard)]
    pub shard: sgc::ir::distributed::Shard,
    /// The optimizer whose state the parameters carry for the whole step: none (what the
    /// graph holds), sgd, momentum (one buffer per parameter) or adam (adamw: two).
    #[arg(long, default_value = "none", value_parser = parse_optimizer)]
    pub optimizer: sgc::ir::distributed::Optimizer,
}

fn parse_shard(s: &str) -> Result<sgc::ir::distributed::Shard, String> {
    s.parse()
}

fn parse_optimizer(s: &str) -> Result<sgc::ir::distributed::Optimizer, String> {
    s.parse()
}

impl DistributionArg {
    pub fn distribution(&self) -> sgc::ir::distributed::Distribution {
        sgc::ir::distributed::Distribution {
            world_size: self.world_size,
            shard: self.shard,
            optimizer: self.optimizer,
        }
    }

    /// One rank's graph of `graph` (the graph itself when nothing is asked), and what it
    /// adds; errors name the file.
    pub fn apply(
        &self,
        graph: sgc::ir::Graph,
        file: &str,
    ) -> Result<(sgc::ir::Graph, Option<sgc::ir::distributed::PerRank>), String> {
        let d = self.distribution();
        if d.is_identity() && d.world_size == 1 {
            return Ok((graph, None));
        }
        let (g, r) =
            sgc::ir::distributed::per_rank(&graph, &d).map_err(|e| format!("{file}: {e}"))?;
        Ok((g, Some(r)))
    }
}

/// `--goal` values of `plan`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum GoalArg {
    LowestPeak,
    Balanced,
}

/// `--arena-effort` of `plan` and `fit`: the library's one [`ArenaEffort`] by its names,
/// listed in help.
///
/// [`ArenaEffort`]: sgc::plan::alloc::ArenaEffort
pub(crate) fn arena_effort(
) -> impl clap::builder::TypedValueParser<Value = sgc::plan::alloc::ArenaEffort> {
    use clap::builder::TypedValueParser;
    use sgc::plan::alloc::ArenaEffort as E;
    let names = [E::Fast, E::Plan, E::Default, E::Thorough].map(E::as_str);
    clap::builder::PossibleValuesParser::new(names)
        .map(|name| name.parse::<E>().expect("a possible value is a name"))
}

/// What `--budget` bounds.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum BudgetOfArg {
    Device,
    Peak,
    Saved,
}

impl From<BudgetOfArg> for sgc::plan::BudgetOf {
    fn from(b: BudgetOfArg) -> Self {
        match b {
            BudgetOfArg::Device => sgc::plan::BudgetOf::Device,
            BudgetOfArg::Peak => sgc::plan::BudgetOf::Peak,
            BudgetOfArg::Saved => sgc::plan::BudgetOf::Saved,
        }
    }
}

impl From<GoalArg> for sgc::plan::Goal {
    fn from(g: GoalArg) -> Self {
        match g {
            GoalArg::LowestPeak => sgc::plan::Goal::LowestPeak,
            GoalArg::Balanced => sgc::plan::Goal::Balanced,
        }
    }
}

/// Error of a subcommand: one readable message (file, op or tensor, what to do).
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

/// A count on the command line (steps, iterations, a seed, workers): a whole number in
/// a range, with a message that names the flag and says so ("--genetic-iters must be a
/// whole number of 0 or more, got -5"; clap's own for `-5` is "invalid digit found in
/// string"). The one value parser of every integer option.
#[derive(Clone)]
pub(crate) struct Count<T> {
    range: std::ops::RangeInclusive<u64>,
    into: std::marker::PhantomData<fn() -> T>,
}

/// A count >= 0.
pub(crate) fn whole<T>() -> Count<T> {
    within(0..=u64::MAX)
}

/// A count >= 1 (a world size, warm-up steps).
pub(crate) fn positive<T>() -> Count<T> {
    within(1..=u64::MAX)
}

/// A count in `range`.
pub(crate) fn within<T>(range: std::ops::RangeInclusive<u64>) -> Count<T> {
    Count {
        range,
        into: std::marker::PhantomData,
    }
}

impl<T> clap::builder::TypedValueParser for Count<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let text = value.to_string_lossy();
        let parsed = text
            .parse::<u64>()
            .ok()
            .filter(|v| self.range.contains(v))
            .and_then(|v| T::try_from(v).ok());
        parsed.ok_or_else(|| {
            let flag = arg.map_or_else(
                || "the value".to_string(),
                |a| match a.get_long() {
                    Some(long) => format!("--{long}"),
                    None => a.get_id().to_string(),
                },
            );
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "{flag} must be {}, got {text}\n",
                    sgc::units::count_takes(&self.range)
                ),
            )
            .with_cmd(cmd)
        })
    }
}

#[derive(Parser)]
#[command(
    name = "sgc",
    version,
    about = "Static-graph compiler: fit training in less GPU memory with checkpointing and static memory sharing"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Refuse input files (and decompressed graphs) larger than this many bytes (accepts
    /// sizes such as 16GiB)
    #[arg(long, global = true, value_name = "SIZE", value_parser = sgc::units::parse_size, default_value_t = defaults::MAX_INPUT)]
    max_input: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Summarise a graph file (or a Checkmate node-link file): ops, tensors, memory, cost.
    Inspect(inspect::Args),
    /// Plan checkpointing for a graph: a schedule that cuts peak memory for a reported recompute cost.
    Plan(plan::Args),
    /// Write the model zoo's graph files.
    Zoo(zoo::Args),
    /// Assign arena offsets to a minimalloc-format CSV of buffers (id,lower,upper,size).
    Alloc(alloc::Args),
    /// Rescale a graph to another batch size through the batch_dim of its inputs.
    Rescale(rescale::Args),
    /// Write a graph with time_us filled in by a device profile's roofline estimate.
    Cost(cost::Args),
    /// Run a graph's step on a device and write the graph with each op's measured time as time_us.
    Profile(profile::Args),
    /// The largest batch that fits a GPU's memory, unplanned and with each planning strategy.
    Fit(fit::Args),
    /// Draw a plan's memory: resident bytes over steps (unplanned and planned) and its arena.
    Plot(plot::Args),
    /// Peak memory with and without planning over many graphs, as one markdown table; `--check` guards a baseline.
    Compare(compare::Args),
    /// Run training steps of a graph (planned or not) and print measured memory and time.
    Run(run::Args),
    /// Run-time DTR simulated at a range of eviction thresholds, beside the static plan at the same bytes.
    DtrSweep(dtr::SweepArgs),
    /// Every strategy's plans across budgets: device bytes against recompute, each with how far from optimal it can be.
    Pareto(pareto::Args),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    sgc::ir::file::set_max_input_bytes(cli.max_input);
    let result = match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Zoo(a) => zoo::run(a),
        Command::Alloc(a) => alloc::run(a),
        Command::Rescale(a) => rescale::run(a),
        Command::Cost(a) => cost::run(a),
        Command::Profile(a) => profile::run(a),
        Command::Fit(a) => fit::run(a),
        Command::Run(a) => run::run(a),
        Command::Plot(a) => plot::run(a),
        Command::Compare(a) => compare::run(a),
        Command::DtrSweep(a) => dtr::sweep(a),
        Command::Pareto(a) => pareto::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
