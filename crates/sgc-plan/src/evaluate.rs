//! Candidate evaluation: a genome (split points plus storages kept on purpose) becomes a
//! discard decision, a schedule and a fitness.
//!
//! **Discard rule.** Split points close blocks; the outputs of a split op are checkpoints.
//! A freeable storage that is neither a checkpoint nor kept is discarded when its largest
//! access gap crosses a split point (its gap-closing reader lies in a later block) and the
//! recomputation at the gap's end is safe (before any in-place write to a persistent
//! tensor it would read). The schedule comes from [`crate::schedule::walk_discards`]; its
//! peak from `sgc_ir::simulate`, the memory model every tool shares.
//!
//! **Fitness.** Without a budget: lower peak, then lower recompute cost, then fewer split
//! points (the reference uses the peak alone). With a budget: plans that fit come first and
//! among them the least recompute cost wins; plans that do not fit are ranked by peak.
//! Infeasible candidates rank last. Evaluations are cached by genome, so a generation only
//! pays for the children it has not seen.

use crate::context::Context;
use crate::schedule::walk_discards;
use sgc_ir::{OpId, TensorId};
use std::cmp::Ordering;

/// A split-based candidate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct Genome {
    /// Sorted, distinct op positions that close a block.
    pub splits: Vec<u32>,
    /// Sorted, distinct roots never discarded (set by the memory-for-speed relaxation).
    pub keep: Vec<u32>,
}

impl Genome {
    pub fn from_splits(mut splits: Vec<u32>) -> Genome {
        splits.sort_unstable();
        splits.dedup();
        Genome {
            splits,
            keep: Vec::new(),
        }
    }
}

/// How good a candidate is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Fitness {
    pub feasible: bool,
    pub peak: u64,
    pub cost: f64,
    pub splits: usize,
}

impl Fitness {
    pub const INFEASIBLE: Fitness = Fitness {
        feasible: false,
        peak: u64::MAX,
        cost: f64::INFINITY,
        splits: usize::MAX,
    };

    /// Total order: `Less` is better.
    pub fn cmp(&self, other: &Fitness, budget: Option<u64>) -> Ordering {
        let by_peak = |a: &Fitness, b: &Fitness| {
            a.peak
                .cmp(&b.peak)
                .then(a.cost.total_cmp(&b.cost))
                .then(a.splits.cmp(&b.splits))
        };
        let first = other.feasible.cmp(&self.feasible);
        if first != Ordering::Equal {
            return first;
        }
        match budget {
            None => by_peak(self, other),
            Some(b) => {
                let (fa, fb) = (self.peak <= b, other.peak <= b);
                match (fa, fb) {
                    (true, true) => self
                        .cost
                        .total_cmp(&other.cost)
                        .then(self.peak.cmp(&other.peak))
                        .then(self.splits.cmp(&other.splits)),
                    (false, false) => by_peak(self, other),
                    _ => fb.cmp(&fa),
                }
            }
        }
    }
}

/// Which roots a genome discards.
pub(crate) fn discards(ctx: &Context<'_>, genome: &Genome) -> Vec<bool> {
    let g = ctx.g;
    let mut protected = vec![false; g.num_tensors()];
    for &s in &genome.splits {
        for &r in &ctx.out_roots[s as usize] {
            protected[r.index()] = true;
        }
    }
    for &k in &genome.keep {
        protected[k as usize] = true;
    }
    let crosses = |a: u32, b: u32| {
        let i = genome.splits.partition_point(|&s| s < a);
        genome.splits.get(i).is_some_and(|&s| s < b)
    };
    ctx.freeable_roots
        .iter()
        .fold(vec![false; g.num_tensors()], |mut d, &r| {
            if let Some((a, b)) = ctx.gap[r.index()] {
                d[r.index()] = !protected[r.index()] && crosses(a, b) && b <= ctx.root_hazard(r);
            }
            d
        })
}

/// The schedule of a genome, if it can be built.
pub(crate) fn schedule(ctx: &Context<'_>, genome: &Genome) -> Option<Vec<(OpId, bool)>> {
    walk_discards(ctx, &discards(ctx, genome))
        .ok()
        .map(|st| st.steps)
}

/// Fitness of a schedule under the IR's memory model.
pub(crate) fn fitness_of(ctx: &Context<'_>, steps: &[(OpId, bool)], splits: usize) -> Fitness {
    let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
    match sgc_ir::simulate(ctx.g, &ops) {
        Ok(p) => Fitness {
            feasible: true,
            peak: p.peak,
            cost: steps
                .iter()
                .filter(|s| s.1)
                .fold(0.0, |a, s| a + ctx.cost[s.0.index()]),
            splits,
        },
        Err(_) => Fitness::INFEASIBLE,
    }
}

/// Evaluates one genome.
pub(crate) fn evaluate(ctx: &Context<'_>, genome: &Genome) -> Fitness {
    schedule(ctx, genome).map_or(Fitness::INFEASIBLE, |s| {
        fitness_of(ctx, &s, genome.splits.len())
    })
}

/// Output roots of the recomputed ops of a schedule, costliest op first (ties: op order).
pub(crate) fn recomputed_roots_by_cost(
    ctx: &Context<'_>,
    steps: &[(OpId, bool)],
) -> Vec<Vec<TensorId>> {
    let mut ops: Vec<OpId> = steps.iter().filter(|s| s.1).map(|s| s.0).collect();
    ops.sort();
    ops.dedup();
    ops.sort_by(|a, b| {
        ctx.cost[b.index()]
            .total_cmp(&ctx.cost[a.index()])
            .then(a.cmp(b))
    });
    ops.into_iter()
        .map(|o| ctx.out_roots[o.index()].clone())
        .filter(|r| !r.is_empty())
        .collect()
}
