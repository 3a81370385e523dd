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
//! simulated again. A child of the genetic refinement or of the memory-for-speed step is
//! walked only until its schedule joins the parent's (see the `trace` module), and the
//! parent's recorded rest is reused; traces are kept for the current population only.

use crate::context::Context;
use crate::evaluate::{decision_key, discards, fitness_with, Fitness, Genome, Objective, Outcome};
use crate::trace::{trace_counted, Parent, Trace, Walked};
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
    /// Schedules built: one per distinct discard decision, plus rebuilds of a dropped
    /// trace that a child needs.
    pub evaluated: usize,
    /// Of those, how many started from a snapshot of a parent's walk, and how many were
    /// walked only until they joined a parent's schedule.
    pub resumed: usize,
    pub joined: usize,
    /// Traced positions walked, over all evaluations.
    pub positions_walked: u64,
    /// Traced positions a full walk of every evaluation would have taken.
    pub positions_full: u64,
    /// Candidates of the memory-for-speed step (part of `candidates`).
    pub relax_candidates: usize,
}

/// A parent's trace and the boundary from which the child's decisions equal its own.
type ParentRef = (Arc<Trace>, usize, usize);

pub(crate) struct Evaluator<'a> {
    pub ctx: &'a Context<'a>,
    pool: &'a rayon::ThreadPool,
    cache: HashMap<Genome, Fitness>,
    /// Decision key ([`decision_key`]) of every evaluated genome.
    keys: HashMap<Genome, Arc<Vec<u32>>>,
    /// Outcomes by decision key.
    outcomes: HashMap<Arc<Vec<u32>>, Outcome>,
    /// Traces of the decisions that may still be parents, by decision key.
    traces: HashMap<Arc<Vec<u32>>, Arc<Trace>>,
    pub objective: Objective,
    pub progress: Option<ProgressFn<'a>>,
    pub stats: SearchStats,
    /// Evaluate children against their parents' traces (off: full walks).
    pub incremental: bool,
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
            keys: HashMap::new(),
            outcomes: HashMap::new(),
            traces: HashMap::new(),
            objective: Objective::budget(budget),
            progress,
            stats: SearchStats::default(),
            incremental: true,
        }
    }

    /// Fitness of each genome, in order, each evaluated from scratch.
    pub fn eval_batch(&mut self, genomes: &[Genome]) -> Vec<Fitness> {
        self.eval_children(genomes, &[])
    }

    /// Fitness of each genome, in order; `parents[i]` (when given) lists evaluated genomes
    /// that genome `i` was derived from: its schedule is walked only until it joins the
    /// parent's whose decisions differ least late ([`crate::trace`]).
    pub fn eval_children(&mut self, genomes: &[Genome], parents: &[Vec<Genome>]) -> Vec<Fitness> {
        self.stats.candidates += genomes.len();
        let mut fresh: Vec<usize> = Vec::new();
        let mut seen = HashSet::new();
        for (i, g) in genomes.iter().enumerate() {
            if !self.cache.contains_key(g) && seen.insert(g) {
                fresh.push(i);
            }
        }
        let ctx = self.ctx;
        let decisions: Vec<Vec<bool>> = self.pool.install(|| {
            fresh
                .par_iter()
                .map(|&i| discards(ctx, &genomes[i]))
                .collect()
        });
        let keys: Vec<Arc<Vec<u32>>> = decisions
            .iter()
            .map(|d| Arc::new(decision_key(d)))
            .collect();
        // Distinct new decisions, each with the parent it is walked against.
        let mut todo: Vec<(usize, Option<ParentRef>)> = Vec::new();
        let mut new_keys = HashSet::new();
        for (j, k) in keys.iter().enumerate() {
            if self.outcomes.contains_key(k) || !new_keys.insert(k) {
                continue;
            }
            let ps = parents.get(fresh[j]).map_or(&[][..], |v| &v[..]);
            todo.push((j, self.best_parent(k, ps)));
        }
        let results: Vec<Option<(Trace, Walked)>> = self.pool.install(|| {
            todo.par_iter()
                .map(|(j, parent)| {
                    let parent = parent.as_ref().map(|(trace, resume, from)| Parent {
                        trace,
                        resume: *resume,
                        from: *from,
                    });
                    trace_counted(ctx, &decisions[*j], parent)
                })
                .collect()
        });
        for (&(j, _), r) in todo.iter().zip(results) {
            let outcome = r.map(|(t, walked)| {
                self.count(Some(walked));
                let o = t.outcome();
                self.traces.insert(keys[j].clone(), Arc::new(t));
                o
            });
            if outcome.is_none() {
                self.count(None);
            }
            self.outcomes.insert(keys[j].clone(), outcome);
        }
        for (&i, k) in fresh.iter().zip(&keys) {
            let g = &genomes[i];
            self.cache
                .insert(g.clone(), fitness_with(self.outcomes[k], g));
            self.keys.insert(g.clone(), k.clone());
        }
        genomes.iter().map(|g| self.cache[g]).collect()
    }

    /// Counts one schedule built (`None`: it could not be, after a full walk at most).
    fn count(&mut self, walked: Option<Walked>) {
        let n = self.ctx.n as u64;
        let s = &mut self.stats;
        s.evaluated += 1;
        s.positions_full += n;
        s.positions_walked += walked.map_or(n, |w| w.positions as u64);
        s.joined += usize::from(walked.is_some_and(|w| w.joined));
        s.resumed += usize::from(walked.is_some_and(|w| w.resumed));
    }

    /// Among the traced `parents`, the one whose walk the child `key` should join soonest:
    /// the walks differ until the last traced access of a storage whose decision differs.
    fn best_parent(&self, key: &[u32], parents: &[Genome]) -> Option<ParentRef> {
        let ctx = self.ctx;
        if !self.incremental {
            return None;
        }
        let mut best: Option<(u32, ParentRef)> = None;
        for p in parents {
            let Some(pk) = self.keys.get(p) else { continue };
            let Some(trace) = self.traces.get(pk) else {
                continue;
            };
            let (resume, from, until) = crate::trace::join_bounds(ctx, key, pk);
            if best.as_ref().is_none_or(|b| until < b.0) {
                best = Some((until, (trace.clone(), resume, from)));
            }
        }
        best.map(|b| b.1)
    }

    /// Drops the traces of every decision but those of `keep`.
    pub fn retain_traces<'g>(&mut self, keep: impl IntoIterator<Item = &'g Genome>) {
        let live: HashSet<Arc<Vec<u32>>> = keep
            .into_iter()
            .filter_map(|g| self.keys.get(g).cloned())
            .collect();
        self.traces.retain(|k, _| live.contains(k));
    }

    /// Makes sure `genome` has a trace to evaluate children against (traces are dropped
    /// by [`Self::retain_traces`]).
    pub fn ensure_trace(&mut self, genome: &Genome) {
        let Some(key) = self.keys.get(genome).cloned() else {
            self.eval(genome);
            return;
        };
        if self.traces.contains_key(&key) || self.outcomes.get(&key).is_some_and(Option::is_none) {
            return;
        }
        if let Some((t, walked)) = trace_counted(self.ctx, &discards(self.ctx, genome), None) {
            self.count(Some(walked));
            self.traces.insert(key, Arc::new(t));
        }
    }

    pub fn eval(&mut self, genome: &Genome) -> Fitness {
        self.eval_batch(std::slice::from_ref(genome))[0]
    }

    /// [`Self::eval`] of a genome derived from `parent`.
    pub fn eval_child(&mut self, genome: &Genome, parent: &Genome) -> Fitness {
        self.eval_children(std::slice::from_ref(genome), &[vec![parent.clone()]])[0]
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
