//! Candidate evaluation: a genome (split points plus storages kept on purpose) becomes a
//! discard decision, a schedule and a fitness.
//!
//! **Discard rule.** Split points close blocks; the outputs of a split op are checkpoints.
//! A freeable storage that is neither a checkpoint nor kept is discarded when its largest
//! access gap crosses a split point (its gap-closing reader lies in a later block) and the
//! recomputation at the gap's end is safe (before any in-place write to a persistent
//! tensor it would read). The schedule comes from [`crate::schedule::walk_discards`]; its
//! peak from [`peak_of`], a one-pass form of `sgc_ir::simulate` (the memory model every tool
//! shares, which still measures the chosen plan) that builds no instance list.
//!
//! **Fitness.** Without a budget: lower peak, then lower recompute cost, then fewer split
//! points (the reference uses the peak alone); the search's final pick also requires no
//! more recompute than Chen's sqrt(n) plan (see [`Objective`]). With a budget: plans that
//! fit come first and among them the least recompute cost wins; plans that do not fit are
//! ranked by peak.
//! Infeasible candidates rank last. Evaluations are cached by genome and by discard
//! decision ([`decision_key`]), so a generation only pays for the decisions it has not seen.

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
    /// Recompute cost in the context's integer units (exact in any summation order).
    pub cost: u64,
    pub splits: usize,
}

impl Fitness {
    pub const INFEASIBLE: Fitness = Fitness {
        feasible: false,
        peak: u64::MAX,
        cost: u64::MAX,
        splits: usize::MAX,
    };

    /// Total order: `Less` is better.
    pub fn cmp(&self, other: &Fitness, obj: Objective) -> Ordering {
        let by_peak = |a: &Fitness, b: &Fitness| {
            a.peak
                .cmp(&b.peak)
                .then(a.cost.cmp(&b.cost))
                .then(a.splits.cmp(&b.splits))
        };
        let first = other.feasible.cmp(&self.feasible);
        if first != Ordering::Equal {
            return first;
        }
        match obj.budget {
            None => {
                let over = |f: &Fitness| obj.cost_cap.is_some_and(|c| f.cost > c);
                over(self)
                    .cmp(&over(other))
                    .then_with(|| by_peak(self, other))
            }
            Some(b) => {
                let (fa, fb) = (self.peak <= b, other.peak <= b);
                match (fa, fb) {
                    (true, true) => self
                        .cost
                        .cmp(&other.cost)
                        .then(self.peak.cmp(&other.peak))
                        .then(self.splits.cmp(&other.splits)),
                    (false, false) => by_peak(self, other),
                    _ => fb.cmp(&fa),
                }
            }
        }
    }
}

/// What the search optimises. With a memory `budget`: the least recompute cost among plans
/// that fit (the others by peak). Without one: the lowest peak, among plans that recompute
/// at most `cost_cap` units when a cap is set (the others after them, by peak). The
/// sublinear search sets the cap to Chen's sqrt(n) plan's cost (the classic overhead of
/// about one extra forward pass) for its final pick when its lowest-peak plan recomputes
/// more; Chen's plan is in the population, so the pick is never worse than it in either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Objective {
    pub budget: Option<u64>,
    pub cost_cap: Option<u64>,
}

impl Objective {
    pub fn budget(budget: Option<u64>) -> Objective {
        Objective {
            budget,
            cost_cap: None,
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
            cost: recompute_units(ctx, steps),
            splits,
        },
        Err(_) => Fitness::INFEASIBLE,
    }
}

/// Evaluates one genome from scratch.
#[cfg(test)]
pub(crate) fn evaluate(ctx: &Context<'_>, genome: &Genome) -> Fitness {
    fitness_with(outcome(ctx, &discards(ctx, genome)), genome)
}

/// What a discard decision yields: `(peak, recompute cost units)`, or `None` when its
/// schedule cannot be built. The schedule depends on the genome only through the
/// decision, so genomes with the same decision share one outcome.
pub(crate) type Outcome = Option<(u64, u64)>;

/// The recompute cost of a schedule, in units.
pub(crate) fn recompute_units(ctx: &Context<'_>, steps: &[(OpId, bool)]) -> u64 {
    steps
        .iter()
        .filter(|s| s.1)
        .map(|s| ctx.cost_units[s.0.index()])
        .sum()
}

/// The outcome of a discard decision, from scratch.
#[cfg(test)]
pub(crate) fn outcome(ctx: &Context<'_>, discard: &[bool]) -> Outcome {
    crate::trace::trace(ctx, discard, None).map(|t| t.outcome())
}

/// The fitness of `genome` given the outcome of its decision.
pub(crate) fn fitness_with(outcome: Outcome, genome: &Genome) -> Fitness {
    outcome.map_or(Fitness::INFEASIBLE, |(peak, cost)| Fitness {
        feasible: true,
        peak,
        cost,
        splits: genome.splits.len(),
    })
}

/// A compact, exact key of a discard decision: the discarded roots in id order.
pub(crate) fn decision_key(discard: &[bool]) -> Vec<u32> {
    (0..discard.len() as u32)
        .filter(|&r| discard[r as usize])
        .collect()
}

/// The peak `sgc_ir::simulate` reports for `steps` (`None` where it reports an error),
/// in one pass without building the storage instances.
#[cfg(test)]
pub(crate) fn peak_of(ctx: &Context<'_>, steps: &[(OpId, bool)]) -> Option<u64> {
    let (live, _) = crate::trace::live_profile(ctx, steps, None, |r| ctx.kept[r])?;
    Some(
        ctx.persistent_bytes
            .saturating_add(live.into_iter().max().unwrap_or(0)),
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use sgc_ir::testgen::{random_graph, GenConfig, SplitMix64};
    use sgc_ir::Graph;

    fn random_genome(rng: &mut SplitMix64, n: usize, roots: usize) -> Genome {
        let k = rng.index(n.min(12) + 1);
        let mut g = Genome::from_splits((0..k).map(|_| rng.index(n.max(1)) as u32).collect());
        if rng.chance(0.3) && roots > 0 {
            g.keep = (0..3).map(|_| rng.index(roots) as u32).collect();
            g.keep.sort_unstable();
            g.keep.dedup();
        }
        g
    }

    fn simulated(g: &Graph, steps: &[(OpId, bool)]) -> Option<u64> {
        let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
        sgc_ir::simulate(g, &ops).ok().map(|p| p.peak)
    }

    /// `peak_of` against `simulate` on planned schedules and on shuffled, truncated and
    /// duplicated step sequences (which exercise the error rules).
    fn check_graph(g: &Graph, rng: &mut SplitMix64, genomes: usize) {
        let ctx = Context::new(g);
        for _ in 0..genomes {
            let genome = random_genome(rng, ctx.n, g.num_tensors());
            let Some(mut steps) = schedule(&ctx, &genome) else {
                continue;
            };
            assert_eq!(peak_of(&ctx, &steps), simulated(g, &steps), "{genome:?}");
            let f = evaluate(&ctx, &genome);
            assert_eq!(f, fitness_of(&ctx, &steps, genome.splits.len()));
            if steps.len() > 1 {
                let (a, b) = (rng.index(steps.len()), rng.index(steps.len()));
                steps.swap(a, b);
                assert_eq!(peak_of(&ctx, &steps), simulated(g, &steps));
                let cut = rng.index(steps.len());
                let dup = steps[cut];
                steps.insert(rng.index(steps.len()), dup);
                steps.truncate(cut.max(1));
                assert_eq!(peak_of(&ctx, &steps), simulated(g, &steps));
            }
        }
    }

    /// The search's evaluator (cached by genome and by discard decision, in parallel
    /// batches, children walked against their parents' traces) agrees with a from-scratch
    /// evaluation under `simulate`, genome by genome.
    #[test]
    fn evaluator_matches_scratch_evaluation() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        for seed in 0..30 {
            let g = random_graph(seed, &GenConfig::small());
            let ctx = Context::new(&g);
            let mut ev = crate::search::Evaluator::new(&ctx, &pool, None, None);
            let mut rng = SplitMix64::new(seed);
            for _ in 0..3 {
                let mut batch: Vec<Genome> = (0..8)
                    .map(|_| random_genome(&mut rng, ctx.n, g.num_tensors()))
                    .collect();
                // Near-duplicates: the same splits plus one more, often the same decision.
                let extra: Vec<Genome> = batch
                    .iter()
                    .map(|b| {
                        let mut s = b.splits.clone();
                        s.push(rng.index(ctx.n.max(1)) as u32);
                        Genome::from_splits(s)
                    })
                    .collect();
                let parents: Vec<Vec<Genome>> = batch
                    .iter()
                    .map(|_| Vec::new())
                    .chain(batch.iter().map(|b| vec![b.clone()]))
                    .collect();
                batch.extend(extra);
                ev.eval_batch(&batch[..8]);
                // The near-duplicates are evaluated against their originals' traces.
                for (genome, f) in batch.iter().zip(ev.eval_children(&batch, &parents)) {
                    let scratch = schedule(&ctx, genome).map_or(Fitness::INFEASIBLE, |s| {
                        fitness_of(&ctx, &s, genome.splits.len())
                    });
                    assert_eq!(f, scratch, "seed {seed}: {genome:?}");
                    assert_eq!(f, evaluate(&ctx, genome));
                }
            }
        }
    }

    #[test]
    fn peak_matches_simulate_on_random_graphs() {
        for seed in 0..60 {
            let g = random_graph(seed, &GenConfig::small());
            check_graph(&g, &mut SplitMix64::new(seed), 12);
        }
    }

    #[test]
    fn peak_matches_simulate_on_zoo_graphs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../graphs");
        let mut n = 0;
        for e in std::fs::read_dir(dir).expect("graphs/") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "json") {
                let g = sgc_ir::load_any(&p).expect("zoo graph loads");
                check_graph(&g, &mut SplitMix64::new(n), 4);
                n += 1;
            }
        }
        assert!(n >= 5, "zoo graphs found: {n}");
    }
}
