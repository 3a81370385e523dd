//! Typed errors of the planner. Each message names the op, tensor or figure at fault and
//! ends with what to do about it.

use crate::options::BudgetOf;
use sgc_plan_format::{FormatError, Violation};
use thiserror::Error;

/// Why a plan could not be made, read or accepted.
#[derive(Debug, Error)]
pub enum PlanError {
    #[error("{}", below(*.budget, *.lower_bound, .op, *.kind))]
    BudgetBelowLowerBound {
        budget: u64,
        /// The bound, in the budget's terms.
        lower_bound: u64,
        /// The op that sets it.
        op: String,
        /// Which bound, and so which plans it rules out.
        kind: LowerBoundKind,
    },
    #[error("no plan fits the budget of {} {}; {}{}; {}: raise the budget, or {retry}", bytes(*.budget), unit(*.of), reached(*.best_device, *.best_peak), offloaded(.offload.as_ref(), *.budget), bound_is(*.lower_bound, *.bound))]
    BudgetNotMet {
        budget: u64,
        /// What the budget bounds.
        of: BudgetOf,
        /// The lowest memory-model peak of any plan made.
        best_peak: u64,
        /// The lowest device bytes of the lowest-peak plans placed (when any was).
        best_device: Option<u64>,
        /// The best lower bound on the budget's figure sgc proved, in the budget's terms.
        lower_bound: u64,
        /// Which bound that is.
        bound: LowerBoundKind,
        /// What schedules made to fit by offloads reached, when a host link was given.
        offload: Option<OffloadReach>,
        /// What to try besides a larger budget.
        retry: Retry,
    },
    #[error("no plan keeps at most {} for the backward; the least kept is {} (graph inputs read by the backward and outputs of ops that may not run again are always kept): raise the budget", bytes(*.budget), bytes(*.lowest))]
    SavedBudgetNotMet { budget: u64, lowest: u64 },
    #[error("cannot plan a forward/backward partition: {0}")]
    Partition(String),
    #[error("this plan was made for graph {expected}, not for graph {found}: make a new plan for this graph with `sgc plan`")]
    GraphMismatch { expected: String, found: String },
    #[error("not a plan file: {0}")]
    NotAPlan(String),
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// `--strategy rotor` on a graph that is not a chain in Rotor's sense.
    #[error("--strategy rotor plans chains only: {0}; use --strategy sublinear")]
    NotAChain(NotAChain),
    #[error("cannot start {workers} worker threads: {message}")]
    Workers { workers: usize, message: String },
    #[error("internal error: the {strategy} planner made a schedule the memory model rejects: {message}")]
    Internal { strategy: String, message: String },
    #[error("--strategy optimal: {0}")]
    Solver(String),
    #[error("cannot place the plan's tensors in an arena: {0}")]
    Arena(String),
    #[error("the schedule does not run: {0}")]
    Schedule(#[from] sgc_ir::ScheduleError),
    #[error("internal error: the {strategy} planner made a plan the verifier rejects ({} violations; first: {})", .violations.len(), .violations.first().map(|v| v.to_string()).unwrap_or_default())]
    Rejected {
        strategy: String,
        violations: Vec<Violation>,
    },
}

impl From<FormatError> for PlanError {
    /// A plan file's error under the same name; offloads that cannot be timed are an
    /// option the planner was given without what it needs (a clock, a host link).
    fn from(e: FormatError) -> PlanError {
        match e {
            FormatError::GraphMismatch { expected, found } => {
                PlanError::GraphMismatch { expected, found }
            }
            FormatError::NotAPlan(m) => PlanError::NotAPlan(m),
            FormatError::Offloads(m) => PlanError::InvalidOption(m),
        }
    }
}

/// Bytes exactly and in binary units: `629145600 B (600.00 MiB)`.
fn bytes(b: u64) -> String {
    if b < 1024 {
        format!("{b} B")
    } else {
        format!("{b} B ({})", sgc_ir::human_bytes(b))
    }
}

impl PlanError {
    /// The same error; a refused budget then names `retry` as what to try (the strategy's
    /// own options, which the modules below the strategies do not know).
    pub(crate) fn retrying(mut self, retry: Retry) -> PlanError {
        if let PlanError::BudgetNotMet { retry: r, .. } = &mut self {
            *r = retry;
        }
        self
    }

    /// A refusal with `floor` (a peak bound in the budget's terms) as its bound where that
    /// is the higher: no plan the strategy can make goes below it.
    pub(crate) fn bounded_by(mut self, floor: Option<Floor>) -> Self {
        if let (
            PlanError::BudgetNotMet {
                lower_bound, bound, ..
            },
            Some(f),
        ) = (&mut self, floor)
        {
            if f.bound.bytes > *lower_bound {
                *lower_bound = f.bound.bytes;
                *bound = f.kind;
            }
        }
        self
    }
}

/// A lower bound on the peak of the plans one strategy can make, in a budget's terms, and
/// which bound it is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Floor {
    pub bound: sgc_ir::LowerBound,
    pub kind: LowerBoundKind,
}

/// Which lower bound a budget fell below ([`PlanError::BudgetBelowLowerBound`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowerBoundKind {
    /// The per-op lower bound: what one op's inputs and outputs hold; no schedule fits.
    PerOp,
    /// The least-peak bound ([`crate::least_peak`]): what must be resident together when an
    /// op runs and when its inputs were made; no schedule that keeps or recomputes fits,
    /// whichever strategy made it (offloading to host memory is not bounded by it).
    LeastPeak,
    /// The kept-outputs bound (`least_peak.rs`, docs/method.md): the least-peak
    /// bound, or more where graph outputs made before an op stay resident when it runs; no
    /// schedule that keeps every graph output once made (every strategy's but `optimal`'s)
    /// fits.
    KeptOutputs,
}

/// The bound beside a refusal.
fn bound_is(bound: u64, kind: LowerBoundKind) -> String {
    match kind {
        LowerBoundKind::PerOp => format!("the per-op lower bound is {}", bytes(bound)),
        LowerBoundKind::LeastPeak => format!(
            "no plan that keeps or recomputes goes below {} (the least-peak lower bound)",
            bytes(bound)
        ),
        LowerBoundKind::KeptOutputs => format!(
            "no plan that keeps each graph output (the gradients, the loss) from when it is made goes below {} (the kept-outputs lower bound)",
            bytes(bound)
        ),
    }
}

/// The refusal of a budget below a bound set by op `op`.
fn below(budget: u64, bound: u64, op: &str, kind: LowerBoundKind) -> String {
    match kind {
        LowerBoundKind::PerOp => format!(
            "budget {} is below the per-op lower bound {} (set by op `{op}`): no schedule of this graph fits; raise the budget to at least the bound",
            bytes(budget),
            bytes(bound)
        ),
        LowerBoundKind::LeastPeak => format!(
            "budget {} is below the least-peak lower bound {} (set at op `{op}`: what must be resident together when it runs and when its inputs were made): no schedule that keeps or recomputes fits, whatever the strategy; raise the budget to at least the bound, or give a --host-link so that a strategy that offloads may move tensors to host memory",
            bytes(budget),
            bytes(bound)
        ),
        LowerBoundKind::KeptOutputs => format!(
            "budget {} is below the kept-outputs lower bound {} (set at op `{op}`: what must be resident when it runs, with every graph output made before it, such as the gradients done so far): no plan that keeps each graph output from when it is made fits, and this strategy's plans do; raise the budget to at least the bound, or give a --host-link so that a strategy that offloads may move tensors to host memory",
            bytes(budget),
            bytes(bound)
        ),
    }
}

/// What to try, besides a larger budget, when a strategy's plans do not fit it: the
/// refusing strategy's own options that reach lower, or another strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Search longer (sublinear).
    Search,
    /// Evict smaller tensors (static DTR; `least` is `--evictee-min-size`).
    SmallerEvictees { least: u64 },
    /// Another strategy.
    Strategy,
}

impl std::fmt::Display for Retry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Retry::Search => {
                write!(f, "try more --genetic-iters / --thresh-tries or another --strategy")
            }
            Retry::SmallerEvictees { least } => write!(
                f,
                "lower --evictee-min-size (now {}: smaller tensors are never evicted) or try another --strategy",
                sgc_ir::human_bytes(*least)
            ),
            Retry::Strategy => write!(f, "try another --strategy"),
        }
    }
}

/// What the lowest plans reached, for [`PlanError::BudgetNotMet`].
fn unit(of: BudgetOf) -> &'static str {
    match of {
        BudgetOf::Device => "in device bytes (arena + persistent)",
        BudgetOf::Peak => "of the memory-model peak (--budget-of peak)",
        BudgetOf::Saved => "of bytes kept for the backward (--budget-of saved)",
    }
}

/// How low the offload search got: the schedule whose arena was placed lowest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffloadReach {
    /// Device bytes (arena + persistent) placed, when the greedy got to place one.
    pub device: Option<u64>,
    /// Its memory-model peak (with persistent bytes).
    pub peak: u64,
}

/// The offload search's reach, with what to try when its memory model fits and its arena
/// does not.
fn offloaded(reach: Option<&OffloadReach>, budget: u64) -> String {
    let Some(r) = reach else {
        return String::new();
    };
    let hint = if r.peak <= budget {
        ": the memory model fits and the arena packed above it, so --arena-effort default (a harder packing) may fit it"
    } else {
        ""
    };
    format!(
        "; with offloads to host, {}{hint}",
        reached(r.device, r.peak)
    )
}

fn reached(device: Option<u64>, peak: u64) -> String {
    match device {
        Some(d) => format!(
            "the lowest reached was {} (memory-model peak {})",
            bytes(d),
            bytes(peak)
        ),
        None => format!("the lowest memory-model peak reached was {}", bytes(peak)),
    }
}

/// Why a graph is not a chain in the sense of Rotor's program (`--strategy rotor`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotAChain {
    /// The traced order is not forward ops followed by backward ones.
    NoBackward,
    /// A non-forward op comes before a forward op in the traced order.
    Interleaved { op: String, before: String },
    /// A forward op before the last stage makes a graph output.
    OutputMidChain { op: String },
    /// A backward op reads activations of two stages that are not one stage and its input.
    ReadsTwoStages { op: String, a: String, b: String },
    /// A backward op reads a stage's activations after the backward of an earlier stage.
    OutOfOrder { op: String },
    /// The chain has more stages than Rotor's program takes (`most`).
    TooLong { stages: usize, most: usize },
}

impl std::fmt::Display for NotAChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotAChain::NoBackward => write!(f, "the traced order does not start with forward ops followed by backward ones"),
            NotAChain::Interleaved { op, before } => write!(f, "op `{op}` is not a forward op and comes before forward op `{before}`"),
            NotAChain::OutputMidChain { op } => write!(f, "forward op `{op}` makes a graph output before the last stage"),
            NotAChain::ReadsTwoStages { op, a, b } => write!(f, "backward op `{op}` reads `{a}` and `{b}`, activations of stages that are not one stage and its input (a skip connection or a branch)"),
            NotAChain::OutOfOrder { op } => write!(f, "backward op `{op}` reads a later stage's activations after an earlier stage's backward"),
            NotAChain::TooLong { stages, most } => write!(f, "its {stages} stages are more than the program takes ({most})"),
        }
    }
}
