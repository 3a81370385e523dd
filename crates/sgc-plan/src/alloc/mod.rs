//! Static memory sharing: give every buffer an offset in one arena so that buffers alive at
//! the same time never overlap in address, with the arena as small as we can make it.
//!
//! # Problem
//! A [`Buffer`] lives over the half-open step interval `[lower, upper)` and needs `size`
//! bytes. Offsets are multiples of `align`, and a buffer occupies `round_up(size, align)`
//! bytes (padding counts). The planner works with closed lifetimes `[first, last]`
//! (inclusive steps); convert with `lower = first`, `upper = last + 1`.
//!
//! No arena can be smaller than [`lower_bound`]: the largest, over time, of the summed
//! padded sizes of the live buffers. Reaching it is NP-hard in general, so [`allocate`]
//! runs a portfolio and keeps the smallest arena (ties go to the earlier algorithm of
//! [`Algorithm::ALL`], so the result is deterministic):
//!
//! 1. [`Algorithm::GreedySize`]: TFLite / XLA style. Largest buffer first (longer lifetime,
//!    then lower id break ties); each goes into the smallest gap among the already placed
//!    buffers whose lifetimes overlap its own, or on top of them. It also honours in-place
//!    pairs (below). Its cost grows with the time-overlapping pairs (quadratic when most
//!    buffers are alive together); above the effort's `greedy_work` it is skipped, and
//!    [`Placement::skipped`] says so.
//! 2. [`Algorithm::BestFitSweep`]: walk time; free buffers at their end (coalescing free
//!    blocks); each starting buffer, largest first, takes the smallest free block that fits,
//!    else the top of the arena grows. O(n log n), as is the next one.
//! 3. [`Algorithm::Pushdown`]: the best-fit sweep followed by a gravity pass: visiting the
//!    buffers by offset, each drops to the highest (new) end among the time-overlapping
//!    buffers that were below it. The order "below" is kept, so the result stays valid, and
//!    the gaps best fit leaves close (MegEngine's production choice).
//! 4. [`Algorithm::Search`]: MiniMalloc's exact search (Moffitt, ASPLOS 2023), warm-started
//!    from the best heuristic arena: a depth-first search over canonical placements
//!    (buffers placed in order of offset, each at the lowest offset its placed neighbours
//!    leave) with section bounds, dominance, hatless and symmetry pruning and dynamic
//!    decomposition, run on the decision problem "fits in capacity C" for the lower bound
//!    first, then for capacities bisected between the lowest one not ruled out and the best
//!    arena found. See the module docs in `search/mod.rs`. It is bounded by a work budget
//!    ([`Effort`]), so results do not depend on the machine; a wall-clock cap is a safety
//!    net only, and [`Placement::search`] says which one stopped it. Its restarts run
//!    side by side on the rayon pool's threads, with the result of running them one by
//!    one.
//! 5. [`Algorithm::GreedyReorder`], last and only where the arena is still above the
//!    bound (within a thousandth): greedy by size's order with *first* fit (the lowest gap
//!    that holds the buffer), then rounds that move the buffers ending above the lower
//!    bound to the front of the order ("squeaky wheel"), the smallest arena kept. On
//!    planned training steps, where the search is too large to run, it packs far tighter
//!    than best fit (`cargo bench --bench alloc -- real` compares them). Each round costs
//!    what greedy by size does;
//!    its rounds, the first included, take at most 10^8 scan steps (about a tenth of a
//!    second), so a list where one round costs more is not reordered (it is reported as
//!    skipped): on large plans one round took as long as the rest of the arena.
//!
//! # In-place reuse
//! [`InPlace`] pairs name an output buffer that may take exactly its input's address: legal
//! only when the input's last step is the output's first step (in half-open terms
//! `input.upper == output.lower + 1`: they share the one step of the op). The greedy path tries the
//! partner's offset first; [`validate`] accepts an address overlap between two buffers only
//! when they form a given, eligible pair and have the same offset.
//!
//! Internally every size and offset is counted in units of `align` (padded sizes are whole
//! units), so the algorithms never see alignment.

pub mod csv;
mod greedy;
mod instance;
mod max_tree;
mod search;
mod sweep;
mod validate;

use instance::Instance;
use std::fmt;
use std::time::Duration;
use thiserror::Error;

pub use validate::{validate, validate_in_place, AllocViolation};

/// A buffer to place: live over steps `[lower, upper)`, `size` bytes. Its id is its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Buffer {
    pub lower: u64,
    pub upper: u64,
    pub size: u64,
}

/// An in-place reuse pair: `output` may take exactly `input`'s address, because the op that
/// reads `input` for the last time writes `output` (`input.upper == output.lower + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct InPlace {
    pub output: usize,
    pub input: usize,
}

/// How hard the improvement stage ([`Algorithm::Search`]) may work. Budgets count work
/// (entries the search scans), so results never depend on machine speed; `time_cap` is a
/// safety net only, and [`SearchSummary::stop`] says when it ended the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effort {
    /// Work budget of the search (about 10^8 per second in a release build). Zero turns
    /// the search off.
    pub search_work: u64,
    /// Instances with more (non-empty) buffers than this skip the search.
    pub search_max_buffers: usize,
    /// Wall-clock cap of the search, a safety net behind the work budget.
    pub time_cap: Option<Duration>,
    /// Steps greedy by size may take (see `greedy.rs`; about 10^9 a second); above it,
    /// greedy by size is skipped and the placement says so.
    pub greedy_work: u64,
}

impl Effort {
    /// Heuristics only.
    pub const FAST: Effort = Effort {
        search_work: 0,
        search_max_buffers: 0,
        time_cap: None,
        greedy_work: 2_000_000_000,
    };
    /// The default: at most about two seconds of search (release build, one core). Places
    /// every instance of MiniMalloc's challenging suite within its capacity.
    pub const DEFAULT: Effort = Effort {
        search_work: 2_000_000_000,
        search_max_buffers: 4_000,
        time_cap: Some(Duration::from_secs(15)),
        greedy_work: 2_000_000_000,
    };
    /// What `sgc plan` spends on a plan's arena: a two-hundredth of the default, a few
    /// hundredths of a second at most: enough for the search on the small plans where it
    /// helps; larger plans (over 600 lifetimes) would need far more, so they skip it and
    /// planning stays fast.
    pub const PLAN: Effort = Effort {
        search_work: Effort::DEFAULT.search_work / 200,
        search_max_buffers: 600,
        time_cap: Some(Duration::from_secs(1)),
        ..Effort::DEFAULT
    };
    /// Ten times the default search budget, on instances five times as large.
    pub const THOROUGH: Effort = Effort {
        search_work: Effort::DEFAULT.search_work * 10,
        search_max_buffers: Effort::DEFAULT.search_max_buffers * 5,
        time_cap: Some(Duration::from_secs(120)),
        greedy_work: Effort::DEFAULT.greedy_work * 10,
    };
}

impl Default for Effort {
    fn default() -> Self {
        Effort::DEFAULT
    }
}

pub use sgc_plan_format::ArenaEffort;

impl From<ArenaEffort> for Effort {
    /// The effort a plan option names.
    fn from(e: ArenaEffort) -> Effort {
        match e {
            ArenaEffort::Fast => Effort::FAST,
            ArenaEffort::Plan => Effort::PLAN,
            ArenaEffort::Default => Effort::DEFAULT,
            ArenaEffort::Thorough => Effort::THOROUGH,
        }
    }
}

/// Options of [`allocate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocOptions {
    /// Offsets are multiples of this (bytes, at least 1; 256 on CUDA).
    pub align: u64,
    pub effort: Effort,
    /// Optional in-place reuse pairs (see the module docs).
    pub in_place: Vec<InPlace>,
}

impl AllocOptions {
    /// The same options with another effort.
    pub fn with_effort(self, effort: Effort) -> Self {
        AllocOptions { effort, ..self }
    }
}

impl Default for AllocOptions {
    fn default() -> Self {
        AllocOptions {
            align: 1,
            effort: Effort::DEFAULT,
            in_place: Vec::new(),
        }
    }
}

/// One of the allocation algorithms (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    GreedySize,
    BestFitSweep,
    Pushdown,
    Search,
    GreedyReorder,
}

impl Algorithm {
    /// Every algorithm, in the order [`allocate`] runs them and breaks ties.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::GreedySize,
        Algorithm::BestFitSweep,
        Algorithm::Pushdown,
        Algorithm::Search,
        Algorithm::GreedyReorder,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::GreedySize => "greedy-size",
            Algorithm::GreedyReorder => "greedy-reorder",
            Algorithm::BestFitSweep => "best-fit-sweep",
            Algorithm::Pushdown => "pushdown",
            Algorithm::Search => "search",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The arena one algorithm reached.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Trial {
    pub algorithm: String,
    pub arena: u64,
}

/// The result: one offset per buffer (same order as the input), the arena size (bytes,
/// padding counted), the lower bound, and which algorithm produced it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    pub offsets: Vec<u64>,
    pub arena: u64,
    pub lower_bound: u64,
    pub algorithm: String,
    /// Every algorithm run, with its arena, in run order.
    pub trials: Vec<Trial>,
    /// What the exact search did.
    pub search: SearchSummary,
    /// The heuristics that did not run, and why.
    pub skipped: Vec<Skipped>,
}

/// A heuristic that did not run on an instance, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub algorithm: String,
    pub reason: String,
}

/// What the exact search ([`Algorithm::Search`]) did and why it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SearchSummary {
    pub stop: SearchStop,
    /// Work spent, and the budget it had.
    pub work: u64,
    pub budget: u64,
    /// The lowest arena (bytes) the search has not ruled out: no placement is smaller. The
    /// arena equals it when the search proved the arena optimal.
    pub proven_bound: u64,
}

impl SearchSummary {
    /// A search that did not run (`proven_bound` is the lower bound, in bytes).
    pub fn off(lower_bound: u64) -> Self {
        SearchSummary {
            stop: SearchStop::Off,
            work: 0,
            budget: 0,
            proven_bound: lower_bound,
        }
    }
}

/// Why the exact search stopped, or did not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SearchStop {
    /// Not run: the best heuristic already reached the lower bound.
    AtLowerBound,
    /// Not run: the effort turns the search off (or only one heuristic was asked for).
    Off,
    /// Not run: more buffers than the effort's `search_max_buffers`, or more time
    /// overlaps than its work budget could even list.
    TooLarge,
    /// Every smaller capacity was ruled out: the arena is optimal.
    Optimal,
    /// The work budget ran out (deterministic).
    WorkBudget,
    /// The wall-clock cap ran out before the work budget (may depend on the machine).
    TimeCap,
}

impl SearchStop {
    /// A short phrase for reports.
    pub fn describe(self) -> &'static str {
        match self {
            SearchStop::AtLowerBound => "not needed (a heuristic reached the lower bound)",
            SearchStop::Off => "off",
            SearchStop::TooLarge => "skipped (a larger instance than the effort allows)",
            SearchStop::Optimal => "proved the arena optimal",
            SearchStop::WorkBudget => "stopped by its work budget",
            SearchStop::TimeCap => "stopped by its time cap (result may depend on the machine)",
        }
    }
}

/// Why buffers could not be allocated.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AllocError {
    #[error("alignment must be at least 1")]
    ZeroAlign,
    #[error("{algorithm} did not run: {reason}")]
    Skipped { algorithm: String, reason: String },
    #[error("buffer {buffer}: empty lifetime [{lower}, {upper}): lower must be below upper")]
    EmptyLifetime {
        buffer: usize,
        lower: u64,
        upper: u64,
    },
    #[error("the padded sizes sum past u64::MAX bytes: sizes or alignment are wrong")]
    Overflow,
    #[error("in-place pair (output {output}, input {input}) names a buffer out of range ({buffers} buffers)")]
    InPlaceOutOfRange {
        output: usize,
        input: usize,
        buffers: usize,
    },
    #[error("in-place pair (output {output}, input {input}): the input's last step ({input_last}) must be the output's first step ({output_first})")]
    InPlaceLifetimes {
        output: usize,
        input: usize,
        input_last: u64,
        output_first: u64,
    },
}

/// `size` rounded up to a multiple of `align` (`None` on overflow or `align == 0`).
pub fn round_up(size: u64, align: u64) -> Option<u64> {
    if align == 0 {
        return None;
    }
    size.div_ceil(align).checked_mul(align)
}

/// The largest, over time, of the summed padded sizes of the live buffers: no placement can
/// have a smaller arena. Saturates at `u64::MAX`; `align == 0` counts as 1.
pub fn lower_bound(buffers: &[Buffer], align: u64) -> u64 {
    let align = align.max(1);
    let mut events: Vec<(u64, bool, u64)> = Vec::with_capacity(buffers.len() * 2);
    for b in buffers.iter().filter(|b| b.lower < b.upper) {
        let w = round_up(b.size, align).unwrap_or(u64::MAX);
        events.push((b.lower, true, w));
        events.push((b.upper, false, w));
    }
    // At equal times the ends (false) come first: intervals are half-open.
    events.sort_unstable();
    let (mut live, mut peak) = (0u64, 0u64);
    for (_, start, w) in events {
        if start {
            live = live.saturating_add(w);
            peak = peak.max(live);
        } else {
            live = live.saturating_sub(w);
        }
    }
    peak
}

/// Places the buffers with every algorithm of [`Algorithm::ALL`] and keeps the smallest
/// arena. The result always passes [`validate_in_place`] with the same pairs.
pub fn allocate(buffers: &[Buffer], options: &AllocOptions) -> Result<Placement, AllocError> {
    allocate_until(buffers, options, 0)
}

/// [`allocate`], where an arena of `good_enough` bytes or less ends the heuristics'
/// rounds as one within a thousandth of the lower bound does (a plan's arena merged by
/// in-place chains has a bound below the one that counts).
pub(crate) fn allocate_until(
    buffers: &[Buffer],
    options: &AllocOptions,
    good_enough: u64,
) -> Result<Placement, AllocError> {
    let inst = Instance::new(buffers, options.align, &options.in_place)?;
    let goal = near_bound(&inst).max(good_enough / inst.align);
    // The heuristics are independent (pushdown starts from the sweep): run them side by
    // side, then judge them in the fixed order of `Algorithm::ALL` (the result does not
    // depend on the number of threads).
    let (greedy, (swept, pushed)) = rayon::join(
        || heuristic(&inst, Algorithm::GreedySize, options.effort),
        || {
            let swept = sweep::best_fit_sweep(&inst);
            let pushed = sweep::pushdown(&inst, &swept);
            (swept, pushed)
        },
    );
    let mut best = Best::default();
    let placed = [
        (Algorithm::GreedySize, greedy),
        (Algorithm::BestFitSweep, Ok(swept)),
        (Algorithm::Pushdown, Ok(pushed)),
    ];
    for (alg, offsets) in placed {
        best.take(&inst, alg, offsets);
    }
    let run = search::improve(&inst, best.arena(), options.effort);
    if let Some(better) = run.offsets {
        best.consider(&inst, Algorithm::Search, better);
    }
    // Greedy-reorder runs last, and only where the others left the arena above `goal`:
    // its rounds cost as much as greedy by size each, and where the search runs it
    // usually reaches the bound first. It does not warm-start the search: the capacities
    // the bisection asks for follow from its start, and from reorder's smaller arena they
    // left MiniMalloc's instance J above its capacity (1052672 for 1048576).
    if best.arena() > goal {
        let reordered = greedy::greedy_reorder(&inst, options.effort.greedy_work, goal)
            .map_err(|e| too_much_to_reorder(e, options.effort));
        best.take(&inst, Algorithm::GreedyReorder, reordered);
    }
    Ok(best.into_placement(&inst, run.summary))
}

/// The smallest arena so far (ties keep the earlier algorithm) and every trial.
#[derive(Default)]
struct Best {
    trials: Vec<Trial>,
    skipped: Vec<Skipped>,
    best: Option<(Algorithm, Vec<u64>, u64)>,
}

impl Best {
    fn consider(&mut self, inst: &Instance, alg: Algorithm, offsets: Vec<u64>) {
        let arena = inst.arena_units(&offsets);
        self.trials.push(Trial {
            algorithm: alg.name().to_string(),
            arena: arena * inst.align,
        });
        if self.best.as_ref().is_none_or(|b| arena < b.2) {
            self.best = Some((alg, offsets, arena));
        }
    }

    /// Considers a heuristic's offsets, or records why it did not run.
    fn take(&mut self, inst: &Instance, alg: Algorithm, offsets: Result<Vec<u64>, String>) {
        match offsets {
            Ok(offsets) => self.consider(inst, alg, offsets),
            Err(reason) => self.skipped.push(Skipped {
                algorithm: alg.name().to_string(),
                reason,
            }),
        }
    }

    /// The smallest arena so far (units; 0 before any).
    fn arena(&self) -> u64 {
        self.best.as_ref().map_or(0, |b| b.2)
    }

    fn into_placement(self, inst: &Instance, search: SearchSummary) -> Placement {
        let (alg, offsets, _) = self.best.expect("a heuristic always places the buffers");
        let mut p = inst.to_placement(alg, &offsets, self.trials, search);
        p.skipped = self.skipped;
        p
    }
}

/// Runs one algorithm alone (for benchmarks and comparisons). [`Algorithm::Search`] starts
/// from the best of the heuristics, as inside [`allocate`].
pub fn allocate_with(
    buffers: &[Buffer],
    options: &AllocOptions,
    algorithm: Algorithm,
) -> Result<Placement, AllocError> {
    if algorithm == Algorithm::Search {
        return allocate(buffers, options);
    }
    let inst = Instance::new(buffers, options.align, &options.in_place)?;
    let offsets =
        heuristic(&inst, algorithm, options.effort).map_err(|reason| AllocError::Skipped {
            algorithm: algorithm.name().to_string(),
            reason,
        })?;
    let mut best = Best::default();
    best.consider(&inst, algorithm, offsets);
    let off = SearchSummary::off(inst.lb * inst.align);
    Ok(best.into_placement(&inst, off))
}

/// Runs heuristic `alg` in align units, or says why it did not run.
fn heuristic(inst: &Instance, alg: Algorithm, effort: Effort) -> Result<Vec<u64>, String> {
    match alg {
        Algorithm::GreedySize => {
            greedy::greedy_by_size(inst, effort.greedy_work).map_err(|e| too_much(e, effort))
        }
        Algorithm::GreedyReorder => {
            greedy::greedy_reorder(inst, effort.greedy_work, near_bound(inst))
                .map_err(|e| too_much_to_reorder(e, effort))
        }
        Algorithm::BestFitSweep => Ok(sweep::best_fit_sweep(inst)),
        Algorithm::Pushdown => Ok(sweep::pushdown(inst, &sweep::best_fit_sweep(inst))),
        Algorithm::Search => unreachable!("the search is not a heuristic"),
    }
}

/// An arena (units) within a thousandth of the lower bound: more heuristic rounds are not
/// worth their time there (the exact search, where the effort allows it, still runs).
fn near_bound(inst: &Instance) -> u64 {
    inst.lb + inst.lb / 1000
}

fn too_much_to_reorder(e: greedy::TooMuchWork, effort: Effort) -> String {
    format!(
        "{} time-overlapping pairs: about {:.1e} steps a round, over the {:.0e} its rounds may take",
        e.pairs,
        e.work as f64,
        greedy::reorder_work(effort.greedy_work) as f64
    )
}

fn too_much(e: greedy::TooMuchWork, effort: Effort) -> String {
    format!(
        "{} time-overlapping pairs: about {:.1e} steps, over the effort's {:.0e}",
        e.pairs, e.work as f64, effort.greedy_work as f64
    )
}
