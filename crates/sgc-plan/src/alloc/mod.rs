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
//!    pairs (below).
//! 2. [`Algorithm::BestFitSweep`]: walk time; free buffers at their end (coalescing free
//!    blocks); each starting buffer, largest first, takes the smallest free block that fits,
//!    else the top of the arena grows.
//! 3. [`Algorithm::Pushdown`]: the best-fit sweep followed by a gravity pass: visiting the
//!    buffers by offset, each drops to the highest (new) end among the time-overlapping
//!    buffers that were below it. The order "below" is kept, so the result stays valid, and
//!    the gaps best fit leaves close (MegEngine's production choice).
//! 4. [`Algorithm::Search`]: an exact branch and bound in the spirit of MiniMalloc
//!    (Moffitt, ASPLOS 2023), run on the decision problem "fits in capacity C" for a
//!    shrinking sequence of capacities between the lower bound and the best arena found so
//!    far. See the module docs in `search.rs`: buffers are placed bottom up (each at the
//!    lowest floor left; a node branches on which buffer sits at the bottom of one section
//!    at that floor, or on leaving it empty), with a per-section lower bound (floor plus
//!    the unplaced sizes must fit), symmetry breaking, dynamic decomposition into
//!    independent groups and restarts over several preorders. It is bounded by a work budget
//!    ([`Effort`]), never by wall time, so results do not depend on the machine.
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
mod search;
mod sweep;
mod validate;

use instance::Instance;
use std::fmt;
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

/// How hard the improvement stage ([`Algorithm::Search`]) may work. Budgets count search
/// nodes weighted by the buffers they look at, so results never depend on machine speed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effort {
    /// Work budget of the branch and bound: each node costs the number of unplaced buffers
    /// of its group plus the sections they span. Zero turns the search off.
    pub search_work: u64,
    /// Instances with more (non-empty) buffers than this skip the search.
    pub search_max_buffers: usize,
}

impl Effort {
    /// Heuristics only.
    pub const FAST: Effort = Effort {
        search_work: 0,
        search_max_buffers: 0,
    };
    /// The default: a search of at most about three seconds on the hard instances
    /// (release build).
    pub const DEFAULT: Effort = Effort {
        search_work: 1_000_000_000,
        search_max_buffers: 4_000,
    };
    /// What `sgc plan` spends on a plan's arena: a hundredth of the default, a few
    /// hundredths of a second. On the zoo's plans the search finds its best placement within
    /// it (the CI baseline holds it), and on ResNet-50, MobileNetV3, U-Net and the LSTM of
    /// the real corpus five times as much found the same arenas; the rest of a larger budget
    /// goes to chasing a lower bound that in-place chains put out of reach.
    pub const PLAN: Effort = Effort {
        search_work: 10_000_000,
        search_max_buffers: 4_000,
    };
    /// Ten times the default search budget.
    pub const THOROUGH: Effort = Effort {
        search_work: 10_000_000_000,
        search_max_buffers: 20_000,
    };
}

impl Default for Effort {
    fn default() -> Self {
        Effort::DEFAULT
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
}

impl Algorithm {
    /// Every algorithm, in the order [`allocate`] runs them and breaks ties.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::GreedySize,
        Algorithm::BestFitSweep,
        Algorithm::Pushdown,
        Algorithm::Search,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::GreedySize => "greedy-size",
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
}

/// Why buffers could not be allocated.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AllocError {
    #[error("alignment must be at least 1")]
    ZeroAlign,
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
    use rayon::prelude::*;
    let inst = Instance::new(buffers, options.align, &options.in_place)?;
    // The heuristics are independent: run them side by side, then judge them in the fixed
    // order of `Algorithm::ALL` (the result does not depend on the number of threads).
    let heuristics: Vec<Algorithm> = Algorithm::ALL
        .into_iter()
        .filter(|&a| a != Algorithm::Search)
        .collect();
    let placed: Vec<Option<Vec<u64>>> = heuristics
        .par_iter()
        .map(|&alg| run_units(&inst, alg, options.effort, None))
        .collect();
    let mut trials = Vec::new();
    let mut best: Option<(Algorithm, Vec<u64>, u64)> = None;
    let mut consider =
        |alg: Algorithm, offsets: Vec<u64>, best: &mut Option<(Algorithm, Vec<u64>, u64)>| {
            let arena = inst.arena_units(&offsets);
            trials.push(Trial {
                algorithm: alg.name().to_string(),
                arena: arena * inst.align,
            });
            if best.as_ref().is_none_or(|b| arena < b.2) {
                *best = Some((alg, offsets, arena));
            }
        };
    for (alg, offsets) in heuristics.into_iter().zip(placed) {
        if let Some(offsets) = offsets {
            consider(alg, offsets, &mut best);
        }
    }
    let incumbent = best.as_ref().map(|b| (b.1.clone(), b.2));
    if let Some((offsets, arena)) = incumbent {
        if let Some(better) = run_units(
            &inst,
            Algorithm::Search,
            options.effort,
            Some((&offsets, arena)),
        ) {
            consider(Algorithm::Search, better, &mut best);
        }
    }
    let (alg, offsets, _) = best.expect("greedy always produces a placement");
    Ok(inst.to_placement(alg, &offsets, trials))
}

/// Runs one algorithm alone (for benchmarks and comparisons). [`Algorithm::Search`] starts
/// from the best of the heuristics, as inside [`allocate`].
pub fn allocate_with(
    buffers: &[Buffer],
    options: &AllocOptions,
    algorithm: Algorithm,
) -> Result<Placement, AllocError> {
    if algorithm != Algorithm::Search {
        let inst = Instance::new(buffers, options.align, &options.in_place)?;
        let offsets = run_units(&inst, algorithm, options.effort, None)
            .expect("heuristics always produce a placement");
        let arena = inst.arena_units(&offsets) * inst.align;
        let trials = vec![Trial {
            algorithm: algorithm.name().to_string(),
            arena,
        }];
        return Ok(inst.to_placement(algorithm, &offsets, trials));
    }
    allocate(buffers, options)
}

/// Runs `alg` in align units. `Search` needs the incumbent (offsets, arena) and returns
/// `None` when it found nothing better or did not run.
fn run_units(
    inst: &Instance,
    alg: Algorithm,
    effort: Effort,
    incumbent: Option<(&[u64], u64)>,
) -> Option<Vec<u64>> {
    match alg {
        Algorithm::GreedySize => Some(greedy::greedy_by_size(inst)),
        Algorithm::BestFitSweep => Some(sweep::best_fit_sweep(inst)),
        Algorithm::Pushdown => Some(sweep::pushdown(inst, &sweep::best_fit_sweep(inst))),
        Algorithm::Search => {
            let (offsets, arena) = incumbent?;
            search::improve(inst, offsets, arena, effort)
        }
    }
}
