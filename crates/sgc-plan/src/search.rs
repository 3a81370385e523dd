//! The candidate evaluator shared by the threshold search and the genetic refinement.
//!
//! Candidates are evaluated in batches on a rayon pool; results are merged in the order
//! the candidates were generated, so the outcome does not depend on the number of worker
//! threads. Fitness values are cached by genome: re-proposed candidates (common once the
//! population converges) cost nothing. Below that, outcomes (peak and recompute cost) are
//! cached by discard decision, the only thing a schedule depends on: many genomes differ
//! only in split points that change no decision (a split moved within a stretch where no
//! largest gap starts or ends, a split after the forward pass), and about half of the
//! genetic children on the zoo's deep graphs are such repeats, so they are not walked or
//! simulated again.

use crate::context::Context;
use crate::evaluate::{decision_key, discards, fitness_with, outcome, Fitness, Genome, Outcome};
use rayon::prelude::*;
use std::collections::HashMap;

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

pub(crate) struct Evaluator<'a> {
    pub ctx: &'a Context<'a>,
    pool: &'a rayon::ThreadPool,
    cache: HashMap<Genome, Fitness>,
    /// Outcomes by discard decision ([`decision_key`]).
    outcomes: HashMap<Vec<u32>, Outcome>,
    pub budget: Option<u64>,
    pub progress: Option<ProgressFn<'a>>,
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
            budget,
            progress,
        }
    }

    /// Fitness of each genome, in order.
    pub fn eval_batch(&mut self, genomes: &[Genome]) -> Vec<Fitness> {
        let mut fresh: Vec<&Genome> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for g in genomes {
            if !self.cache.contains_key(g) && seen.insert(g) {
                fresh.push(g);
            }
        }
        let ctx = self.ctx;
        let decisions: Vec<Vec<bool>> = self
            .pool
            .install(|| fresh.par_iter().map(|g| discards(ctx, g)).collect());
        let keys: Vec<Vec<u32>> = decisions.iter().map(|d| decision_key(d)).collect();
        let mut new_keys = std::collections::HashSet::new();
        let todo: Vec<(&Vec<u32>, &Vec<bool>)> = keys
            .iter()
            .zip(&decisions)
            .filter(|(k, _)| !self.outcomes.contains_key(*k) && new_keys.insert(*k))
            .collect();
        let results: Vec<Outcome> = self
            .pool
            .install(|| todo.par_iter().map(|(_, d)| outcome(ctx, d)).collect());
        for ((k, _), o) in todo.into_iter().zip(results) {
            self.outcomes.insert(k.clone(), o);
        }
        for (g, k) in fresh.into_iter().zip(&keys) {
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
pub(crate) fn sort_population(pop: &mut [Member], budget: Option<u64>) {
    pop.sort_by(|a, b| {
        a.fitness
            .cmp(&b.fitness, budget)
            .then_with(|| a.genome.cmp(&b.genome))
    });
}
