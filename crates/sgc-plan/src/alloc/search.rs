//! Exact branch and bound in the spirit of MiniMalloc (Moffitt, ASPLOS 2023), used to
//! improve the heuristics' best arena.
//!
//! # Decision problem
//! "Do the buffers fit in capacity `C`?" Time is compressed into *sections* between
//! consecutive distinct lifetime endpoints; each buffer covers a range of sections. Where no
//! buffer crosses a section boundary the instance splits into independent *partitions*,
//! solved one after the other.
//!
//! # Bottom-up search
//! Any placement can be pushed down until every buffer rests on a time-overlapping buffer
//! or on 0, and such a placement can be built bottom up: every buffer goes in at the
//! lowest *floor* `m` left, the floor never decreasing along a branch. A section's floor is
//! the highest of: the top of the placed buffers there, the floor of the parent node, and
//! the lowest *minimum offset* among the section's unplaced buffers (the highest end among
//! the placed buffers, or raised floors, overlapping the buffer in time). Each node takes a
//! section `s` whose floor is `m` and branches on
//! - which buffer sits at `m` in `s`: one that lives in `s` and whose minimum offset is at
//!   most `m` (so it overlaps nothing placed), largest first, then by preorder rank; or
//! - none: the bottom of `s` stays empty, and its floor rises to the lowest height its
//!   lowest buffer could rest at (the lowest floor above `m` in the sections its buffers
//!   reach, or `m` plus the smallest unplaced size).
//!
//! Every placement consistent with the node falls in exactly one branch, so the search is
//! complete and never visits a placement twice. Among the sections at the floor it takes
//! the one with the fewest candidates (as in exact cover; least slack breaks ties).
//! Pruning:
//! - section inference: in every section, `floor + unplaced sizes <= C`; at the lower
//!   bound most sections have no slack, so any gap fails at once;
//! - every unplaced buffer fits above its minimum offset;
//! - symmetry: buffers with the same lifetime and size are placed in index order;
//! - dynamic decomposition: after each placement the unplaced buffers of the branch split
//!   into groups whose section ranges do not overlap; the groups no longer interact, so
//!   they are solved one after the other, and a group without solution fails the whole
//!   node at once (no other ordering of the other groups is tried).
//!
//! Nodes are cheap: a placement changes a few arrays and logs the old values on a trail,
//! undone on backtrack; "leave empty" loops inside the node (no recursion), so the depth
//! is at most the number of buffers.
//!
//! # Canonical mode
//! Attempts alternate with a second complete branching, MiniMalloc's: buffers are placed
//! in canonical order (offset, preorder rank) non-decreasing, each at its minimum offset,
//! skipping a candidate at or above the lowest end any unplaced buffer could reach
//! (dominance: that buffer could fill the gap below). When a section at the floor has no
//! slack, it branches on that section's bottom buffer instead (exactly one sits there).
//! On instances with a little slack everywhere (the SOMAS lists) it finds the bound much
//! sooner than the bottom-up mode, which spends its steps raising floors.
//!
//! # Restarts
//! Attempts run with Luby work limits (1, 1, 2, 1, 1, 2, 4, ... times `256 n^2`), the
//! canonical and the bottom-up mode in turn, each over the preorders (by time width, area
//! and largest section total, MiniMalloc's "WAT", "TAW" and "TWA") and then seeded random
//! perturbations of them, so one bad early choice does not sink the search. Every attempt
//! is complete: one that ends without a placement proves the capacity infeasible.
//!
//! # Optimisation
//! [`improve`] first asks for the lower bound (half of the budget: a success proves
//! optimality), then bisects between the lowest capacity not yet ruled out and the best
//! arena found, each attempt with half of the work left. Capacities are multiples of the
//! sizes' gcd. The budget counts work (each node costs the number of buffers in its group
//! plus the sections they span, which it scans), never time.

use super::instance::Instance;
use super::Effort;
use std::cmp::Reverse;

const UNPLACED: u64 = u64::MAX;
const NONE: u32 = u32::MAX;

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
    // The search recurses once per placed buffer: give it a stack that fits every depth.
    let stack = (1 << 20) + active * 4096;
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sgc-alloc-search".into())
            .stack_size(stack)
            .spawn_scoped(scope, || optimise(inst, incumbent, arena, effort))
            .ok()?
            .join()
            .ok()?
    })
}

/// The capacity schedule: the bound first, then bisection.
fn optimise(inst: &Instance, incumbent: &[u64], arena: u64, effort: Effort) -> Option<Vec<u64>> {
    let mut solver = Solver::new(inst);
    // Pushed-down placements put every offset, so every arena, on a multiple of the
    // sizes' gcd: only those capacities are worth asking for.
    let g = inst.w.iter().fold(0, |g, &w| gcd(g, w)).max(1);
    let (mut best, mut best_arena) = (incumbent.to_vec(), arena);
    let (mut lo, mut work_left) = (inst.lb, effort.search_work);
    let mut improved = false;
    let mut first = true;
    while best_arena > lo && work_left > 0 {
        let cap = if first {
            lo
        } else {
            lo + (best_arena - lo) / 2 / g * g
        };
        first = false;
        let (outcome, used) = solver.solve(cap, (work_left / 2).max(1));
        work_left = work_left.saturating_sub(used);
        match outcome {
            Outcome::Found => {
                let offsets = solver.offsets.clone();
                best_arena = inst.arena_units(&offsets);
                best = offsets;
                improved = true;
            }
            Outcome::Infeasible | Outcome::Aborted => lo = cap + g,
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

/// A change to undo on backtrack: which array, which index, the old value.
#[derive(Clone, Copy)]
enum Undo {
    Offset(u32),
    MinOff(u32, u64),
    Section(u32, u64, u64),
}

struct Solver<'a> {
    inst: &'a Instance,
    overlaps: Vec<Vec<u32>>,
    /// Section range [first, end) of each buffer.
    span: Vec<(u32, u32)>,
    /// The non-empty buffers of each partition, by first section.
    partitions: Vec<Vec<u32>>,
    /// Preorder rank of each buffer, per heuristic.
    ranks: Vec<Vec<u32>>,
    /// The preorder of the current attempt.
    rank: Vec<u32>,
    /// The branching of the current attempt: bottom up, else canonical.
    bottom_up: bool,
    /// The previous buffer (by index) with the same lifetime and size, or `NONE`.
    twin: Vec<u32>,
    initial_total: Vec<u64>,
    // Search state.
    cap: u64,
    offsets: Vec<u64>,
    min_off: Vec<u64>,
    /// Highest end of the placed buffers in each section.
    floor: Vec<u64>,
    /// Summed size of the unplaced buffers in each section.
    total: Vec<u64>,
    /// Scratch: lowest minimum offset of the unplaced buffers of each section.
    low: Vec<u64>,
    /// Scratch: candidates per section at the floor.
    count: Vec<u32>,
    trail: Vec<Undo>,
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
        let index = |t: u64| times.binary_search(&t).unwrap_or(0) as u32;
        let span: Vec<(u32, u32)> = (0..n)
            .map(|i| {
                if inst.w[i] == 0 {
                    (0, 0)
                } else {
                    (index(inst.lower[i]), index(inst.upper[i]))
                }
            })
            .collect();
        let mut total = vec![0u64; sections];
        for (i, &(a, b)) in span.iter().enumerate() {
            for t in &mut total[a as usize..b as usize] {
                *t += inst.w[i];
            }
        }
        let ranks = preorders(inst, &span, &total);
        Solver {
            inst,
            overlaps: inst.overlap_lists(),
            partitions: partitions(&span, sections),
            twin: twins(inst),
            span,
            rank: ranks[0].clone(),
            bottom_up: true,
            ranks,
            initial_total: total.clone(),
            cap: 0,
            offsets: vec![0; n],
            min_off: vec![0; n],
            floor: vec![0; sections],
            total,
            low: vec![0; sections],
            count: vec![0; sections],
            trail: Vec::new(),
            work: 0,
            limit: 0,
        }
    }

    /// Tries capacity `cap` with round-robin preorders and doubling limits, within
    /// `budget` work. Returns the outcome and the work used; on `Found`, `self.offsets`
    /// holds the placement.
    fn solve(&mut self, cap: u64, budget: u64) -> (Outcome, u64) {
        let n = self.inst.len() as u64;
        let unit = (256 * n * n).max(1);
        let mut used = 0u64;
        for r in 0u64.. {
            // Modes alternate; each mode walks the preorders, then perturbations of them.
            self.bottom_up = r % 2 == 1;
            let k = r / 2;
            let h = (k % self.ranks.len() as u64) as usize;
            self.rank = if k < self.ranks.len() as u64 {
                self.ranks[h].clone()
            } else {
                perturbed(&self.ranks[h], k)
            };
            let this = unit.saturating_mul(luby(r + 1)).min(budget - used);
            let outcome = self.solve_all(cap, this);
            used += self.work.min(this);
            if outcome != Outcome::Aborted || used >= budget {
                return (outcome, used);
            }
        }
        (Outcome::Aborted, used)
    }

    fn reset(&mut self, cap: u64, limit: u64) {
        self.cap = cap;
        for (o, &w) in self.offsets.iter_mut().zip(&self.inst.w) {
            *o = if w == 0 { 0 } else { UNPLACED };
        }
        self.min_off.iter_mut().for_each(|m| *m = 0);
        self.floor.iter_mut().for_each(|f| *f = 0);
        self.total.clone_from(&self.initial_total);
        self.trail.clear();
        self.work = 0;
        self.limit = limit;
    }

    fn solve_all(&mut self, cap: u64, limit: u64) -> Outcome {
        self.reset(cap, limit);
        for p in 0..self.partitions.len() {
            let set = std::mem::take(&mut self.partitions[p]);
            let outcome = self.search(&set, (0, 0));
            self.partitions[p] = set;
            if outcome != Outcome::Found {
                return outcome;
            }
        }
        Outcome::Found
    }

    /// Places the buffers of `set` (unplaced, by first section, one connected group) after
    /// `last` (offset, rank): `last.0` is the lowest offset any of them may take. On `Found`
    /// the placement stays in the state.
    fn search(&mut self, set: &[u32], last: (u64, u32)) -> Outcome {
        if set.is_empty() {
            return Outcome::Found;
        }
        if !self.bottom_up {
            return self.search_canonical(set, last);
        }
        let mark = self.trail.len();
        let mut off = last.0;
        let outcome = loop {
            self.work += set.len() as u64;
            if self.work > self.limit {
                break Outcome::Aborted;
            }
            let Some(m) = self.sections_fit(set, off) else {
                break Outcome::Infeasible;
            };
            let s = self.lowest_section(set, m);
            match self.cover(set, s, m) {
                Outcome::Infeasible => {}
                outcome => break outcome,
            }
            if !self.waste(set, s, m) {
                break Outcome::Infeasible;
            }
            off = m;
        };
        if outcome == Outcome::Infeasible {
            self.undo(mark);
        }
        outcome
    }

    /// The canonical mode: branch on the buffer at the bottom of a tight section at the
    /// floor when there is one, else on the next buffer in canonical order.
    fn search_canonical(&mut self, set: &[u32], last: (u64, u32)) -> Outcome {
        self.work += set.len() as u64;
        if self.work > self.limit {
            return Outcome::Aborted;
        }
        let Some(m) = self.sections_fit(set, last.0) else {
            return Outcome::Infeasible;
        };
        if let Some(s) = self.tight_section(set, m) {
            return self.cover(set, s, m);
        }
        self.canonical(set, last.max((m, 0)))
    }

    /// Branches on the next buffer in canonical order (offset, rank) after `last`, each at
    /// its minimum offset, with dominance pruning.
    fn canonical(&mut self, set: &[u32], last: (u64, u32)) -> Outcome {
        let mut order: Vec<(u64, u32, u32)> = set
            .iter()
            .map(|&i| (self.min_off[i as usize], self.rank[i as usize], i))
            .collect();
        order.sort_unstable();
        let min_height = order
            .iter()
            .map(|&(o, _, i)| o + self.inst.w[i as usize])
            .min()
            .unwrap_or(u64::MAX);
        for &(off, rank, i) in &order {
            if off >= min_height {
                break;
            }
            if (off, rank) < last || !self.twin_ok(i) {
                continue;
            }
            if let Some(outcome) = self.branch(set, i, off, (off, rank)) {
                return outcome;
            }
        }
        Outcome::Infeasible
    }

    /// Among the sections of `set` whose floor is `m` and whose unplaced buffers fill them
    /// to the capacity, the one with the fewest buffers that can sit at `m`.
    fn tight_section(&mut self, set: &[u32], m: u64) -> Option<usize> {
        let (lo, hi) = self.range(set);
        let mut any = false;
        for s in lo..hi {
            let tight = self.total[s] > 0 && self.low[s] == m && m + self.total[s] == self.cap;
            self.count[s] = if tight { 0 } else { u32::MAX };
            any |= tight;
        }
        if !any {
            return None;
        }
        self.count_candidates(set, m);
        (lo..hi).min_by_key(|&s| (self.count[s], s))
    }

    /// Adds to `count` of each section the buffers of `set` that can sit at `m` there.
    fn count_candidates(&mut self, set: &[u32], m: u64) {
        for &j in set {
            if self.min_off[j as usize] <= m {
                let (a, b) = self.span[j as usize];
                self.work += u64::from(b - a);
                for c in &mut self.count[a as usize..b as usize] {
                    *c = c.saturating_add(1);
                }
            }
        }
    }

    /// Declares the bottom of section `s` (at the lowest floor `m`) empty: raises its floor
    /// to the lowest height its lowest buffer could rest at, the lowest floor above `m`
    /// among the sections its buffers reach, or `m` plus the smallest unplaced size.
    /// False when the section no longer fits.
    fn waste(&mut self, set: &[u32], s: usize, m: u64) -> bool {
        let mut h = set
            .iter()
            .map(|&j| m + self.inst.w[j as usize])
            .min()
            .unwrap_or(u64::MAX);
        let (mut lo, mut hi) = (s, s + 1);
        for &j in set.iter().filter(|&&j| self.lives_in(j, s)) {
            let (a, b) = self.span[j as usize];
            lo = lo.min(a as usize);
            hi = hi.max(b as usize);
        }
        for t in lo..hi {
            if t != s && self.total[t] > 0 && self.low[t] > m {
                h = h.min(self.low[t]);
            }
        }
        if h + self.total[s] > self.cap {
            return false;
        }
        self.trail
            .push(Undo::Section(s as u32, self.floor[s], self.total[s]));
        self.floor[s] = h;
        for &j in set {
            let ju = j as usize;
            if self.lives_in(j, s) && self.min_off[ju] < h {
                self.trail.push(Undo::MinOff(j, self.min_off[ju]));
                self.min_off[ju] = h;
            }
        }
        true
    }

    /// Among the sections of `set` on the lowest floor `m`, the one with the fewest
    /// buffers that can sit at `m` (ties: least slack, then earliest).
    fn lowest_section(&mut self, set: &[u32], m: u64) -> usize {
        let (lo, hi) = self.range(set);
        for s in lo..hi {
            let at_floor = self.total[s] > 0 && self.low[s] == m;
            self.count[s] = if at_floor { 0 } else { u32::MAX };
        }
        self.count_candidates(set, m);
        (lo..hi)
            .min_by_key(|&s| {
                (
                    self.count[s],
                    self.cap - m - self.total[s].min(self.cap - m),
                    s,
                )
            })
            .unwrap_or(lo)
    }

    /// Branches on the buffer at the bottom of section `s`, whose floor is `m`, the lowest
    /// offset any unplaced buffer can take.
    fn cover(&mut self, set: &[u32], s: usize, m: u64) -> Outcome {
        let mut candidates: Vec<(Reverse<u64>, u32, u32)> = set
            .iter()
            .filter(|&&j| self.lives_in(j, s) && self.min_off[j as usize] <= m && self.twin_ok(j))
            .map(|&j| (Reverse(self.inst.w[j as usize]), self.rank[j as usize], j))
            .collect();
        candidates.sort_unstable();
        for (_, _, j) in candidates {
            if let Some(outcome) = self.branch(set, j, m, (m, 0)) {
                return outcome;
            }
        }
        Outcome::Infeasible
    }

    /// Places `i` at `off` and solves the rest of `set` after `last`. `Some` ends the node
    /// (found, or out of work); `None` means this branch failed and was undone.
    fn branch(&mut self, set: &[u32], i: u32, off: u64, last: (u64, u32)) -> Option<Outcome> {
        let mark = self.trail.len();
        if self.place(i, off) {
            let rest: Vec<u32> = set.iter().copied().filter(|&j| j != i).collect();
            match self.search_groups(&rest, last) {
                Outcome::Infeasible => {}
                outcome => return Some(outcome),
            }
        }
        self.undo(mark);
        None
    }

    fn lives_in(&self, j: u32, s: usize) -> bool {
        let (a, b) = self.span[j as usize];
        (a as usize..b as usize).contains(&s)
    }

    /// Twins go in index order: `i` may be placed once its previous twin is.
    fn twin_ok(&self, i: u32) -> bool {
        let twin = self.twin[i as usize];
        twin == NONE || self.offsets[twin as usize] != UNPLACED
    }

    /// The section range [lo, hi) of `set`.
    fn range(&self, set: &[u32]) -> (usize, usize) {
        let lo = self.span[set[0] as usize].0 as usize;
        let hi = set
            .iter()
            .map(|&j| self.span[j as usize].1)
            .max()
            .unwrap_or(0) as usize;
        (lo, hi)
    }

    /// Splits `rest` (by first section) into groups with disjoint section ranges and
    /// solves each; the first group without solution decides.
    fn search_groups(&mut self, rest: &[u32], last: (u64, u32)) -> Outcome {
        let mut start = 0;
        let mut end_section = 0;
        for (k, &j) in rest.iter().enumerate() {
            let (a, b) = self.span[j as usize];
            if k > start && a >= end_section {
                let outcome = self.search(&rest[start..k], last);
                if outcome != Outcome::Found {
                    return outcome;
                }
                start = k;
            }
            end_section = if k == start { b } else { end_section.max(b) };
        }
        self.search(&rest[start..], last)
    }

    /// The section bound over the sections of `set`, whose buffers all go at `off` or
    /// above. Leaves each section's floor in `low` and returns the lowest, below which no
    /// unplaced buffer can go; `None` when a section overflows.
    fn sections_fit(&mut self, set: &[u32], off: u64) -> Option<u64> {
        let (lo, hi) = self.range(set);
        self.low[lo..hi].fill(u64::MAX);
        for &j in set {
            let (a, b) = self.span[j as usize];
            let m = self.min_off[j as usize];
            self.work += u64::from(b - a);
            if m.max(off) + self.inst.w[j as usize] > self.cap {
                return None;
            }
            for l in &mut self.low[a as usize..b as usize] {
                *l = (*l).min(m);
            }
        }
        let mut lowest = u64::MAX;
        for s in lo..hi {
            if self.total[s] == 0 {
                continue;
            }
            let floor = self.floor[s].max(self.low[s]).max(off);
            if floor + self.total[s] > self.cap {
                return None;
            }
            self.low[s] = floor;
            lowest = lowest.min(floor);
        }
        Some(lowest)
    }

    /// Places buffer `i` at `off`, logging every change. False when a section of `i`
    /// overflows.
    fn place(&mut self, i: u32, off: u64) -> bool {
        let iu = i as usize;
        let w = self.inst.w[iu];
        let top = off + w;
        self.trail.push(Undo::Offset(i));
        self.offsets[iu] = off;
        for k in 0..self.overlaps[iu].len() {
            let j = self.overlaps[iu][k] as usize;
            if self.offsets[j] == UNPLACED && self.min_off[j] < top {
                self.trail.push(Undo::MinOff(j as u32, self.min_off[j]));
                self.min_off[j] = top;
            }
        }
        let (a, b) = self.span[iu];
        let mut fits = true;
        for s in a as usize..b as usize {
            self.trail
                .push(Undo::Section(s as u32, self.floor[s], self.total[s]));
            self.floor[s] = top;
            self.total[s] -= w;
            fits &= top + self.total[s] <= self.cap;
        }
        fits
    }

    fn undo(&mut self, mark: usize) {
        while self.trail.len() > mark {
            match self.trail.pop().expect("trail longer than mark") {
                Undo::Offset(i) => self.offsets[i as usize] = UNPLACED,
                Undo::MinOff(j, m) => self.min_off[j as usize] = m,
                Undo::Section(s, f, t) => {
                    self.floor[s as usize] = f;
                    self.total[s as usize] = t;
                }
            }
        }
    }
}

/// Splits the sections where no buffer crosses a boundary; each partition lists its
/// non-empty buffers by first section.
fn partitions(span: &[(u32, u32)], sections: usize) -> Vec<Vec<u32>> {
    let mut order: Vec<u32> = (0..span.len() as u32)
        .filter(|&i| span[i as usize].1 > span[i as usize].0)
        .collect();
    order.sort_by_key(|&i| (span[i as usize].0, i));
    let mut parts: Vec<Vec<u32>> = Vec::new();
    let mut end = 0;
    for i in order {
        let (a, b) = span[i as usize];
        match parts.last_mut() {
            Some(part) if a < end => part.push(i),
            _ => parts.push(vec![i]),
        }
        end = end.max(b);
    }
    debug_assert!(end as usize <= sections);
    parts
}

/// For each buffer, the previous buffer (by index) with the same lifetime and size.
fn twins(inst: &Instance) -> Vec<u32> {
    let n = inst.len();
    let mut order: Vec<usize> = (0..n).collect();
    let key = |i: usize| (inst.lower[i], inst.upper[i], inst.w[i]);
    order.sort_by_key(|&i| (key(i), i));
    let mut twin = vec![NONE; n];
    for pair in order.windows(2) {
        if key(pair[0]) == key(pair[1]) && inst.w[pair[1]] > 0 {
            twin[pair[1]] = pair[0] as u32;
        }
    }
    twin
}

/// Preorder ranks of the buffers for each heuristic: by the largest section total the
/// buffer sees (T), its time width (W) and its area (A), in three priority orders.
/// Ties go to the lower index, so twins rank in index order.
fn preorders(inst: &Instance, span: &[(u32, u32)], total: &[u64]) -> Vec<Vec<u32>> {
    let n = inst.len();
    let feature = |i: usize| {
        let (a, b) = (span[i].0 as usize, span[i].1 as usize);
        let t = total[a..b].iter().copied().max().unwrap_or(0);
        let c = inst.upper[i] - inst.lower[i];
        let area = (inst.w[i] as u128) * ((inst.upper[i] - inst.lower[i]) as u128);
        (t, c, area)
    };
    let features: Vec<(u64, u64, u128)> = (0..n).map(feature).collect();
    type Key = fn(&(u64, u64, u128)) -> (u128, u128, u128);
    let keys: [Key; 3] = [
        |f| (f.1 as u128, f.2, f.0 as u128),
        |f| (f.0 as u128, f.2, f.1 as u128),
        |f| (f.0 as u128, f.1 as u128, f.2),
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

/// The Luby restart sequence 1, 1, 2, 1, 1, 2, 4, ... (1-based).
fn luby(mut i: u64) -> u64 {
    loop {
        let mut k = 1u32;
        while (1u64 << k) - 1 < i {
            k += 1;
        }
        if (1u64 << k) - 1 == i {
            return 1u64 << (k - 1);
        }
        i -= (1u64 << (k - 1)) - 1;
    }
}

/// `rank` with every buffer moved by a pseudo-random amount (SplitMix64 seeded by
/// `seed`): a different but related preorder for a restart.
fn perturbed(rank: &[u32], seed: u64) -> Vec<u32> {
    let n = rank.len() as u64;
    let spread = (n / 8).max(2);
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<(u64, usize)> = rank
        .iter()
        .enumerate()
        .map(|(i, &r)| (r as u64 + next() % spread, i))
        .collect();
    order.sort_unstable();
    let mut out = vec![0u32; rank.len()];
    for (r, &(_, i)) in order.iter().enumerate() {
        out[i] = r as u32;
    }
    out
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
