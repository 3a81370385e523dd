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
//! # Attempts side by side
//! The first attempt (in that order) that does not run out of work decides, and an attempt
//! that runs out uses exactly its limit, so the work each attempt may use is known before
//! any runs. Once the limits pass [`PARALLEL_WORK`], the attempts run side by side, one
//! searcher per thread (as many as the rayon pool has, at most [`MAX_THREADS`]; one when
//! called from a pool worker): each thread takes the next attempt in order, and attempts
//! after one that decided stop. The decision, the work charged and the placement are the
//! ones of running the attempts one by one (the preordering of the partitions, made once
//! per preorder, is charged to the attempt that made it first when run one by one), so
//! results do not depend on the number of threads; only the wall time does. Most of the
//! search's work goes to restarts that run out, and two threads take them two at a
//! time.
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
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
    // Called from a rayon worker (arenas placed side by side), the pool is busy: one
    // thread. Otherwise as many as the pool has, up to `MAX_THREADS`.
    let threads = match rayon::current_thread_index() {
        Some(_) => 1,
        None => rayon::current_num_threads().clamp(1, MAX_THREADS),
    };
    let run = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sgc-alloc-search".into())
            .stack_size(stack)
            .spawn_scoped(scope, || {
                let threads = Threads {
                    count: threads,
                    stack,
                    parallel_work: PARALLEL_WORK,
                };
                optimise(inst, arena, effort, threads)
            })
            .ok()?
            .join()
            .ok()
    });
    run.unwrap_or_else(|| skip(SearchStop::Off))
}

/// How many searchers run a decision's attempts side by side, their threads' stack size,
/// and the work limit from which they do ([`PARALLEL_WORK`]).
#[derive(Clone, Copy)]
struct Threads {
    count: usize,
    stack: usize,
    parallel_work: u64,
}

/// The capacity schedule: the lower bound first, then passes of bisection. The result
/// does not depend on `threads`.
fn optimise(inst: &Instance, arena: u64, effort: Effort, threads: Threads) -> SearchRun {
    let model = Model::new(inst);
    let deadline = effort.time_cap.map(|d| Instant::now() + d);
    let mut s = Schedule {
        deciders: Deciders::new(&model, deadline, threads),
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
        _ if s.deciders.timed_out() => SearchStop::TimeCap,
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
    deciders: Deciders<'m>,
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
        self.best_arena > self.proven && self.work_left > 0 && !self.deciders.timed_out()
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
        let d = decide(&mut self.deciders, cap, budget.clamp(1, self.work_left));
        self.work_left = self.work_left.saturating_sub(d.used);
        let outcome = d.outcome;
        match outcome {
            Outcome::Found => {
                let dfs = &self.deciders.dfs[d.by];
                self.best_arena = arena_units(&dfs.solution, &dfs.model().w);
                self.best = Some(dfs.solution.clone());
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

/// The most threads one decision runs its attempts on.
const MAX_THREADS: usize = 4;

/// Attempts with a work limit below this (about a tenth of a millisecond) run one by one on
/// one thread: a decision that ends there does not start threads.
const PARALLEL_WORK: u64 = 10_000;

/// The searchers of a decision's attempts, one per thread (`threads.count`).
struct Deciders<'m> {
    dfs: Vec<Dfs<'m>>,
    threads: Threads,
    /// Per preorder: whether an attempt has been charged for ordering the partitions
    /// ([`Dfs::attempt`]); the same attempt as if one searcher ran them all.
    charged: [bool; 3],
}

impl<'m> Deciders<'m> {
    fn new(model: &'m Model, deadline: Option<Instant>, threads: Threads) -> Self {
        Deciders {
            dfs: (0..threads.count.max(1))
                .map(|_| Dfs::new(model, deadline))
                .collect(),
            threads,
            charged: [false; 3],
        }
    }

    fn timed_out(&self) -> bool {
        self.dfs.iter().any(|d| d.timed_out)
    }
}

/// How a decision ended: its outcome, the work it used, the searcher holding the
/// placement when it found one, and the last attempt that counts (the deciding one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decision {
    outcome: Outcome,
    used: u64,
    by: usize,
    last: usize,
}

/// The attempts of one decision, in order: the preorders round robin, with a work limit
/// of `first` doubling every round, each clamped to what `budget` leaves after the attempts
/// before it (an attempt that runs out of work uses exactly its limit, so every clamp is
/// known before any attempt runs); the list ends where the budget does.
fn attempts(first: u64, budget: u64) -> Vec<(Preorder, u64)> {
    let mut list = Vec::new();
    let (mut limit, mut used) = (first.max(1), 0u64);
    while used < budget {
        for preorder in Preorder::ALL {
            if used >= budget {
                break;
            }
            let this = limit.min(budget - used);
            list.push((preorder, this));
            used += this;
        }
        limit = limit.saturating_mul(2);
    }
    list
}

/// Asks whether everything fits in `cap` within `budget` work: the first of
/// [`attempts`] that does not run out of work decides (or the first that hits the time
/// cap). Attempts run one by one while their limits are small, then side by side on the
/// searchers' threads: each thread takes the next attempt in order, and an attempt after
/// one that decided stops. The decision, its work and its placement are those of running
/// the attempts one by one, whatever the number of threads.
fn decide(d: &mut Deciders, cap: u64, budget: u64) -> Decision {
    let plan = attempts(8 * d.dfs[0].setup_work(), budget);
    // Each preorder's first attempt that gets past the capacity check pays for ordering.
    let mut charged = d.charged;
    let passes = !d.dfs[0].exceeds(cap);
    let charges: Vec<bool> = plan
        .iter()
        .map(|&(p, _)| passes && !std::mem::replace(&mut charged[p as usize], passes))
        .collect();
    let decision = one_by_one(d, cap, &plan, &charges);
    for (&(p, _), &c) in plan.iter().zip(&charges).take(decision.last + 1) {
        d.charged[p as usize] |= c;
    }
    decision
}

/// [`decide`]'s attempts one after the other on the first searcher, until their limits
/// reach `threads.parallel_work`; [`side_by_side`] from there.
fn one_by_one(d: &mut Deciders, cap: u64, plan: &[(Preorder, u64)], charges: &[bool]) -> Decision {
    let mut used = 0;
    for (k, &(preorder, this)) in plan.iter().enumerate() {
        if d.dfs.len() > 1 && this >= d.threads.parallel_work {
            return side_by_side(d, cap, plan, charges, k, used);
        }
        let dfs = &mut d.dfs[0];
        dfs.watch(None);
        let outcome = dfs.attempt(cap, preorder, this, charges[k]);
        used += dfs.work.min(this);
        if outcome != Outcome::Aborted || dfs.timed_out {
            return Decision {
                outcome,
                used,
                by: 0,
                last: k,
            };
        }
    }
    Decision {
        outcome: Outcome::Aborted,
        used,
        by: 0,
        last: plan.len().saturating_sub(1),
    }
}

/// One attempt run by a thread of [`side_by_side`].
struct Ran {
    index: usize,
    by: usize,
    outcome: Outcome,
    work: u64,
    decisive: bool,
}

/// [`decide`] from attempt `from` on (`used`: the work of the ones before it), the
/// attempts shared among the searchers' threads.
fn side_by_side(
    d: &mut Deciders,
    cap: u64,
    plan: &[(Preorder, u64)],
    charges: &[bool],
    from: usize,
    used: u64,
) -> Decision {
    let next = AtomicUsize::new(from);
    let decided = Arc::new(AtomicUsize::new(usize::MAX));
    let stack = d.threads.stack;
    let (first, rest) = d.dfs.split_first_mut().expect("at least one searcher");
    let mut ran = Vec::new();
    let mut lost = false;
    std::thread::scope(|scope| {
        let helpers: Vec<_> = rest
            .iter_mut()
            .enumerate()
            .filter_map(|(i, dfs)| {
                let (next, decided) = (&next, &decided);
                std::thread::Builder::new()
                    .name("sgc-alloc-search".into())
                    .stack_size(stack)
                    .spawn_scoped(scope, move || {
                        take_attempts(dfs, i + 1, cap, (plan, charges), next, decided)
                    })
                    .ok()
            })
            .collect();
        ran = take_attempts(first, 0, cap, (plan, charges), &next, &decided);
        for h in helpers {
            match h.join() {
                Ok(r) => ran.extend(r),
                Err(_) => lost = true,
            }
        }
    });
    // A searcher that panicked leaves its attempts unknown: nothing is decided then.
    let decisive = ran.iter().filter(|r| r.decisive && !lost);
    match decisive.min_by_key(|r| r.index) {
        // Every attempt before the deciding one ran out of work: each used its limit.
        Some(r) => Decision {
            outcome: r.outcome,
            used: used
                + plan[from..r.index].iter().map(|a| a.1).sum::<u64>()
                + r.work.min(plan[r.index].1),
            by: r.by,
            last: r.index,
        },
        None => Decision {
            outcome: Outcome::Aborted,
            used: used + plan[from..].iter().map(|a| a.1).sum::<u64>(),
            by: 0,
            last: plan.len() - 1,
        },
    }
}

/// A thread's loop of [`side_by_side`]: the next attempt in order while none before it
/// decided; stops after one that decides (its searcher keeps the placement).
fn take_attempts(
    dfs: &mut Dfs,
    by: usize,
    cap: u64,
    (plan, charges): (&[(Preorder, u64)], &[bool]),
    next: &AtomicUsize,
    decided: &Arc<AtomicUsize>,
) -> Vec<Ran> {
    let mut ran = Vec::new();
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= plan.len() || index > decided.load(Ordering::Acquire) {
            return ran;
        }
        let (preorder, this) = plan[index];
        dfs.watch(Some((Arc::clone(decided), index)));
        let outcome = dfs.attempt(cap, preorder, this, charges[index]);
        let decisive = !dfs.cancelled && (outcome != Outcome::Aborted || dfs.timed_out);
        ran.push(Ran {
            index,
            by,
            outcome,
            work: dfs.work,
            decisive,
        });
        if decisive {
            decided.fetch_min(index, Ordering::AcqRel);
            return ran;
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::Buffer;

    /// Random instances of up to 60 buffers (a seeded generator: the test is repeatable).
    fn instances(count: usize) -> Vec<Instance> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        (0..count)
            .map(|_| {
                let buffers: Vec<Buffer> = (0..rng.random_range(2..62))
                    .map(|_| {
                        let lower = rng.random_range(0..40);
                        Buffer {
                            lower,
                            upper: lower + rng.random_range(1..21),
                            size: rng.random_range(1..51),
                        }
                    })
                    .collect();
                Instance::new(&buffers, 1, &[]).unwrap()
            })
            .collect()
    }

    fn deciders(m: &Model, count: usize, parallel_work: u64) -> Deciders<'_> {
        let threads = Threads {
            count,
            stack: 1 << 22,
            parallel_work,
        };
        Deciders::new(m, None, threads)
    }

    #[test]
    fn attempts_go_round_robin_doubling_and_end_with_the_budget() {
        let list = attempts(10, 100);
        let limits: Vec<u64> = list.iter().map(|a| a.1).collect();
        assert_eq!(limits, vec![10, 10, 10, 20, 20, 20, 10]);
        assert_eq!(list[3].0, Preorder::Wat);
        assert_eq!(list[6].0, Preorder::Wat);
        assert_eq!(attempts(10, 5), vec![(Preorder::Wat, 5)]);
    }

    /// Side by side on 2 to 4 threads, every decision (outcome, work, placement) is the
    /// one-thread decision: at the lower bound, between it and the heuristic arena, and
    /// below the bound (infeasible), with budgets that let attempts run out of work.
    #[test]
    fn decisions_do_not_depend_on_the_number_of_threads() {
        let mut decided = [0usize; 3];
        for inst in instances(40) {
            let m = Model::new(&inst);
            let total: u64 = inst.w.iter().sum();
            let caps = [
                inst.lb.saturating_sub(1).max(1),
                inst.lb,
                inst.lb + 3,
                (inst.lb + total) / 2,
            ];
            for cap in caps {
                for budget in [40, 400, 4_000, 1_000_000] {
                    let mut one = deciders(&m, 1, 0);
                    let want = decide(&mut one, cap, budget);
                    let placed =
                        (want.outcome == Outcome::Found).then(|| one.dfs[0].solution.clone());
                    decided[match want.outcome {
                        Outcome::Found => 0,
                        Outcome::Infeasible => 1,
                        Outcome::Aborted => 2,
                    }] += 1;
                    for threads in 2..=4 {
                        let mut many = deciders(&m, threads, 0);
                        let got = decide(&mut many, cap, budget);
                        assert_eq!((got.outcome, got.used), (want.outcome, want.used));
                        if let Some(p) = &placed {
                            assert_eq!(&many.dfs[got.by].solution, p);
                        }
                    }
                }
            }
        }
        // Every kind of decision came up.
        assert!(decided.iter().all(|&c| c > 0), "{decided:?}");
    }

    #[test]
    fn the_search_result_does_not_depend_on_the_number_of_threads() {
        let effort = Effort {
            search_work: 300_000,
            ..Effort::DEFAULT
        };
        for inst in instances(20) {
            let total: u64 = inst.w.iter().sum();
            // From the first attempt on side by side, and only from larger limits.
            let runs: Vec<SearchRun> = [(1, 0), (2, 0), (3, 0), (3, 2_000)]
                .into_iter()
                .map(|(count, parallel_work)| {
                    let threads = Threads {
                        count,
                        stack: 1 << 22,
                        parallel_work,
                    };
                    optimise(&inst, total, effort, threads)
                })
                .collect();
            for r in &runs[1..] {
                assert_eq!(r.offsets, runs[0].offsets);
                assert_eq!(r.summary.work, runs[0].summary.work);
                assert_eq!(r.summary.stop, runs[0].summary.stop);
                assert_eq!(r.summary.proven_bound, runs[0].summary.proven_bound);
            }
        }
    }
}
