//! What the planner is asked for: the strategy and its options ([`PlanOptions`], stored in
//! every plan so that a plan file says how it was made), what a budget bounds
//! ([`BudgetOf`]) and how hard the arena is packed ([`ArenaEffort`]).

use crate::streams::HostLink;
use serde::{Deserialize, Serialize};
use sgc_ir::DeviceProfile;

/// The checkpointing strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// The traced order, every storage freed after its last use.
    None,
    /// Chen et al. (2016): a checkpoint every ~sqrt(n) forward ops.
    ChenSqrt,
    /// Threshold search plus genetic refinement over split points (MegEngine's method).
    #[default]
    Sublinear,
    /// Static DTR: one pass that evicts the cheapest-to-recompute tensors.
    Dtr,
    /// A forward/backward partition (torch.compile's shape): the forward runs once, a set
    /// of its tensors is kept for the backward and the rest is recomputed there, the set
    /// chosen by parametric minimum cut over bytes kept and recompute cost.
    Partition,
    /// The least recompute within the budget, proven by an integer program (Checkmate's
    /// stage model, solved by HiGHS) for graphs small enough for one.
    Optimal,
    /// Rotor's dynamic program for chains (Beaumont et al. 2019): the least recompute
    /// within the budget among its checkpointing schedules, for graphs whose forward is a
    /// sequence of stages.
    Rotor,
}

impl Strategy {
    /// The strategies that plan any graph, with or without a budget (`optimal` needs a
    /// budget, a small graph and the `optimal` feature; `rotor` a budget and a chain).
    pub const ALL: [Strategy; 5] = [
        Strategy::None,
        Strategy::ChenSqrt,
        Strategy::Sublinear,
        Strategy::Dtr,
        Strategy::Partition,
    ];
}

names!(Strategy, "strategy", "none, chen-sqrt, sublinear, dtr, partition, optimal or rotor", {
    None => "none",
    ChenSqrt => "chen-sqrt",
    Sublinear => "sublinear",
    Dtr => "dtr",
    Partition => "partition",
    Optimal => "optimal",
    Rotor => "rotor",
});

/// What the verifier holds a strategy's plans to, beyond what it checks of every plan (a
/// plan file is verified without the planner, so this lives with the name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Promises {
    /// The most times an op runs (`None`: any number).
    pub max_runs: Option<u32>,
    /// Recompute at most one forward pass's cost.
    pub recompute_within_forward: bool,
}

impl Strategy {
    /// What its plans promise: the split-based strategies run an op at most twice (once,
    /// and once again for the backward), and Chen's segments recompute at most one forward.
    pub const fn promises(self) -> Promises {
        let split = Promises {
            max_runs: Some(2),
            recompute_within_forward: false,
        };
        match self {
            Strategy::Sublinear | Strategy::Partition => split,
            Strategy::ChenSqrt => Promises {
                recompute_within_forward: true,
                ..split
            },
            Strategy::None | Strategy::Dtr | Strategy::Optimal | Strategy::Rotor => Promises {
                max_runs: None,
                recompute_within_forward: false,
            },
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `sublinear` optimises when there is no budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Goal {
    /// The lowest peak, whatever it recomputes (MegEngine's rule), then the least recompute;
    /// a plan at most 1% above that peak wins when each 1% of memory it adds saves at least
    /// 20% of a step in recompute.
    #[default]
    LowestPeak,
    /// Memory and recompute weighed equally, each as a share of what there is to gain:
    /// `(peak - lower bound) / (unplanned peak - lower bound) + recompute / one step`,
    /// the knee of the memory/recompute front.
    Balanced,
}

names!(Goal, "goal", "lowest-peak or balanced", {
    LowestPeak => "lowest-peak",
    Balanced => "balanced",
});

/// Every option that shapes a plan (and nothing that does not, such as thread counts).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanOptions {
    pub strategy: Strategy,
    /// Seed of every random choice (genetic search, DTR sampling).
    pub seed: u64,
    /// Memory the plan must fit (bytes; what it bounds: `budget_of`); the plan that
    /// recomputes least under it wins.
    pub budget: Option<u64>,
    /// What `budget` bounds (device bytes unless the file says otherwise).
    #[serde(default, skip_serializing_if = "BudgetOf::is_device")]
    pub budget_of: BudgetOf,
    /// Memory the user is willing to spend to save recompute: recomputed ops are turned back
    /// into checkpoints, most expensive first, while the peak stays at or under it.
    pub lb_memory: Option<u64>,
    /// `sublinear` without a budget: what the search optimises.
    #[serde(default)]
    pub goal: Goal,
    /// `sublinear`: evenly spaced thresholds tried (twice: over the range and around the best).
    pub thresh_tries: usize,
    /// `sublinear`: generations of genetic refinement (0 = off).
    pub genetic_iters: usize,
    /// `sublinear`: survivors per generation.
    pub pool_size: usize,
    /// `dtr`: resident bytes (persistent included) above which tensors are evicted; default
    /// the budget, else halfway between the per-op lower bound and the unplanned peak.
    pub eviction_threshold: Option<u64>,
    /// `dtr`: smallest tensor that may be evicted.
    pub evictee_min_size: u64,
    /// `dtr`: score only ~sqrt(N) sampled candidates.
    pub sqrt_sampling: bool,
    /// Give every lifetime an arena offset (`sgc_plan::arena`); `false` leaves `arena` empty.
    #[serde(default = "yes")]
    pub arena: bool,
    /// How hard the arena is searched (see [`ArenaEffort`]).
    #[serde(default, skip_serializing_if = "ArenaEffort::is_plan")]
    pub arena_effort: ArenaEffort,
    /// Arena alignment in bytes (offsets are multiples of it, sizes padded to it).
    #[serde(default = "default_align")]
    pub align: u64,
    /// Cost ops without `time_us` by their roofline estimate on this device
    /// (`sgc_ir::cost`); `None`: the format's rule (`time_us`, else `flops`, else bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_profile: Option<DeviceProfile>,
    /// Offload: the link between device and host that copies are priced on
    /// ([`crate::streams`]); with it and a budget, each activation may be kept, recomputed
    /// or offloaded to host memory ([`crate::offload`]). `None`: kept or recomputed only,
    /// and the plan is what it was before offload existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_link: Option<HostLink>,
    /// Offload: the most pinned host bytes a plan may hold at once (`None`: unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<u64>,
    /// `optimal`: seconds the strategy may take, its heuristic starts and the solver
    /// together (`None`: 60). A solver stopped by it returns its best plan and bound, so
    /// the plan then depends on the machine's speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
}

fn yes() -> bool {
    true
}

fn default_align() -> u64 {
    DEFAULT_ALIGN
}

/// The default arena alignment: 256 bytes, as CUDA allocators give.
pub const DEFAULT_ALIGN: u64 = 256;

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            strategy: Strategy::Sublinear,
            seed: 0,
            budget: None,
            budget_of: BudgetOf::Device,
            lb_memory: None,
            goal: Goal::default(),
            thresh_tries: 10,
            genetic_iters: 0,
            pool_size: 20,
            eviction_threshold: None,
            evictee_min_size: 1 << 20,
            sqrt_sampling: false,
            arena: true,
            arena_effort: ArenaEffort::Plan,
            align: DEFAULT_ALIGN,
            device_profile: None,
            host_link: None,
            host_memory: None,
            time_limit_s: None,
        }
    }
}

/// What a budget bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetOf {
    /// Device bytes: the aligned arena plus the persistent bytes, what `sgc run` allocates.
    #[default]
    Device,
    /// The memory model's peak (persistent bytes plus the live bytes of the worst step,
    /// unaligned): what MegEngine's and Checkmate's budgets bound. The arena may need up
    /// to its fragmentation and alignment more.
    Peak,
    /// Bytes kept from the forward for the backward ([`crate::plan::saved_bytes`]): what
    /// `torch.compile`'s `activation_memory_budget` bounds. Only the `partition` strategy
    /// plans for it.
    Saved,
}

names!(BudgetOf, "budget kind", "device, peak or saved", {
    Device => "device",
    Peak => "peak",
    Saved => "saved",
});

impl BudgetOf {
    /// Whether the budget bounds device bytes (the default, left out of plan files).
    pub fn is_device(&self) -> bool {
        *self == BudgetOf::Device
    }
}

/// How hard a plan's arena is searched (`sgc plan --arena-effort`), by name: a plan
/// option, so a plan file says how its arena was made.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ArenaEffort {
    /// Heuristics only (`sgc_plan::alloc::Effort::FAST`).
    Fast,
    /// `Effort::PLAN`: hundredths of a second; plans of more than 600 lifetimes keep
    /// the heuristics' arena.
    #[default]
    Plan,
    /// `Effort::DEFAULT` (what `sgc alloc` spends): up to a few seconds, for arenas at
    /// or near the aligned live peak (`cargo bench --bench alloc -- real` measures them).
    Default,
    /// `Effort::THOROUGH`.
    Thorough,
}

impl ArenaEffort {
    /// Whether it is the default (left out of plan files).
    pub fn is_plan(&self) -> bool {
        *self == ArenaEffort::Plan
    }
}

names!(ArenaEffort, "arena effort", "plan, default, thorough or fast", {
    Fast => "fast",
    Plan => "plan",
    Default => "default",
    Thorough => "thorough",
});
