//! The candidate evaluator shared by the threshold search, the genetic refinement and the
//! memory-for-speed step.
//!
//! Candidates are evaluated in batches on a rayon pool; results are merged in the order
//! the candidates were generated, so the outcome does not depend on the number of worker
//! threads. A batch with one schedule to build, or few words to fingerprint, runs on the
//! calling thread: on a graph of a few hundred ops a schedule takes about 10 µs, no more
//! than waking the workers does. Fitness values are cached by genome: re-proposed
//! candidates (common once the population converges) cost nothing. Below that, outcomes
//! (peak and recompute cost) are cached by discard plan ([`super::discard::key`]), the
//! only thing a schedule depends on: many genomes differ only in split points that change
//! no discard (a split moved within a stretch where no chosen gap starts or ends, a split
//! after the forward pass), so they are not walked or profiled again. Both caches hold 128-bit fingerprints of their keys
//! ([`super::fingerprint`]), not the keys: a key is O(n) words on a graph of n ops, and the
//! caches live as long as the search.

use crate::context::Context;
use crate::options::{Progress, ProgressFn};
use crate::sublinear::discard;
use crate::sublinear::evaluate::{fitness_with, outcome_in, Fitness, Objective, Outcome};
use crate::sublinear::fingerprint::Fingerprint;
use crate::sublinear::genome::Genome;
use crate::sublinear::recompute;
use rayon::prelude::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Mutex;

/// What a search did. Every figure depends only on the graph and the options, never on
/// the number of workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Candidates proposed (repeats included).
    pub candidates: usize,
    /// Schedules built: one per distinct discard plan.
    pub evaluated: usize,
    /// Candidates of the memory-for-speed step (part of `candidates`).
    pub relax_candidates: usize,
    /// Without a budget, the lowest-peak plan that a steep trade next to it replaced
    /// (`sublinear`'s last step), when one did.
    pub traded_from: Option<Traded>,
    /// Without a budget, the plan the search picked before its fixed-peak stage (the least
    /// recompute at the peak reached), in the same form.
    pub before_fixed_peak: Option<Traded>,
}

/// The lowest-peak plan a trade replaced: its peak and its recompute cost, in the cost
/// units of which one step is `step_units`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traded {
    pub peak: u64,
    pub recompute_units: u64,
    pub step_units: u64,
}

impl Traded {
    /// Its recompute as a share of one step.
    pub fn recompute_share(&self) -> f64 {
        self.recompute_units as f64 / self.step_units.max(1) as f64
    }
}

/// The most op-steps (schedules built times the graph's ops) each bounded phase of the
/// search walks: the first reshaping of the peak's blocks, each memory-for-speed pass, the
/// fixed-peak refinement, the trade next to the lowest peak and the last climb
/// ([`Evaluator::phase_schedules`]). Their schedule counts otherwise grow with the number
/// of blocks, each schedule walking the whole graph: on a deep chain of small layers they
/// made the plan time grow as ops^1.3. The shipped graphs' largest bounded phase walks
/// 4.0M op-steps (the fixed-peak refinement of the real DenseNet-121), a quarter of this,
/// so no shipped plan changes; from about 10k ops on a bounded phase builds fewer
/// schedules the larger the graph, and its time stays bounded.
pub(crate) const PHASE_WALK: usize = 16_000_000;

/// Batches whose genomes hold at least this many split points and kept roots in all are
/// fingerprinted in parallel; smaller ones take less time than waking the workers.
const PARALLEL_PRINTS: usize = 16_384;

pub(crate) struct Evaluator<'a> {
    pub ctx: &'a Context<'a>,
    pub pool: &'a rayon::ThreadPool,
    /// Fitness by genome fingerprint.
    cache: HashMap<Fingerprint, Fitness>,
    /// Outcomes by discard-plan fingerprint ([`discard::key`]).
    outcomes: HashMap<Fingerprint, Outcome>,
    pub objective: Objective,
    pub progress: Option<ProgressFn<'a>>,
    pub stats: SearchStats,
    /// Every evaluated candidate not dominated by another in both peak and cost.
    pub front: Front,
    /// Walk buffers, one per worker busy at once (see [`Scratches`]).
    scratch: Scratches,
    /// Schedules the climbs may build before they stop early ([`Evaluator::spent`]);
    /// `None`: no limit.
    pub limit: Option<usize>,
    /// Op-steps each bounded phase walks at most ([`PHASE_WALK`]; tests lower it).
    pub phase_walk: usize,
}

/// The walks' buffers ([`recompute::Scratch`]), kept for the search's lifetime: a walk
/// takes one (or makes one) and gives it back, so each worker reuses O(n) buffers instead
/// of allocating them for every candidate. Which buffers a walk gets never changes its
/// result (a walk resets them first).
#[derive(Default)]
struct Scratches(Mutex<Vec<recompute::Scratch>>);

impl Scratches {
    fn take(&self) -> recompute::Scratch {
        let spare = self.0.lock().ok().and_then(|mut v| v.pop());
        spare.unwrap_or_default()
    }

    fn give(&self, s: recompute::Scratch) {
        if let Ok(mut v) = self.0.lock() {
            v.push(s);
        }
    }
}

/// The memory/recompute Pareto front of the candidates evaluated so far: members by
/// increasing peak, each recomputing strictly less than the one before. Ties (same peak
/// and cost) keep the first member evaluated, so the front is deterministic.
#[derive(Default)]
pub(crate) struct Front {
    pub members: Vec<Member>,
}

impl Front {
    /// Adds a candidate unless a member dominates it (or equals it in both); drops the
    /// members it dominates. The genome is cloned only when it joins.
    pub fn insert(&mut self, genome: &Genome, f: Fitness) {
        if !f.feasible {
            return;
        }
        let v = &mut self.members;
        // First member with a peak above f's.
        let i = v.partition_point(|x| x.fitness.peak <= f.peak);
        if i > 0 && v[i - 1].fitness.cost <= f.cost {
            return; // a member peaks no higher and recomputes no more
        }
        // Members from the ones at f's peak on that recompute at least as much are dominated.
        let start = v[..i].partition_point(|x| x.fitness.peak < f.peak);
        let end = start
            + v[start..]
                .iter()
                .take_while(|x| x.fitness.cost >= f.cost)
                .count();
        let m = Member {
            genome: genome.clone(),
            fitness: f,
        };
        v.splice(start..end, [m]);
    }

    /// The member that recomputes least among those peaking at or under `bound`.
    pub fn cheapest_under(&self, bound: u64) -> Option<&Member> {
        let i = self.members.partition_point(|x| x.fitness.peak <= bound);
        i.checked_sub(1).map(|k| &self.members[k])
    }
}

impl<'a> Evaluator<'a> {
    pub fn new(
        ctx: &'a Context<'a>,
        pool: &'a rayon::ThreadPool,
        progress: Option<ProgressFn<'a>>,
    ) -> Self {
        Evaluator {
            ctx,
            pool,
            cache: HashMap::default(),
            outcomes: HashMap::default(),
            objective: Objective::default(),
            progress,
            stats: SearchStats::default(),
            front: Front::default(),
            scratch: Scratches::default(),
            limit: None,
            phase_walk: PHASE_WALK,
        }
    }

    /// The most schedules a bounded phase builds on this graph: [`Evaluator::phase_walk`]
    /// op-steps, at least one schedule.
    pub fn phase_schedules(&self) -> usize {
        (self.phase_walk / self.ctx.n.max(1)).max(1)
    }

    /// The evaluator's limit [`Evaluator::phase_schedules`] from now, or `others` from now
    /// if fewer.
    pub fn phase_limit(&self, others: usize) -> usize {
        self.stats
            .evaluated
            .saturating_add(others.min(self.phase_schedules()))
    }

    /// Whether the schedules built so far reached [`Evaluator::limit`]: the climbs end
    /// their current round and stop. The count depends only on the graph and options, so
    /// the limit keeps plans independent of the number of workers.
    pub fn spent(&self) -> bool {
        self.limit.is_some_and(|l| self.stats.evaluated >= l)
    }

    /// Fitness of each genome, in order.
    pub fn eval_batch(&mut self, genomes: &[Genome]) -> Vec<Fitness> {
        self.eval_batch_printed(genomes).0
    }

    /// [`Evaluator::eval_batch`], with each genome's fingerprint.
    pub fn eval_batch_printed(&mut self, genomes: &[Genome]) -> (Vec<Fitness>, Vec<Fingerprint>) {
        self.stats.candidates += genomes.len();
        let ctx = self.ctx;
        // A genome's fingerprint reads all its split points and kept roots (a thousand
        // and more on long recurrent graphs): large batches take them in parallel.
        let words: usize = genomes.iter().map(|g| g.splits.len() + g.keep.len()).sum();
        let prints: Vec<Fingerprint> = if words >= PARALLEL_PRINTS {
            self.pool
                .install(|| genomes.par_iter().map(Genome::fingerprint).collect())
        } else {
            genomes.iter().map(Genome::fingerprint).collect()
        };
        let mut fresh: Vec<usize> = Vec::new();
        let mut seen = HashSet::default();
        for (i, f) in prints.iter().enumerate() {
            if !self.cache.contains_key(f) && seen.insert(*f) {
                fresh.push(i);
            }
        }
        // Each fresh genome's discard plan and its key, in parallel; a plan whose outcome
        // is cached is dropped by the worker that made it.
        let outcomes = &self.outcomes;
        let plan_one = |&i: &usize| {
            let plan = discard::plan(ctx, &genomes[i]);
            let key = discard::key(&genomes[i], &plan);
            (key, (!outcomes.contains_key(&key)).then_some(plan))
        };
        let planned: Vec<(Fingerprint, Option<Vec<discard::Discard>>)> = if fresh.len() > 1 {
            self.pool
                .install(|| fresh.par_iter().map(plan_one).collect())
        } else {
            fresh.iter().map(plan_one).collect()
        };
        // Distinct new plans, each evaluated once.
        let mut todo: Vec<(usize, Vec<discard::Discard>)> = Vec::new();
        let mut new_keys = HashSet::default();
        let mut keys: Vec<Fingerprint> = Vec::with_capacity(planned.len());
        for (j, (k, plan)) in planned.into_iter().enumerate() {
            keys.push(k);
            if let Some(plan) = plan {
                if new_keys.insert(k) {
                    todo.push((j, plan));
                }
            }
        }
        let scratch = &self.scratch;
        let evaluate = |(j, plan): (usize, Vec<discard::Discard>)| {
            let mut s = scratch.take();
            let r = outcome_in(ctx, &genomes[fresh[j]], &plan, &mut s);
            scratch.give(s);
            (j, r)
        };
        let results: Vec<(usize, Outcome)> = if todo.len() > 1 {
            self.pool
                .install(|| todo.into_par_iter().map(evaluate).collect())
        } else {
            todo.into_iter().map(evaluate).collect()
        };
        self.stats.evaluated += results.len();
        for (j, r) in results {
            self.outcomes.insert(keys[j], r);
        }
        for (&i, k) in fresh.iter().zip(&keys) {
            let g = &genomes[i];
            let fitness = fitness_with(self.outcomes[k], g);
            self.cache.insert(prints[i], fitness);
            self.front.insert(g, fitness);
        }
        let fits = prints.iter().map(|f| self.cache[f]).collect();
        (fits, prints)
    }

    pub fn eval(&mut self, genome: &Genome) -> Fitness {
        self.eval_batch(std::slice::from_ref(genome))[0]
    }

    pub fn report(&self, phase: &'static str, done: usize, total: usize) {
        if let Some(p) = self.progress {
            p(Progress { phase, done, total });
        }
    }
}

/// A population member.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub genome: Genome,
    pub fitness: Fitness,
}

/// Drops the later members with the genome of an earlier one (by fingerprint, the
/// evaluator's cache key, without cloning genomes).
pub(crate) fn dedup(pop: &mut Vec<Member>) {
    let mut seen = rustc_hash::FxHashSet::default();
    pop.retain(|m| seen.insert(m.genome.fingerprint()));
}

/// Sorts best first; ties by genome, so the order is total and deterministic.
pub(crate) fn sort_population(pop: &mut [Member], obj: Objective) {
    pop.sort_by(|a, b| {
        a.fitness
            .cmp(&b.fitness, obj)
            .then_with(|| a.genome.cmp(&b.genome))
    });
}

/// A pool of two workers, for tests.
#[cfg(test)]
pub(crate) fn pool() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool")
}

/// A feasible member with one split at `tag` (distinct tags, distinct genomes), for tests.
#[cfg(test)]
pub(crate) fn member(peak: u64, cost: u64, tag: u32) -> Member {
    Member {
        genome: Genome::from_splits(vec![tag]),
        fitness: Fitness {
            feasible: true,
            peak,
            cost,
            splits: 1,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The front keeps exactly the non-dominated candidates, by increasing peak and
    /// strictly decreasing cost, whatever the order they come in.
    #[test]
    fn the_front_keeps_the_non_dominated_candidates() {
        let pts = [
            (10, 50),
            (12, 40),
            (12, 45),
            (11, 60),
            (15, 40),
            (20, 10),
            (9, 90),
            (20, 5),
            (10, 50),
        ];
        let mut orders = vec![(0..pts.len()).collect::<Vec<_>>()];
        orders.push(orders[0].iter().rev().copied().collect());
        orders.push(vec![4, 0, 7, 2, 8, 5, 1, 6, 3]);
        for order in orders {
            let mut f = Front::default();
            for &k in &order {
                let m = member(pts[k].0, pts[k].1, k as u32);
                f.insert(&m.genome, m.fitness);
            }
            let got: Vec<(u64, u64)> = f
                .members
                .iter()
                .map(|m| (m.fitness.peak, m.fitness.cost))
                .collect();
            assert_eq!(got, vec![(9, 90), (10, 50), (12, 40), (20, 5)], "{order:?}");
            assert_eq!(f.cheapest_under(11).map(|m| m.fitness.cost), Some(50));
            assert_eq!(f.cheapest_under(8).map(|m| m.fitness.cost), None);
            assert_eq!(f.cheapest_under(100).map(|m| m.fitness.cost), Some(5));
        }
    }
}
