//! Greedy by size with best fit (TFLite's arena planner, XLA's default heap): largest
//! buffer first, each into the smallest gap left among the already placed buffers whose
//! lifetimes overlap its own, else on top of them. In-place partners are tried first.
//!
//! # Finding the time-overlapping buffers
//! Two ways, with the same result; the cheaper one by an estimate made first, in
//! O(n log n):
//! - *scan*: the placed buffers are kept sorted by offset, and each placement scans them
//!   all, keeping those alive at the same time: O(n^2) simple steps, the fastest way
//!   when most buffers overlap most others (a training step's saved activations);
//! - *index*: the buffers are indexed once, sorted by start, in a max tree holding the end
//!   of each placed buffer; the placed buffers overlapping `[lower, upper)` are those among
//!   the starts below `upper` whose end is above `lower`, which a descent that skips every
//!   subtree ending at or below `lower` lists in O((k + 1) log n), then sorted by offset:
//!   O(P log n) in all, P the number of time-overlapping pairs, the way for long lists of
//!   short-lived buffers.
//!
//! When even the cheaper way costs more than the effort's `greedy_work` (2e9 steps, about
//! two seconds, by default: a hundred thousand buffers alive by the ten thousand), the
//! heuristic is skipped and says so: the other heuristics are O(n log n).

use super::instance::Instance;
use super::max_tree::MaxTree;

const UNPLACED: u64 = u64::MAX;

/// Estimated cost of the index per time-overlapping pair, in scan steps.
const INDEX_STEPS_PER_PAIR: u64 = 40;

/// Why greedy by size did not run: its estimated work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooMuchWork {
    pub pairs: u64,
    pub work: u64,
}

/// Offsets (units) by greedy by size with best fit, unless that costs more than
/// `max_work` scan steps.
pub(crate) fn greedy_by_size(inst: &Instance, max_work: u64) -> Result<Vec<u64>, TooMuchWork> {
    let round = Round::of(inst, max_work)?;
    Ok(place_in_order(
        inst,
        &size_order(inst),
        round.finder(inst),
        Fit::Best,
    ))
}

/// One greedy placement's estimated work (scan steps) and the cheaper way to find the
/// time-overlapping buffers (see the module docs).
struct Round {
    work: u64,
    scan: bool,
}

impl Round {
    /// The estimate, or why it is over `max_work`.
    fn of(inst: &Instance, max_work: u64) -> Result<Round, TooMuchWork> {
        let n = inst.w.iter().filter(|&&w| w > 0).count() as u64;
        let pairs = overlapping_pairs(inst);
        let scan = n * n / 2;
        let index = pairs.saturating_mul(INDEX_STEPS_PER_PAIR);
        let work = scan.min(index);
        if work > max_work {
            return Err(TooMuchWork { pairs, work });
        }
        Ok(Round {
            work: work.max(1),
            scan: scan <= index,
        })
    }

    fn finder(&self, inst: &Instance) -> Finder {
        match self.scan {
            true => Finder::Scan(Placed::default()),
            false => Finder::Index(Index::new(inst)),
        }
    }
}

/// Rounds of [`greedy_reorder`] that may pass without a smaller arena before it stops.
const STALE_ROUNDS: usize = 8;

/// Scan steps [`greedy_reorder`]'s rounds may take in all, the first included (about a
/// tenth of a second): on a plan's few thousand lifetimes that is dozens of rounds; a list
/// where one round costs more is not reordered (on a 30k-op plan one round took as long as
/// the rest of the arena, and the planner's time grew faster than linearly with the graph).
const REORDER_WORK: u64 = 100_000_000;

/// The scan steps [`greedy_reorder`] may take under an effort's `greedy_work`.
pub(crate) fn reorder_work(greedy_work: u64) -> u64 {
    greedy_work.min(REORDER_WORK)
}

/// Greedy by size with *first* fit (each buffer at the lowest gap that holds it), then
/// rounds of reordering ("squeaky wheel"): the buffers that ended above the lower bound go
/// first in the next round, in their order, the rest after them in theirs. Keeps the
/// smallest arena; stops at `goal` (units, at least the lower bound), when the order
/// stops changing, after
/// [`STALE_ROUNDS`] rounds without a smaller arena, or when another round would take the
/// rounds past [`REORDER_WORK`] or `max_work` scan steps (when the first one would, it does
/// not run: [`TooMuchWork`]).
///
/// Best fit keeps large gaps for large buffers; first fit keeps every buffer low, which on
/// planned training steps (long-lived checkpoints under short-lived recomputations) packs
/// far tighter (`cargo bench --bench alloc -- real` compares them). The rounds lift the
/// buffers that set the arena's top into the first choice of gaps; a round can change
/// nothing for several rounds before one that does, hence [`STALE_ROUNDS`].
pub(crate) fn greedy_reorder(
    inst: &Instance,
    max_work: u64,
    goal: u64,
) -> Result<Vec<u64>, TooMuchWork> {
    let limit = reorder_work(max_work);
    let round = Round::of(inst, limit)?;
    let place = |order: &[usize]| place_in_order(inst, order, round.finder(inst), Fit::First);
    let mut order = size_order(inst);
    let mut offsets = place(&order);
    let mut best = offsets.clone();
    let mut best_arena = inst.arena_units(&best);
    let (mut stale, mut spent) = (0, round.work);
    while best_arena > goal && stale < STALE_ROUNDS && spent + round.work <= limit {
        let next = lifted(inst, &order, &offsets);
        if next == order {
            break;
        }
        order = next;
        offsets = place(&order);
        spent += round.work;
        let arena = inst.arena_units(&offsets);
        if arena < best_arena {
            (best, best_arena, stale) = (offsets.clone(), arena, 0);
        } else {
            stale += 1;
        }
    }
    Ok(best)
}

/// `order` with the buffers that end above the lower bound moved to the front (each part
/// keeps its order).
fn lifted(inst: &Instance, order: &[usize], offsets: &[u64]) -> Vec<usize> {
    let high = |i: usize| inst.w[i] > 0 && offsets[i] + inst.w[i] > inst.lb;
    let (mut first, rest): (Vec<usize>, Vec<usize>) = order.iter().partition(|&&i| high(i));
    first.extend(rest);
    first
}

/// Largest first; longer lifetime, then lower id, break ties.
fn size_order(inst: &Instance) -> Vec<usize> {
    let mut order: Vec<usize> = (0..inst.len()).collect();
    order.sort_unstable_by_key(|&i| {
        let len = inst.upper[i] - inst.lower[i];
        (std::cmp::Reverse(inst.w[i]), std::cmp::Reverse(len), i)
    });
    order
}

/// Which gap a buffer takes among those that hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fit {
    /// The smallest (the lowest among equals).
    Best,
    /// The lowest.
    First,
}

/// The number of unordered pairs of non-empty buffers whose lifetimes overlap: for each
/// buffer, the starts before its end minus the ends at or before its start, less itself.
pub(crate) fn overlapping_pairs(inst: &Instance) -> u64 {
    let active: Vec<usize> = (0..inst.len()).filter(|&i| inst.w[i] > 0).collect();
    let mut lowers: Vec<u64> = active.iter().map(|&i| inst.lower[i]).collect();
    let mut uppers: Vec<u64> = active.iter().map(|&i| inst.upper[i]).collect();
    lowers.sort_unstable();
    uppers.sort_unstable();
    let twice: u64 = active
        .iter()
        .map(|&i| {
            let started = lowers.partition_point(|&l| l < inst.upper[i]);
            let ended = uppers.partition_point(|&u| u <= inst.lower[i]);
            (started - ended - 1) as u64
        })
        .sum();
    twice / 2
}

/// The placed buffers sorted by offset, as parallel arrays: the scan for time-overlapping
/// buffers reads only the two lifetime arrays, which keeps it cache friendly.
#[derive(Default)]
struct Placed {
    lower: Vec<u64>,
    upper: Vec<u64>,
    off: Vec<u64>,
    end: Vec<u64>,
    id: Vec<u32>,
}

impl Placed {
    fn insert(&mut self, lower: u64, upper: u64, off: u64, end: u64, id: u32) {
        let at = self.off.partition_point(|&o| o < off);
        self.lower.insert(at, lower);
        self.upper.insert(at, upper);
        self.off.insert(at, off);
        self.end.insert(at, end);
        self.id.insert(at, id);
    }

    /// The placed buffers alive during `[lower, upper)`, as (offset, end, id) by offset.
    fn overlapping(
        &self,
        lower: u64,
        upper: u64,
    ) -> impl Iterator<Item = (u64, u64, u32)> + Clone + '_ {
        let live = (self.lower.iter().zip(&self.upper).enumerate())
            .filter(move |(_, (&l, &u))| l < upper && lower < u);
        live.map(|(k, _)| (self.off[k], self.end[k], self.id[k]))
    }
}

/// How [`place_in_order`] finds the placed buffers overlapping one in time.
enum Finder {
    Scan(Placed),
    Index(Index),
}

/// The buffers sorted by start, with a max tree over the ends of the placed ones.
struct Index {
    /// Position (in start order) of each non-empty buffer.
    pos: Vec<u32>,
    /// Buffer at each position, and its start.
    id: Vec<u32>,
    start: Vec<u64>,
    /// The end of the placed buffer at each position (0 if unplaced).
    ends: MaxTree,
}

impl Index {
    fn new(inst: &Instance) -> Self {
        let mut id: Vec<u32> = (0..inst.len() as u32)
            .filter(|&i| inst.w[i as usize] > 0)
            .collect();
        id.sort_unstable_by_key(|&i| (inst.lower[i as usize], i));
        let mut pos = vec![u32::MAX; inst.len()];
        for (p, &i) in id.iter().enumerate() {
            pos[i as usize] = p as u32;
        }
        Index {
            start: id.iter().map(|&i| inst.lower[i as usize]).collect(),
            pos,
            ends: MaxTree::new(id.len()),
            id,
        }
    }

    fn insert(&mut self, i: usize, end: u64) {
        self.ends.set(self.pos[i] as usize, end);
    }

    /// Pushes onto `out` the placed buffers alive during `[lower, upper)`.
    fn overlapping(&self, lower: u64, upper: u64, out: &mut Vec<u32>) {
        let limit = self.start.partition_point(|&s| s < upper);
        self.ends.above(limit, lower, &mut |p| out.push(self.id[p]));
    }
}

/// Places buffers in `order`, each at its in-place partner's offset when that is free,
/// else at the best-fitting gap among the placed buffers that overlap it in time.
fn place_in_order(inst: &Instance, order: &[usize], mut finder: Finder, fit: Fit) -> Vec<u64> {
    let mut offsets = vec![UNPLACED; inst.len()];
    let mut live: Vec<u32> = Vec::new();
    let mut busy: Vec<(u64, u64, u32)> = Vec::new();
    for &i in order {
        if inst.w[i] == 0 {
            offsets[i] = 0;
            continue;
        }
        let (lower, upper, w) = (inst.lower[i], inst.upper[i], inst.w[i]);
        let off = match &finder {
            Finder::Scan(placed) => {
                choose(inst, &offsets, i, placed.overlapping(lower, upper), fit)
            }
            Finder::Index(index) => {
                live.clear();
                index.overlapping(lower, upper, &mut live);
                busy.clear();
                busy.extend(live.iter().map(|&j| {
                    let o = offsets[j as usize];
                    (o, o + inst.w[j as usize], j)
                }));
                busy.sort_unstable();
                choose(inst, &offsets, i, busy.iter().copied(), fit)
            }
        };
        offsets[i] = off;
        match &mut finder {
            Finder::Scan(placed) => placed.insert(lower, upper, off, off + w, i as u32),
            Finder::Index(index) => index.insert(i, upper),
        }
    }
    offsets
}

/// The offset for `i` given the placed buffers overlapping it in time (`busy`: (offset,
/// end, id) sorted by offset): an in-place partner's, else the gap `fit` picks.
fn choose(
    inst: &Instance,
    offsets: &[u64],
    i: usize,
    busy: impl Iterator<Item = (u64, u64, u32)> + Clone,
    fit: Fit,
) -> u64 {
    in_place_offset(inst, offsets, busy.clone(), i).unwrap_or_else(|| {
        let busy = busy.map(|(o, e, _)| (o, e));
        match fit {
            Fit::Best => best_fit(busy, inst.w[i]),
            Fit::First => first_fit(busy, inst.w[i]),
        }
    })
}

/// The offset of a placed partner if `i` fits there without touching any other placed,
/// time-overlapping buffer.
fn in_place_offset(
    inst: &Instance,
    offsets: &[u64],
    busy: impl Iterator<Item = (u64, u64, u32)> + Clone,
    i: usize,
) -> Option<u64> {
    inst.partners[i].iter().find_map(|&p| {
        let at = offsets[p as usize];
        if at == UNPLACED {
            return None;
        }
        let end = at + inst.w[i];
        let clash = busy
            .clone()
            .take_while(|&(o, _, _)| o < end)
            .any(|(_, e, j)| j != p && e > at);
        (!clash).then_some(at)
    })
}

/// The start of the smallest gap between the `busy` intervals (sorted by start) that holds `w`, else the
/// top of the highest interval. Ties go to the lowest gap.
fn best_fit(busy: impl Iterator<Item = (u64, u64)>, w: u64) -> u64 {
    let mut best: Option<(u64, u64)> = None; // (gap, offset)
    let mut cursor = 0u64;
    for (start, end) in busy {
        if start > cursor {
            let gap = start - cursor;
            if gap >= w && best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, cursor));
            }
        }
        cursor = cursor.max(end);
    }
    best.map_or(cursor, |(_, o)| o)
}

/// The start of the lowest gap between the `busy` intervals (sorted by start) that holds
/// `w`, else the top of the highest interval.
fn first_fit(busy: impl Iterator<Item = (u64, u64)>, w: u64) -> u64 {
    let mut cursor = 0u64;
    for (start, end) in busy {
        if start >= cursor.saturating_add(w) {
            return cursor;
        }
        cursor = cursor.max(end);
    }
    cursor
}

#[cfg(test)]
mod tests {
    use super::{best_fit, first_fit};

    #[test]
    fn first_fit_takes_the_lowest_gap_that_fits_and_best_fit_the_smallest() {
        // Gaps: [4,5) len 1, [8,10) len 2, [20,26) len 6; top 30.
        let busy = [(0, 4), (5, 8), (10, 20), (12, 14), (26, 30)];
        // (size, first fit, best fit)
        for (size, first, best) in [(1, 4, 4), (2, 8, 8), (3, 20, 20), (6, 20, 20), (7, 30, 30)] {
            assert_eq!(
                first_fit(busy.into_iter(), size),
                first,
                "first fit of {size}"
            );
            assert_eq!(best_fit(busy.into_iter(), size), best, "best fit of {size}");
        }
        // A wide gap [2,10) below a narrow one [11,13).
        let busy = [(0, 2), (10, 11), (13, 20)];
        assert_eq!(first_fit(busy.into_iter(), 2), 2);
        assert_eq!(best_fit(busy.into_iter(), 2), 11);
        assert_eq!(first_fit(std::iter::empty(), 7), 0);
        assert_eq!(best_fit(std::iter::empty(), 7), 0);
    }
}

#[cfg(test)]
mod index_tests {
    use super::{overlapping_pairs, place_in_order, Finder, Fit, Index, Instance, Placed};
    use crate::alloc::Buffer;

    /// The same greedy with a scan over every placed buffer: the index must not change a
    /// single offset.
    fn naive(inst: &Instance) -> Vec<u64> {
        let mut order: Vec<usize> = (0..inst.len()).collect();
        order.sort_unstable_by_key(|&i| {
            let len = inst.upper[i] - inst.lower[i];
            (std::cmp::Reverse(inst.w[i]), std::cmp::Reverse(len), i)
        });
        let mut offsets = vec![u64::MAX; inst.len()];
        for &i in &order {
            let mut busy: Vec<(u64, u64)> = (0..inst.len())
                .filter(|&j| offsets[j] != u64::MAX && inst.w[j] > 0)
                .filter(|&j| inst.lower[j] < inst.upper[i] && inst.lower[i] < inst.upper[j])
                .map(|j| (offsets[j], offsets[j] + inst.w[j]))
                .collect();
            busy.sort_unstable();
            offsets[i] = if inst.w[i] == 0 {
                0
            } else {
                super::best_fit(busy.into_iter(), inst.w[i])
            };
        }
        offsets
    }

    #[test]
    fn the_index_finds_what_a_full_scan_finds() {
        let mut rng = sgc_ir::testgen::SplitMix64::new(7);
        let mut next = |n: u64| rng.below(n);
        for _ in 0..50 {
            let buffers: Vec<Buffer> = (0..1 + next(120))
                .map(|_| {
                    let lower = next(60);
                    Buffer {
                        lower,
                        upper: lower + 1 + next(25),
                        size: next(40),
                    }
                })
                .collect();
            let inst = Instance::new(&buffers, 1 + next(3), &[]).unwrap();
            let mut order: Vec<usize> = (0..inst.len()).collect();
            order.sort_unstable_by_key(|&i| {
                let len = inst.upper[i] - inst.lower[i];
                (std::cmp::Reverse(inst.w[i]), std::cmp::Reverse(len), i)
            });
            let want = naive(&inst);
            let scan = place_in_order(&inst, &order, Finder::Scan(Placed::default()), Fit::Best);
            assert_eq!(scan, want);
            let index = place_in_order(&inst, &order, Finder::Index(Index::new(&inst)), Fit::Best);
            assert_eq!(index, want);
            // First fit sees the same neighbours either way.
            let scan = place_in_order(&inst, &order, Finder::Scan(Placed::default()), Fit::First);
            let index = place_in_order(&inst, &order, Finder::Index(Index::new(&inst)), Fit::First);
            assert_eq!(scan, index);
            let brute = (0..inst.len())
                .flat_map(|i| (0..i).map(move |j| (i, j)))
                .filter(|&(i, j)| inst.w[i] > 0 && inst.w[j] > 0)
                .filter(|&(i, j)| inst.lower[j] < inst.upper[i] && inst.lower[i] < inst.upper[j])
                .count();
            assert_eq!(overlapping_pairs(&inst), brute as u64);
        }
    }
}
