//! The candidate evaluator shared by the threshold search, the genetic refinement and the
//! memory-for-speed step.
//!
//! Candidates are evaluated in batches on a rayon pool; results are merged in the order
//! the candidates were generated, so the outcome does not depend on the number of worker
//! threads. Fitness values are cached by genome: re-proposed candidates (common once the
//! population converges) cost nothing. Below that, outcomes (peak and recompute cost) are
//! cached by discard plan ([`crate::discard::key`]), the only thing a schedule depends on:
//! many genomes differ only in split points that change no discard (a split moved within
//! a stretch where no chosen gap starts or ends, a split after the forward pass), so they
//! are not walked or profiled again.

use crate::context::Context;
use crate::discard;
use crate::evaluate::{fitness_with, outcome, Fitness, Genome, Objective, Outcome};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Progress of a search, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// What the search is doing.
    pub phase: &'static str,
    /// Units of work done and expected (generations, or candidates).
    pub done: usize,
    pub total: usize,
}

/// A progress callback.
pub type ProgressFn<'a> = &'a (dyn Fn(Progress) + Sync);

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
}

pub(crate) struct Evaluator<'a> {
    pub ctx: &'a Context<'a>,
    pool: &'a rayon::ThreadPool,
    cache: HashMap<Genome, Fitness>,
    /// Outcomes by discard-plan key.
    outcomes: HashMap<Arc<Vec<u32>>, Outcome>,
    pub objective: Objective,
    pub progress: Option<ProgressFn<'a>>,
    pub stats: SearchStats,
}

impl<'a> Evaluator<'a> {
    pub fn new(
        ctx: &'a Context<'a>,
        pool: &'a rayon::ThreadPool,
        budget: Option<u64>,
        progress: Option<ProgressFn<'a>>,
    ) -> Self {
        Evaluator {
            ctx,
            pool,
            cache: HashMap::new(),
            outcomes: HashMap::new(),
            objective: Objective::budget(budget),
            progress,
            stats: SearchStats::default(),
        }
    }

    /// Fitness of each genome, in order.
    pub fn eval_batch(&mut self, genomes: &[Genome]) -> Vec<Fitness> {
        self.stats.candidates += genomes.len();
        let mut fresh: Vec<usize> = Vec::new();
        let mut seen = HashSet::new();
        for (i, g) in genomes.iter().enumerate() {
            if !self.cache.contains_key(g) && seen.insert(g) {
                fresh.push(i);
            }
        }
        let ctx = self.ctx;
        let plans: Vec<Vec<discard::Discard>> = self.pool.install(|| {
            fresh
                .par_iter()
                .map(|&i| discard::plan(ctx, &genomes[i]))
                .collect()
        });
        let keys: Vec<Arc<Vec<u32>>> = plans.iter().map(|p| Arc::new(discard::key(p))).collect();
        // Distinct new plans, each evaluated once.
        let mut todo: Vec<usize> = Vec::new();
        let mut new_keys = HashSet::new();
        for (j, k) in keys.iter().enumerate() {
            if !self.outcomes.contains_key(k) && new_keys.insert(k) {
                todo.push(j);
            }
        }
        let results: Vec<Outcome> = self.pool.install(|| {
            todo.par_iter()
                .map(|&j| outcome(ctx, genomes[fresh[j]].bounds(), &plans[j]))
                .collect()
        });
        self.stats.evaluated += todo.len();
        for (&j, r) in todo.iter().zip(results) {
            self.outcomes.insert(keys[j].clone(), r);
        }
        for (&i, k) in fresh.iter().zip(&keys) {
            let g = &genomes[i];
            self.cache
                .insert(g.clone(), fitness_with(self.outcomes[k], g));
        }
        genomes.iter().map(|g| self.cache[g]).collect()
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

/// Sorts best first; ties by genome, so the order is total and deterministic.
pub(crate) fn sort_population(pop: &mut [Member], obj: Objective) {
    pop.sort_by(|a, b| {
        a.fitness
            .cmp(&b.fitness, obj)
            .then_with(|| a.genome.cmp(&b.genome))
    });
}
