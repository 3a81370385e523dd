//! Exact search for a smaller arena: MiniMalloc's method (Moffitt, ASPLOS 2023), written
//! afresh, used to improve the best heuristic placement.
//!
//! # Decision problem
//! "Do the buffers fit in capacity `C`?" Time is cut into *sections*, one per distinct end
//! time (the moment just before it, when a maximal set of buffers is alive); each buffer
//! lives in a contiguous range of sections. Where no buffer crosses a section boundary the
//! instance splits into independent *partitions*, solved one after the other.
//!
//! # Canonical placements
//! Any placement can be pushed down until every buffer rests on a time-overlapping buffer
//! or on 0; such a placement is built by placing buffers in *canonical order* (offset,
//! preorder rank), each at its *minimum offset* (the highest end among the placed buffers
//! that overlap it in time). A search node orders the unplaced buffers by (minimum offset,
//! rank) and branches on which comes next, among those after the last placed one (so each
//! placement is built once). Pruning (MiniMalloc's rules):
//! - *dominance*: a candidate at or above the lowest end any unplaced buffer could reach is
//!   skipped (that buffer could fill the gap below it);
//! - *section inference*: in every section the unplaced buffers are alive together, so they
//!   stack above the section's floor: `max(floor, offset) + unplaced sizes <= C`; the floor
//!   is the top of the buffers placed there, raised to the lowest minimum offset of the
//!   unplaced ones when a placement lifts those. Offsets never decrease along a branch, so
//!   the part `offset + unplaced sizes <= C` is one test per node against the fullest
//!   section, ending the node at the first candidate too high (candidates come by offset);
//!   after a placement only the sections whose floor rose are checked again;
//! - every unplaced buffer must fit above its minimum offset;
//! - *hatless pruning*: when the buffer just tried overlaps no unplaced buffer, placing it
//!   changed nothing for the others, so if the rest failed no other candidate can succeed;
//! - *symmetry*: buffers with the same lifetime and size go in index order;
//! - *dynamic decomposition*: once no unplaced buffer crosses a section boundary, the two
//!   sides are independent groups, each solved with a fresh canonical order; the first
//!   group without a solution fails the node.
//!
//! A node costs little: a placement updates a few arrays and logs their old values on a
//! trail, undone on backtrack.
//!
//! # Restarts
//! A preorder ranks the buffers by three features compared largest first: lifetime length
//! (W), area (A) and the largest section total it sees (T). The attempts go round robin
//! over MiniMalloc's three preorders, WAT, TAW and TWA, with a work limit that starts at
//! eight passes over the buffers and sections and doubles every round, so one bad early
//! choice does not sink the search. Every attempt is complete: one that ends without a
//! placement proves the capacity infeasible.
//!
//! # Optimisation and budgets
//! [`improve`] starts from the best heuristic arena (the warm start) and asks for the
//! lower bound first, with half of the budget (success proves optimality; most real and
//! challenging instances are packed at their bound). Then come passes of bisection between
//! the lowest capacity not ruled out and the best arena found, each attempt with at most an
//! eighth of the budget; an attempt that runs out of work counts as a failure for its pass
//! only, so the next pass (with twice the share if the last one changed nothing) asks for
//! other capacities below it: how hard a capacity is does not grow smoothly as it
//! shrinks. Capacities are multiples of the sizes' gcd (a pushed-down placement's arena is
//! one).
//!
//! The budget counts work: entries scanned (see [`dfs::Dfs::attempt`]), building the
//! model (its overlap and member lists) included, never time, so results do not depend on
//! the machine (about 10^8 to 10^9 work a second). A list whose overlaps alone exceed the
//! budget is not searched. [`Effort::time_cap`] is a safety net only, and the summary says
//! when it, not the work budget, ended the search.

mod dfs;
mod model;

use super::instance::Instance;
use super::{Effort, SearchStop, SearchSummary};
use dfs::{Dfs, Outcome, Preorder};
use model::Model;
use std::time::Instant;

/// The most overlap entries (both directions) the search's model may hold.
const MAX_LISTED: u64 = 100_000_000;

/// What [`improve`] returns: a better placement (units) if one was found, and a summary.
pub(crate) struct SearchRun {
    pub offsets: Option<Vec<u64>>,
    pub summary: SearchSummary,
}

/// Searches for a placement with an arena below `arena` (units): the best heuristic's.
pub(crate) fn improve(inst: &Instance, arena: u64, effort: Effort) -> SearchRun {
    let active = inst.w.iter().filter(|&&w| w > 0).count();
    let skip = |stop| SearchRun {
        offsets: None,
        summary: SearchSummary {
            stop,
            work: 0,
            budget: effort.search_work,
            proven_bound: inst.lb * inst.align,
        },
    };
    if arena <= inst.lb {
        return skip(SearchStop::AtLowerBound);
    }
    if effort.search_work == 0 {
        return skip(SearchStop::Off);
    }
    // Listing the overlaps both ways is part of the work: skip what the budget cannot
    // even build, or what would take more than `MAX_LISTED` entries (400 MB) to hold.
    let listed = 2 * super::greedy::overlapping_pairs(inst);
    if active > effort.search_max_buffers || listed > effort.search_work.min(MAX_LISTED) {
        return skip(SearchStop::TooLarge);
    }
    // The search recurses once per placed buffer: give it a stack that fits every depth.
    let stack = (1 << 20) + active * 1024;
    let run = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sgc-alloc-search".into())
            .stack_size(stack)
            .spawn_scoped(scope, || optimise(inst, arena, effort))
            .ok()?
            .join()
            .ok()
    });
    run.unwrap_or_else(|| skip(SearchStop::Off))
}

/// The capacity schedule: the lower bound first, then passes of bisection.
fn optimise(inst: &Instance, arena: u64, effort: Effort) -> SearchRun {
    let model = Model::new(inst);
    let deadline = effort.time_cap.map(|d| Instant::now() + d);
    let mut s = Schedule {
        dfs: Dfs::new(&model, deadline),
        g: inst.w.iter().fold(0, |g, &w| gcd(g, w)).max(1),
        best: None,
        best_arena: arena,
        proven: 0,
        work_left: effort.search_work.saturating_sub(model.build_work()),
    };
    // A pushed-down placement's offsets, so its arena, are multiples of the sizes' gcd.
    s.proven = inst.lb.div_ceil(s.g) * s.g;
    if s.open() {
        s.ask(s.proven, s.work_left / 2);
    }
    let mut share = effort.search_work / 8;
    while s.open() {
        let before = (s.best_arena, s.proven);
        s.bisect(share);
        if (s.best_arena, s.proven) == before {
            share = share.saturating_mul(2);
        }
    }
    let stop = match () {
        _ if s.proven >= s.best_arena => SearchStop::Optimal,
        _ if s.dfs.timed_out => SearchStop::TimeCap,
        _ => SearchStop::WorkBudget,
    };
    SearchRun {
        offsets: s.best,
        summary: SearchSummary {
            stop,
            work: effort.search_work - s.work_left,
            budget: effort.search_work,
            proven_bound: s.proven.min(s.best_arena) * inst.align,
        },
    }
}

/// The state of the capacity schedule.
struct Schedule<'m> {
    dfs: Dfs<'m>,
    /// The sizes' gcd: every capacity asked for is a multiple of it.
    g: u64,
    best: Option<Vec<u64>>,
    best_arena: u64,
    /// The lowest capacity not ruled out.
    proven: u64,
    work_left: u64,
}

impl Schedule<'_> {
    fn open(&self) -> bool {
        self.best_arena > self.proven && self.work_left > 0 && !self.dfs.timed_out
    }

    /// One pass of bisection between the lowest capacity not ruled out and the best
    /// arena; an attempt that runs out of work (at most `share`) counts as a failure for
    /// this pass only, so a later pass may ask for other capacities below it.
    fn bisect(&mut self, share: u64) {
        let mut lo = self.proven;
        while self.best_arena > lo && self.open() {
            let cap = lo + (self.best_arena - lo) / 2 / self.g * self.g;
            if self.ask(cap, share) != Outcome::Found {
                lo = cap + self.g;
            }
        }
    }

    /// Asks for capacity `cap` within `budget` work (and the work left).
    fn ask(&mut self, cap: u64, budget: u64) -> Outcome {
        let (outcome, used) = decide(&mut self.dfs, cap, budget.clamp(1, self.work_left));
        self.work_left = self.work_left.saturating_sub(used);
        match outcome {
            Outcome::Found => {
                self.best_arena = arena_units(&self.dfs.solution, &self.dfs.model().w);
                self.best = Some(self.dfs.solution.clone());
            }
            Outcome::Infeasible => self.proven = self.proven.max(cap + self.g),
            Outcome::Aborted => {}
        }
        outcome
    }
}

fn arena_units(offsets: &[u64], w: &[u64]) -> u64 {
    offsets
        .iter()
        .zip(w)
        .map(|(&o, &w)| if w == 0 { 0 } else { o + w })
        .max()
        .unwrap_or(0)
}

/// Asks whether everything fits in `cap`, round robin over the preorders with a work
/// limit doubling every round, within `budget` work. Returns the outcome and the work used.
fn decide(dfs: &mut Dfs, cap: u64, budget: u64) -> (Outcome, u64) {
    let mut limit = 8 * dfs.setup_work();
    let mut used = 0u64;
    loop {
        for preorder in Preorder::ALL {
            let this = limit.min(budget - used);
            let outcome = dfs.attempt(cap, preorder, this);
            used += dfs.work.min(this);
            if outcome != Outcome::Aborted || used >= budget || dfs.timed_out {
                return (outcome, used);
            }
        }
        limit = limit.saturating_mul(2);
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
