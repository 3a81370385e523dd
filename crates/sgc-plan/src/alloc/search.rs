//! Exact branch and bound in the spirit of MiniMalloc (Moffitt, ASPLOS 2023), used to
//! improve the heuristics' best arena.
//!
//! # Decision problem
//! "Do the buffers fit in capacity `C`?" Time is cut into *sections* between consecutive
//! distinct lifetime endpoints; each buffer covers a range of sections. Where no buffer
//! crosses a section boundary the instance splits into independent *partitions*, solved
//! one after the other.
//!
//! # Canonical search
//! Any placement can be pushed down until every buffer rests on a time-overlapping buffer
//! or on 0. Listing such a placement by increasing offset, each buffer sits exactly at its
//! *minimum offset*: the highest end among the placed buffers that overlap it in time. So
//! the search only chooses the next buffer, places it at its minimum offset, and requires
//! (offset, preorder rank) to be non-decreasing along a branch (one canonical order per
//! placement). Pruning:
//! - dominance: a candidate whose offset is at or above the lowest *end* any unplaced
//!   buffer could reach would leave a gap that buffer could fill; skip it;
//! - section bound: in every section, `max(offset, floor) + unplaced sizes <= C`, where the
//!   floor is the top of the placed buffers there, raised to the lowest minimum offset of
//!   the section's unplaced buffers.
//!
//! Candidates are tried by (minimum offset, preorder rank). Three preorders (by section
//! total, section count and area in MiniMalloc's letters "TCA", "CAT", "TAC") run round
//! robin with doubling work limits, so whichever suits the instance finishes first.
//!
//! # Optimisation
//! [`improve`] first asks for the lower bound (an eighth of the budget), then bisects between the lowest capacity not
//! yet ruled out and the best arena found, each attempt with a share of the work budget.
//! The budget counts work (each node costs the number of buffers it orders), never time.

use super::instance::Instance;
use super::Effort;

const UNPLACED: u64 = u64::MAX;

/// A better placement (units) than `incumbent` of arena `arena`, if the search finds one.
pub(crate) fn improve(
    inst: &Instance,
    incumbent: &[u64],
    arena: u64,
    effort: Effort,
) -> Option<Vec<u64>> {
    let active = inst.w.iter().filter(|&&w| w > 0).count();
    if effort.search_work == 0 || active > effort.search_max_buffers || arena <= inst.lb {
        return None;
    }
    let mut solver = Solver::new(inst);
    let (mut best, mut best_arena) = (incumbent.to_vec(), arena);
    let (mut lo, mut work_left) = (inst.lb, effort.search_work);
    let mut improved = false;
    let mut first = true;
    while best_arena > lo && work_left > 0 {
        // The bound itself first, on a small share (a success proves optimality), then
        // bisection, each attempt on half of what is left.
        let (cap, budget) = if first {
            (lo, work_left / 8)
        } else {
            (lo + (best_arena - lo) / 2, work_left / 2)
        };
        first = false;
        let budget = budget.max(1);
        let (outcome, used) = solver.solve(cap, budget);
        work_left = work_left.saturating_sub(used);
        match outcome {
            Outcome::Found => {
                let offsets = solver.offsets.clone();
                best_arena = inst.arena_units(&offsets);
                best = offsets;
                improved = true;
            }
            Outcome::Infeasible | Outcome::Aborted => lo = cap + 1,
        }
    }
    improved.then_some(best)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Found,
    /// The search space was exhausted: nothing fits in the capacity.
    Infeasible,
    /// The work limit ran out.
    Aborted,
}

/// A contiguous range of sections and the buffers living in it.
struct Partition {
    sections: std::ops::Range<usize>,
    buffers: Vec<u32>,
}

/// One entry of a node's candidate list: (minimum offset, preorder rank, buffer).
type Entry = (u64, u32, u32);

/// A node of the depth-first search.
struct Frame {
    ordering: Vec<Entry>,
    cursor: usize,
    /// Offsets at or above this leave a gap some unplaced buffer could fill.
    min_height: u64,
    /// (offset, rank) of the buffer placed to reach this node.
    last: (u64, u32),
    /// The child placement to undo when coming back: (buffer, offset log, floor log).
    placed: Option<(u32, usize, usize)>,
}

struct Solver<'a> {
    inst: &'a Instance,
    overlaps: Vec<Vec<u32>>,
    /// Section range [first, end) of each buffer.
    span: Vec<(usize, usize)>,
    members: Vec<Vec<u32>>,
    partitions: Vec<Partition>,
    /// Preorder rank of each buffer, per heuristic.
    ranks: Vec<Vec<u32>>,
    initial_total: Vec<u64>,
    // Search state.
    cap: u64,
    offsets: Vec<u64>,
    min_off: Vec<u64>,
    floor: Vec<u64>,
    total: Vec<u64>,
    offset_log: Vec<(u32, u64)>,
    floor_log: Vec<(u32, u64)>,
    stamp: Vec<u32>,
    epoch: u32,
    work: u64,
    limit: u64,
}

impl<'a> Solver<'a> {
    fn new(inst: &'a Instance) -> Self {
        let n = inst.len();
        let mut times: Vec<u64> = (0..n)
            .filter(|&i| inst.w[i] > 0)
            .flat_map(|i| [inst.lower[i], inst.upper[i]])
            .collect();
        times.sort_unstable();
        times.dedup();
        let sections = times.len().saturating_sub(1);
        let index = |t: u64| times.binary_search(&t).unwrap_or(0);
        let span: Vec<(usize, usize)> = (0..n)
            .map(|i| {
                if inst.w[i] == 0 {
                    (0, 0)
                } else {
                    (index(inst.lower[i]), index(inst.upper[i]))
                }
            })
            .collect();
        let mut members = vec![Vec::new(); sections];
        let mut total = vec![0u64; sections];
        for (i, &(a, b)) in span.iter().enumerate() {
            for s in a..b {
                members[s].push(i as u32);
                total[s] += inst.w[i];
            }
        }
        let partitions = partitions(&span, sections);
        let ranks = preorders(inst, &span, &total);
        Solver {
            inst,
            overlaps: inst.overlap_lists(),
            span,
            members,
            partitions,
            ranks,
            initial_total: total.clone(),
            cap: 0,
            offsets: vec![0; n],
            min_off: vec![0; n],
            floor: vec![0; sections],
            total,
            offset_log: Vec::new(),
            floor_log: Vec::new(),
            stamp: vec![0; sections],
            epoch: 0,
            work: 0,
            limit: 0,
        }
    }

    /// Tries capacity `cap` with round-robin preorders and doubling limits, within
    /// `budget` work. Returns the outcome and the work used; on `Found`, `self.offsets`
    /// holds the placement.
    fn solve(&mut self, cap: u64, budget: u64) -> (Outcome, u64) {
        let mut used = 0u64;
        let mut limit = 2 * self.inst.len() as u64;
        loop {
            for h in 0..self.ranks.len() {
                let this = limit.min(budget - used);
                let outcome = self.solve_all(cap, h, this);
                used += self.work;
                if outcome != Outcome::Aborted || used >= budget {
                    return (outcome, used);
                }
            }
            limit = limit.saturating_mul(2);
        }
    }

    fn reset(&mut self, cap: u64, limit: u64) {
        self.cap = cap;
        self.offsets.iter_mut().for_each(|o| *o = UNPLACED);
        for (i, &w) in self.inst.w.iter().enumerate() {
            if w == 0 {
                self.offsets[i] = 0;
            }
        }
        self.min_off.iter_mut().for_each(|m| *m = 0);
        self.floor.iter_mut().for_each(|f| *f = 0);
        self.total.clone_from(&self.initial_total);
        self.work = 0;
        self.limit = limit;
    }

    fn solve_all(&mut self, cap: u64, h: usize, limit: u64) -> Outcome {
        self.reset(cap, limit);
        for p in 0..self.partitions.len() {
            let outcome = self.solve_partition(p, h);
            if outcome != Outcome::Found {
                return outcome;
            }
        }
        Outcome::Found
    }

    fn solve_partition(&mut self, p: usize, h: usize) -> Outcome {
        let root: Vec<Entry> = self.partitions[p]
            .buffers
            .iter()
            .map(|&i| (0, self.ranks[h][i as usize], i))
            .collect();
        let mut stack = vec![self.frame(root, (0, 0))];
        while let Some(top) = stack.last_mut() {
            if let Some(placed) = top.placed.take() {
                self.undo(placed);
            }
            let Some((off, rank, i)) = next_candidate(top) else {
                stack.pop();
                continue;
            };
            let placed = self.place(i, off);
            top.placed = Some(placed);
            if !self.check(p, off) {
                continue;
            }
            self.work += top.ordering.len() as u64;
            if self.work > self.limit {
                return Outcome::Aborted;
            }
            let child = self.child_ordering(&top.ordering);
            if child.is_empty() {
                return Outcome::Found;
            }
            let frame = self.frame(child, (off, rank));
            stack.push(frame);
        }
        Outcome::Infeasible
    }

    fn frame(&self, ordering: Vec<Entry>, last: (u64, u32)) -> Frame {
        let min_height = ordering
            .iter()
            .map(|&(o, _, i)| o + self.inst.w[i as usize])
            .min()
            .unwrap_or(u64::MAX);
        Frame {
            ordering,
            cursor: 0,
            min_height,
            last,
            placed: None,
        }
    }

    /// The unplaced entries of `parent` with fresh minimum offsets, sorted.
    fn child_ordering(&self, parent: &[Entry]) -> Vec<Entry> {
        let mut child: Vec<Entry> = parent
            .iter()
            .filter(|e| self.offsets[e.2 as usize] == UNPLACED)
            .map(|&(_, r, i)| (self.min_off[i as usize], r, i))
            .collect();
        child.sort_unstable();
        child
    }

    /// Places buffer `i` at `off`, logging every change for [`Solver::undo`].
    fn place(&mut self, i: u32, off: u64) -> (u32, usize, usize) {
        let marks = (i, self.offset_log.len(), self.floor_log.len());
        let iu = i as usize;
        let top = off + self.inst.w[iu];
        self.offsets[iu] = off;
        for k in 0..self.overlaps[iu].len() {
            let j = self.overlaps[iu][k] as usize;
            if self.offsets[j] == UNPLACED && self.min_off[j] < top {
                self.offset_log.push((j as u32, self.min_off[j]));
                self.min_off[j] = top;
            }
        }
        let (a, b) = self.span[iu];
        for s in a..b {
            self.floor_log.push((s as u32, self.floor[s]));
            self.floor[s] = top;
            self.total[s] -= self.inst.w[iu];
        }
        self.raise_floors(marks.1);
        marks
    }

    /// Raises the floor of every section touched by a buffer whose minimum offset changed
    /// (since `from` in the offset log) to the lowest minimum offset of its unplaced buffers.
    fn raise_floors(&mut self, from: usize) {
        self.epoch = self.epoch.wrapping_add(1);
        for k in from..self.offset_log.len() {
            let j = self.offset_log[k].0 as usize;
            let (a, b) = self.span[j];
            for s in a..b {
                if self.stamp[s] == self.epoch {
                    continue;
                }
                self.stamp[s] = self.epoch;
                let lowest = self.members[s]
                    .iter()
                    .map(|&m| m as usize)
                    .filter(|&m| self.offsets[m] == UNPLACED)
                    .map(|m| self.min_off[m])
                    .min();
                if let Some(lowest) = lowest.filter(|&l| l > self.floor[s]) {
                    self.floor_log.push((s as u32, self.floor[s]));
                    self.floor[s] = lowest;
                }
            }
        }
    }

    fn undo(&mut self, (i, offset_mark, floor_mark): (u32, usize, usize)) {
        while self.floor_log.len() > floor_mark {
            let (s, f) = self.floor_log.pop().expect("log longer than mark");
            self.floor[s as usize] = f;
        }
        while self.offset_log.len() > offset_mark {
            let (j, m) = self.offset_log.pop().expect("log longer than mark");
            self.min_off[j as usize] = m;
        }
        let iu = i as usize;
        let (a, b) = self.span[iu];
        for s in a..b {
            self.total[s] += self.inst.w[iu];
        }
        self.offsets[iu] = UNPLACED;
    }

    /// The section bound of the partition after placing a buffer at `off`.
    fn check(&self, p: usize, off: u64) -> bool {
        self.partitions[p]
            .sections
            .clone()
            .all(|s| self.floor[s].max(off) + self.total[s] <= self.cap)
    }
}

/// Advances the frame's cursor to the next candidate allowed by canonical order and
/// dominance.
fn next_candidate(frame: &mut Frame) -> Option<Entry> {
    while frame.cursor < frame.ordering.len() {
        let e = frame.ordering[frame.cursor];
        frame.cursor += 1;
        if e.0 >= frame.min_height {
            // Sorted by offset: every later entry is dominated too.
            frame.cursor = frame.ordering.len();
            return None;
        }
        if (e.0, e.1) >= frame.last {
            return Some(e);
        }
    }
    None
}

/// Splits the sections where no buffer crosses a boundary.
fn partitions(span: &[(usize, usize)], sections: usize) -> Vec<Partition> {
    let mut crossing = vec![0i64; sections + 1];
    for &(a, b) in span.iter().filter(|s| s.1 > s.0) {
        // Boundaries a+1 ..= b-1 are crossed.
        if a + 1 < b {
            crossing[a + 1] += 1;
            crossing[b] -= 1;
        }
    }
    let mut parts: Vec<Partition> = Vec::new();
    let mut start = 0;
    let mut running = 0i64;
    for (k, &delta) in crossing.iter().enumerate().skip(1) {
        running += delta;
        if k == sections || running == 0 {
            parts.push(Partition {
                sections: start..k,
                buffers: Vec::new(),
            });
            start = k;
        }
    }
    for (i, &(a, b)) in span.iter().enumerate() {
        if b > a {
            let p = parts.partition_point(|p| p.sections.end <= a);
            parts[p].buffers.push(i as u32);
        }
    }
    parts.retain(|p| !p.buffers.is_empty());
    parts
}

/// Preorder ranks of the buffers for each heuristic: by the largest section total the
/// buffer sees (T), its section count (C) and its area (A), in three priority orders.
fn preorders(inst: &Instance, span: &[(usize, usize)], total: &[u64]) -> Vec<Vec<u32>> {
    let n = inst.len();
    let feature = |i: usize| {
        let (a, b) = span[i];
        let t = total[a..b].iter().copied().max().unwrap_or(0);
        let c = (b - a) as u64;
        let area = (inst.w[i] as u128) * ((inst.upper[i] - inst.lower[i]) as u128);
        (t, c, area)
    };
    let features: Vec<(u64, u64, u128)> = (0..n).map(feature).collect();
    type Key = fn(&(u64, u64, u128)) -> (u128, u128, u128);
    let keys: [Key; 3] = [
        |f| (f.0 as u128, f.1 as u128, f.2),
        |f| (f.1 as u128, f.2, f.0 as u128),
        |f| (f.0 as u128, f.2, f.1 as u128),
    ];
    keys.iter()
        .map(|key| {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&x, &y| key(&features[y]).cmp(&key(&features[x])).then(x.cmp(&y)));
            let mut rank = vec![0u32; n];
            for (r, &i) in order.iter().enumerate() {
                rank[i] = r as u32;
            }
            rank
        })
        .collect()
}
