//! One decision attempt: "do the buffers fit in capacity `cap`?", answered by a depth-first
//! search over canonical placements within a work limit (see the parent module's docs).

use super::model::{Id, Model, NO_TWIN};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

const UNPLACED: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Every buffer is placed; [`Dfs::solution`] holds the offsets.
    Found,
    /// The search space is exhausted: nothing fits in the capacity.
    Infeasible,
    /// The work limit (or the wall-clock cap) ran out.
    Aborted,
}

/// The static preorders of MiniMalloc, each a priority of three features compared
/// largest first: lifetime length (W), area (A) and the largest section total (T).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Preorder {
    Wat,
    Taw,
    Twa,
}

impl Preorder {
    pub const ALL: [Preorder; 3] = [Preorder::Wat, Preorder::Taw, Preorder::Twa];
}

/// A change to undo on backtrack: which array, which index, the old value(s).
#[derive(Clone, Copy)]
enum Undo {
    Offset(Id),
    MinOff(Id, u64),
    Section(u32, u64, u64),
    Floor(u32, u64),
}

/// A buffer of a node's ordering: its minimum offset when the ordering was made, its
/// preorder rank, its index. Orderings are sorted by (offset, rank).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    off: u64,
    rank: u32,
    id: Id,
}

pub(super) struct Dfs<'m> {
    m: &'m Model,
    cap: u64,
    preorder: Preorder,
    offsets: Vec<u64>,
    /// The offsets of the last successful attempt.
    pub solution: Vec<u64>,
    /// Lowest offset each unplaced buffer can take: the highest end among the placed
    /// buffers that overlap it in time.
    min_off: Vec<u64>,
    /// Per section: a height no unplaced buffer of the section can go below.
    floor: Vec<u64>,
    /// Per section: the summed size of its unplaced buffers.
    total: Vec<u64>,
    initial_total: Vec<u64>,
    /// Per section boundary: the unplaced buffers living across it.
    cuts: Vec<u32>,
    initial_cuts: Vec<u32>,
    trail: Vec<Undo>,
    /// The orderings of the nodes on the current branch, one after the other.
    stack: Vec<Entry>,
    /// Scratch list of the entries whose minimum offset rose.
    raised: Vec<Entry>,
    /// The preordered buffers of each partition and the work of ordering them, per
    /// preorder (they do not depend on the capacity), made on first use.
    roots: Vec<Option<(Vec<Vec<Entry>>, u64)>>,
    /// Work done by this attempt (see [`Dfs::attempt`]).
    pub work: u64,
    limit: u64,
    nodes: u64,
    deadline: Option<Instant>,
    /// Set once the deadline passed; every later attempt aborts at once.
    pub timed_out: bool,
    /// The index of the earliest attempt that decided, shared by the threads of one
    /// decision, and this attempt's index: an attempt after the decided one stops.
    watched: Option<(Arc<AtomicUsize>, usize)>,
    /// Set when this attempt stopped because an earlier one decided.
    pub cancelled: bool,
}

impl<'m> Dfs<'m> {
    pub fn new(m: &'m Model, deadline: Option<Instant>) -> Self {
        let mut total = vec![0u64; m.sections];
        for (i, &(a, b)) in m.span.iter().enumerate() {
            for t in &mut total[a as usize..b as usize] {
                *t += m.w[i];
            }
        }
        Dfs {
            m,
            cap: 0,
            preorder: Preorder::Wat,
            offsets: vec![0; m.len()],
            solution: vec![0; m.len()],
            min_off: vec![0; m.len()],
            floor: vec![0; m.sections],
            initial_total: total.clone(),
            total,
            cuts: m.cuts(),
            initial_cuts: m.cuts(),
            trail: Vec::new(),
            stack: Vec::new(),
            raised: Vec::new(),
            roots: vec![None; Preorder::ALL.len()],
            work: 0,
            limit: 0,
            nodes: 0,
            deadline,
            timed_out: false,
            watched: None,
            cancelled: false,
        }
    }

    /// Tries to place every buffer in `cap` units, ordering by `preorder`, within `limit`
    /// work. Work counts the entries scanned: buffers ordered at a node, overlaps, sections
    /// and section members visited by a placement, and sections checked; with
    /// `charge_roots`, also the preordering of the partitions (made once per preorder and
    /// kept, so the decision charges it to the first attempt of each preorder, whichever
    /// searcher runs it).
    pub fn attempt(
        &mut self,
        cap: u64,
        preorder: Preorder,
        limit: u64,
        charge_roots: bool,
    ) -> Outcome {
        self.reset(cap, preorder, limit);
        if self.exceeds(cap) {
            return Outcome::Infeasible;
        }
        let m = self.m;
        let p = preorder as usize;
        if self.roots[p].is_none() {
            let mut work = 0;
            let roots = m
                .partitions
                .iter()
                .map(|g| {
                    let (order, w) = self.preorder_with_work(&g.buffers);
                    work += w;
                    order
                })
                .collect();
            self.roots[p] = Some((roots, work));
        }
        let (roots, work) = self.roots[p].take().expect("made above");
        if charge_roots {
            self.work += work;
        }
        let mut outcome = Outcome::Found;
        for (g, order) in m.partitions.iter().zip(&roots) {
            outcome = self.solve_group(order, g.lo, g.hi);
            if outcome != Outcome::Found {
                break;
            }
        }
        self.roots[p] = Some((roots, work));
        outcome
    }

    /// Whether some section alone holds more than `cap` units: every attempt at `cap`
    /// fails at once, before preordering anything.
    pub fn exceeds(&self, cap: u64) -> bool {
        self.initial_total.iter().any(|&t| t > cap)
    }

    pub fn model(&self) -> &'m Model {
        self.m
    }

    /// Makes the next attempts, as attempt `index` of a decision, stop once `decided`
    /// (the earliest attempt that decided) is below it; `None`: never.
    pub fn watch(&mut self, watched: Option<(Arc<AtomicUsize>, usize)>) {
        self.watched = watched;
    }

    fn reset(&mut self, cap: u64, preorder: Preorder, limit: u64) {
        self.cap = cap;
        self.preorder = preorder;
        for ((o, s), &w) in self
            .offsets
            .iter_mut()
            .zip(&mut self.solution)
            .zip(&self.m.w)
        {
            *o = if w == 0 { 0 } else { UNPLACED };
            *s = 0;
        }
        self.min_off.fill(0);
        self.floor.fill(0);
        self.total.clone_from(&self.initial_total);
        self.cuts.clone_from(&self.initial_cuts);
        self.trail.clear();
        self.stack.clear();
        self.work = self.setup_work();
        self.nodes = 0;
        self.limit = limit;
        self.cancelled = false;
    }

    /// Solves one independent group (buffers `set` over sections `[lo, hi)`) from scratch:
    /// a fresh preorder over the group, then the search.
    fn subsolve(&mut self, set: &[Id], lo: u32, hi: u32) -> Outcome {
        let order = self.preordered(set);
        self.solve_group(&order, lo, hi)
    }

    /// Searches a group given in preorder, from its current minimum offsets.
    fn solve_group(&mut self, preordered: &[Entry], lo: u32, hi: u32) -> Outcome {
        let base = self.stack.len();
        for &e in preordered {
            let off = self.min_off[e.id as usize];
            self.stack.push(Entry { off, ..e });
        }
        self.stack[base..].sort_unstable();
        let outcome = self.node(base..self.stack.len(), lo as usize, hi as usize, (0, 0));
        self.stack.truncate(base);
        outcome
    }

    /// `set` with its ranks in the preorder: largest features first, then by index.
    fn preordered(&mut self, set: &[Id]) -> Vec<Entry> {
        let (order, work) = self.preorder_with_work(set);
        self.work += work;
        order
    }

    /// [`Dfs::preordered`], and its work without counting it.
    fn preorder_with_work(&self, set: &[Id]) -> (Vec<Entry>, u64) {
        let m = self.m;
        let mut spans = 0;
        let mut key = |i: Id| {
            let i = i as usize;
            let (a, b) = m.span[i];
            spans += (b - a) as u64;
            let t = self.total[a as usize..b as usize].iter().max().copied();
            let (t, wd, ar) = (t.unwrap_or(0) as u128, m.width[i] as u128, m.area[i]);
            match self.preorder {
                Preorder::Wat => (wd, ar, t),
                Preorder::Taw => (t, ar, wd),
                Preorder::Twa => (t, wd, ar),
            }
        };
        let mut keyed: Vec<((u128, u128, u128), Id)> = set.iter().map(|&i| (key(i), i)).collect();
        keyed.sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        let work = spans + set.len() as u64;
        let entry = |(r, &(_, id)): (usize, &(_, Id))| Entry {
            off: 0,
            rank: r as u32,
            id,
        };
        (keyed.iter().enumerate().map(entry).collect(), work)
    }

    /// The work of resetting the state for an attempt: one pass over the buffers and
    /// the sections.
    pub fn setup_work(&self) -> u64 {
        (self.m.len() + self.m.sections) as u64
    }

    fn out_of_work(&mut self) -> bool {
        self.nodes += 1;
        if self.nodes % 256 == 0 {
            if let Some(d) = self.deadline {
                self.timed_out |= Instant::now() >= d;
            }
            if let Some((decided, index)) = &self.watched {
                self.cancelled |= decided.load(Ordering::Relaxed) < *index;
            }
        }
        self.work > self.limit || self.timed_out || self.cancelled
    }

    /// A search node: the unplaced buffers of the ordering `from` (a stack range) in
    /// canonical order (minimum offset, rank); each that may come after `last` is placed
    /// at its minimum offset in turn.
    fn node(&mut self, from: Range<usize>, lo: usize, hi: usize, last: (u64, u32)) -> Outcome {
        self.work += (from.len() + hi - lo) as u64;
        if self.out_of_work() {
            return Outcome::Aborted;
        }
        let base = self.stack.len();
        self.reorder(from);
        let here = base..self.stack.len();
        if here.is_empty() {
            return Outcome::Found;
        }
        let w = &self.m.w[..];
        let min_height = self.stack[here.clone()]
            .iter()
            .map(|e| e.off + w[e.id as usize])
            .min()
            .unwrap_or(u64::MAX);
        // Every unplaced buffer goes at or above the next offset, so a section holding
        // `most` unplaced units needs `off + most <= cap`.
        let most = self.total[lo..hi].iter().copied().max().unwrap_or(0);
        let mut outcome = Outcome::Infeasible;
        for k in here.clone() {
            let Entry { off, rank, id } = self.stack[k];
            // Dominance: a buffer ending at or below `off` could fill the gap under it.
            if off >= min_height || off + most > self.cap {
                break;
            }
            if (off, rank) < last || !self.twin_ok(id) {
                continue;
            }
            let mark = self.trail.len();
            let (fits, hatless) = self.place(id, off);
            if fits {
                outcome = self.descend(here.clone(), lo, hi, (off, rank), id);
            }
            self.undo(mark);
            if outcome == Outcome::Found {
                self.solution[id as usize] = off;
            }
            // A buffer overlapping no unplaced one changes nothing for the others: if the
            // rest fails with it placed, it fails whatever goes first.
            if outcome != Outcome::Infeasible || hatless {
                break;
            }
        }
        self.stack.truncate(base);
        outcome
    }

    /// Pushes the unplaced entries of `from` with their current minimum offsets, sorted:
    /// the entries whose offset did not change keep their order, the raised ones (all
    /// raised by the last placement) are sorted apart and merged in.
    fn reorder(&mut self, from: Range<usize>) {
        let base = self.stack.len();
        self.raised.clear();
        for k in from {
            let e = self.stack[k];
            let i = e.id as usize;
            if self.offsets[i] != UNPLACED {
                continue;
            }
            match self.min_off[i] {
                off if off == e.off => self.stack.push(e),
                off => self.raised.push(Entry { off, ..e }),
            }
        }
        self.raised.sort_unstable();
        // Merge from the back: the kept entries move up to make room.
        let kept = self.stack.len() - base;
        let mut k = self.stack.len() + self.raised.len();
        self.stack.resize(
            k,
            Entry {
                off: 0,
                rank: 0,
                id: 0,
            },
        );
        let (mut i, mut j) = (base + kept, self.raised.len());
        while j > 0 {
            k -= 1;
            if i > base && self.stack[i - 1] > self.raised[j - 1] {
                i -= 1;
                self.stack[k] = self.stack[i];
            } else {
                j -= 1;
                self.stack[k] = self.raised[j];
            }
        }
    }

    /// Twins go in index order: `i` may be placed once its previous twin is.
    fn twin_ok(&self, i: Id) -> bool {
        let t = self.m.twin[i as usize];
        t == NO_TWIN || self.offsets[t as usize] != UNPLACED
    }

    /// After placing `i`: splits the rest where no unplaced buffer crosses a section
    /// boundary any more (dynamic decomposition), else goes on with the same order.
    fn descend(
        &mut self,
        next: Range<usize>,
        lo: usize,
        hi: usize,
        last: (u64, u32),
        i: Id,
    ) -> Outcome {
        let (a, b) = self.m.span[i as usize];
        let inner = a as usize..(b as usize).saturating_sub(1);
        let mut cut_at: Vec<usize> = Vec::new();
        for s in inner.clone() {
            self.cuts[s] -= 1;
            if self.cuts[s] == 0 {
                cut_at.push(s + 1);
            }
        }
        let outcome = match cut_at.is_empty() {
            true => self.node(next, lo, hi, last),
            false => self.split(next, lo, hi, &cut_at),
        };
        for s in inner {
            self.cuts[s] += 1;
        }
        outcome
    }

    /// Solves the unplaced buffers of `next` as independent groups between the cut
    /// points; the first group without a solution decides.
    fn split(&mut self, next: Range<usize>, lo: usize, hi: usize, cut_at: &[usize]) -> Outcome {
        let mut groups: Vec<Vec<Id>> = vec![Vec::new(); cut_at.len() + 1];
        let next = &self.stack[next];
        for e in next
            .iter()
            .filter(|e| self.offsets[e.id as usize] == UNPLACED)
        {
            let a = self.m.span[e.id as usize].0 as usize;
            groups[cut_at.partition_point(|&c| c <= a)].push(e.id);
        }
        for (k, group) in groups.iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            let glo = if k == 0 { lo } else { cut_at[k - 1] };
            let ghi = cut_at.get(k).copied().unwrap_or(hi);
            let outcome = self.subsolve(group, glo as u32, ghi as u32);
            if outcome != Outcome::Found {
                return outcome;
            }
        }
        Outcome::Found
    }

    /// Places `i` at `off`, logging every change on the trail. Returns (fits, hatless):
    /// fits when every buffer `i` lifted still fits under the capacity and every section
    /// whose floor rose still holds its unplaced buffers (the other sections are covered
    /// by the node's `off + most` test); hatless when no unplaced buffer overlaps `i`.
    fn place(&mut self, i: Id, off: u64) -> (bool, bool) {
        let m = self.m;
        let iu = i as usize;
        let top = off + m.w[iu];
        self.trail.push(Undo::Offset(i));
        self.offsets[iu] = off;
        let (a, b) = m.span[iu];
        let (mut ra, mut rb) = (a, b);
        let (mut fits, mut hatless) = (true, true);
        let overlaps = m.overlaps.row(iu);
        for &j in overlaps {
            let ju = j as usize;
            if self.offsets[ju] != UNPLACED {
                continue;
            }
            hatless = false;
            if self.min_off[ju] < top {
                self.trail.push(Undo::MinOff(j, self.min_off[ju]));
                self.min_off[ju] = top;
                fits &= top + m.w[ju] <= self.cap;
                ra = ra.min(m.span[ju].0);
                rb = rb.max(m.span[ju].1);
            }
        }
        self.work += (overlaps.len() + (b - a) as usize) as u64;
        for s in a as usize..b as usize {
            self.trail
                .push(Undo::Section(s as u32, self.floor[s], self.total[s]));
            self.floor[s] = top;
            self.total[s] -= m.w[iu];
        }
        // The lifted buffers' sections (one interval: each lifted buffer overlaps `i`).
        for s in ra as usize..rb as usize {
            if !fits {
                break;
            }
            if self.floor[s] < top && self.total[s] > 0 {
                fits = self.raise_floor(s, off);
            }
        }
        (fits, hatless)
    }

    /// Raises the floor of section `s` to the lowest minimum offset of its unplaced
    /// buffers (MiniMalloc's "unallocated floor"); false when they no longer fit above it
    /// (and above `off`, where they all go).
    fn raise_floor(&mut self, s: usize, off: u64) -> bool {
        let f = self.floor[s];
        let members = self.m.members.row(s);
        self.work += members.len() as u64;
        let mut low = u64::MAX;
        for &j in members {
            let ju = j as usize;
            if self.offsets[ju] == UNPLACED {
                low = low.min(self.min_off[ju]);
                if low <= f {
                    return true;
                }
            }
        }
        if low == u64::MAX {
            return true;
        }
        self.trail.push(Undo::Floor(s as u32, f));
        self.floor[s] = low;
        low.max(off) + self.total[s] <= self.cap
    }

    fn undo(&mut self, mark: usize) {
        while self.trail.len() > mark {
            match self.trail.pop().expect("trail longer than mark") {
                Undo::Offset(i) => self.offsets[i as usize] = UNPLACED,
                Undo::MinOff(j, o) => self.min_off[j as usize] = o,
                Undo::Section(s, f, t) => {
                    self.floor[s as usize] = f;
                    self.total[s as usize] = t;
                }
                Undo::Floor(s, f) => self.floor[s as usize] = f,
            }
        }
    }
}
