//! Candidate evaluation: a genome (split points plus storages kept on purpose) becomes a
//! discard plan ([`super::discard`]), a schedule with bounded recomputation
//! ([`super::recompute`]: every op runs at most twice) and a fitness. The peak comes from
//! [`super::profile`], a one-pass form of `sgc_ir::simulate` (the memory model every tool
//! shares, which still measures the chosen plan).
//!
//! **Fitness.** Without a budget: lower peak, then lower recompute cost, then fewer split
//! points (the reference uses the peak alone). With a budget: plans that
//! fit come first and among them the least recompute cost wins; plans that do not fit are
//! ranked by peak.
//! Infeasible candidates rank last. Evaluations are cached by genome and by discard plan
//! ([`super::discard::key`]), so a generation only pays for the plans it has not seen.

use crate::context::Context;
use crate::sublinear::discard::{self, Discard};
use crate::sublinear::genome::Genome;
use crate::sublinear::recompute;
use sgc_ir::OpId;
use std::cmp::Ordering;

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
        match (obj.budget, obj.balance) {
            (None, None) => by_peak(self, other),
            (None, Some(w)) => w
                .score(self)
                .cmp(&w.score(other))
                .then_with(|| by_peak(self, other)),
            (Some(b), _) => {
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
/// that fit (the others by peak). Without one, with a `balance`: the least balanced score
/// (see [`Balance`]), then the lowest peak; without either: the lowest peak, then the least
/// recompute (MegEngine's rule, with recompute to break its ties).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Objective {
    pub budget: Option<u64>,
    pub balance: Option<Balance>,
}

impl Objective {
    pub fn budget(budget: Option<u64>) -> Objective {
        Objective {
            budget,
            balance: None,
        }
    }
}

/// Memory and recompute weighed equally, each as a share of what there is to gain: a plan
/// scores `(peak - lower bound) / (unplanned peak - lower bound) + recompute / one step`.
/// One point of the achievable memory saving is worth one point of a step's compute, so
/// the pick is the knee of the memory/recompute front: it gives up a little memory only
/// for a larger saving in recompute, which a step pays every time. Compared exactly, as
/// integers over a common denominator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Balance {
    pub lower_bound: u64,
    /// `unplanned peak - lower bound` (at least 1).
    pub span: u64,
    /// Cost units of one step (at least 1).
    pub step_units: u64,
}

impl Balance {
    pub fn of(ctx: &Context<'_>) -> Balance {
        Balance {
            lower_bound: ctx.lower_bound.bytes,
            span: ctx
                .unplanned_peak
                .saturating_sub(ctx.lower_bound.bytes)
                .max(1),
            step_units: ctx.step_units,
        }
    }

    /// The score times `span * step_units`.
    fn score(&self, f: &Fitness) -> u128 {
        let memory = u128::from(f.peak.saturating_sub(self.lower_bound));
        memory * u128::from(self.step_units) + u128::from(f.cost) * u128::from(self.span)
    }
}

/// The schedule of a genome, if it can be built.
pub(crate) fn schedule(ctx: &Context<'_>, genome: &Genome) -> Option<Vec<(OpId, bool)>> {
    let plan = discard::plan(ctx, genome);
    recompute::schedule(ctx, genome, &plan)
        .ok()
        .map(|s| s.steps)
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

/// What a discard plan yields: `(peak, recompute cost units)`, or `None` when its
/// schedule cannot be built. The schedule depends on the genome only through its plan
/// (and the blocks the plan names), so genomes with the same plan share one outcome.
pub(crate) type Outcome = Option<(u64, u64)>;

/// The outcome of `genome`'s discard plan, from scratch.
pub(crate) fn outcome(ctx: &Context<'_>, genome: &Genome, plan: &[Discard]) -> Outcome {
    outcome_in(ctx, genome, plan, &mut Default::default())
}

/// [`outcome`], walked in `scratch`'s buffers.
pub(crate) fn outcome_in(
    ctx: &Context<'_>,
    genome: &Genome,
    plan: &[Discard],
    scratch: &mut recompute::Scratch,
) -> Outcome {
    recompute::peak_and_units(ctx, genome, plan, scratch).ok()
}

/// Evaluates one genome from scratch.
#[cfg(test)]
pub(crate) fn evaluate(ctx: &Context<'_>, genome: &Genome) -> Fitness {
    let plan = discard::plan(ctx, genome);
    fitness_with(outcome(ctx, genome, &plan), genome)
}

/// The recompute cost of a schedule, in units.
pub(crate) fn recompute_units(ctx: &Context<'_>, steps: &[(OpId, bool)]) -> u64 {
    steps
        .iter()
        .filter(|s| s.1)
        .map(|s| ctx.cost_units[s.0.index()])
        .sum()
}

/// The fitness of `genome` given the outcome of its plan.
pub(crate) fn fitness_with(outcome: Outcome, genome: &Genome) -> Fitness {
    outcome.map_or(Fitness::INFEASIBLE, |(peak, cost)| Fitness {
        feasible: true,
        peak,
        cost,
        splits: genome.splits.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sublinear::genome::Rules;
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
        g.rules = Rules::all()[rng.index(8)];
        g
    }

    fn simulated(g: &Graph, steps: &[(OpId, bool)]) -> Option<u64> {
        let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
        sgc_ir::simulate(g, &ops).ok().map(|p| p.peak)
    }

    /// `profile::peak` against `simulate` on planned schedules and on shuffled, truncated and
    /// duplicated step sequences (which exercise the error rules).
    fn check_graph(g: &Graph, rng: &mut SplitMix64, genomes: usize) {
        let ctx = Context::new(g);
        for _ in 0..genomes {
            let genome = random_genome(rng, ctx.n, g.num_tensors());
            let Some(mut steps) = schedule(&ctx, &genome) else {
                continue;
            };
            let plan = discard::plan(&ctx, &genome);
            let walked = recompute::schedule(&ctx, &genome, &plan).expect("scheduled");
            let whole = recompute::scheduled(&ctx, &genome, &plan, false).expect("scheduled");
            assert_eq!(walked.steps, whole.steps, "resumed walk: {genome:?}");
            assert_eq!(walked.live, whole.live, "resumed walk: {genome:?}");
            assert_eq!(
                Some(walked.live.clone()),
                crate::sublinear::profile::live_bytes(&ctx, &steps),
                "{genome:?}"
            );
            assert_eq!(
                crate::sublinear::profile::peak(&ctx, &steps),
                simulated(g, &steps),
                "{genome:?}"
            );
            // The instances at the peak, as the bottleneck climb reads them.
            let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
            let profile = sgc_ir::simulate(g, &ops).expect("a walked schedule runs");
            let p = profile.peak_step.expect("steps") as u32;
            let mut expected: Vec<(u32, u32, u32)> = profile
                .instances
                .iter()
                .filter(|i| i.start as u32 <= p && p <= i.end as u32)
                .map(|i| (i.root.0, i.start as u32, i.end as u32))
                .collect();
            let mut got: Vec<(u32, u32, u32)> =
                crate::sublinear::profile::at_peak(&ctx, &steps, &walked.live)
                    .expect("instances")
                    .iter()
                    .map(|i| (i.root.0, i.start, i.last))
                    .collect();
            expected.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, expected, "{genome:?}");
            let f = evaluate(&ctx, &genome);
            assert_eq!(f, fitness_of(&ctx, &steps, genome.splits.len()));
            assert_eq!(
                outcome(&ctx, &genome, &plan),
                crate::sublinear::profile::peak(&ctx, &steps)
                    .map(|p| (p, recompute_units(&ctx, &steps))),
                "{genome:?}"
            );
            if steps.len() > 1 {
                let (a, b) = (rng.index(steps.len()), rng.index(steps.len()));
                steps.swap(a, b);
                assert_eq!(
                    crate::sublinear::profile::peak(&ctx, &steps),
                    simulated(g, &steps)
                );
                let cut = rng.index(steps.len());
                let dup = steps[cut];
                steps.insert(rng.index(steps.len()), dup);
                steps.truncate(cut.max(1));
                assert_eq!(
                    crate::sublinear::profile::peak(&ctx, &steps),
                    simulated(g, &steps)
                );
            }
        }
    }

    /// The search's evaluator (cached by genome and by discard plan, in parallel batches)
    /// agrees with a from-scratch evaluation under `simulate`, genome by genome.
    #[test]
    fn evaluator_matches_scratch_evaluation() {
        let pool = crate::sublinear::search::pool();
        for seed in 0..30 {
            let g = random_graph(seed, &GenConfig::small());
            let ctx = Context::new(&g);
            let mut ev = crate::sublinear::search::Evaluator::new(&ctx, &pool, None);
            let mut rng = SplitMix64::new(seed);
            for _ in 0..3 {
                let mut batch: Vec<Genome> = (0..8)
                    .map(|_| random_genome(&mut rng, ctx.n, g.num_tensors()))
                    .collect();
                // Near-duplicates: the same splits plus one more, often the same plan.
                let extra: Vec<Genome> = batch
                    .iter()
                    .map(|b| {
                        let mut s = b.splits.clone();
                        s.push(rng.index(ctx.n.max(1)) as u32);
                        Genome::from_splits(s)
                    })
                    .collect();
                ev.eval_batch(&batch);
                batch.extend(extra);
                for (genome, f) in batch.iter().zip(ev.eval_batch(&batch)) {
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

    /// A walk resumed from a prefix state ([`crate::context::Prefixes`]) gives the steps
    /// and the live bytes of the walk from the first op, on every graph of the real
    /// corpus: for the search's own threshold plans (whose first close is right after the
    /// forward pass) and for random genomes (whose gaps may close anywhere), and a walk
    /// that fails fails the same way.
    #[test]
    fn resumed_walks_equal_whole_walks_on_the_real_corpus() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../graphs/real");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("graphs/real/")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        let mut resumed = 0;
        for (k, p) in files.iter().enumerate() {
            let g = sgc_ir::load_any(p).expect("real graph loads");
            let ctx = Context::new(&g);
            let sums = crate::sublinear::thresholds::BlockSums::of(&ctx);
            let p_act = ctx.unplanned_peak.saturating_sub(ctx.persistent_bytes);
            let mut rng = SplitMix64::new(k as u64);
            let mut genomes: Vec<Genome> = [3, 8, 20]
                .iter()
                .map(|&d| crate::sublinear::thresholds::threshold_splits(&sums, p_act / d))
                .collect();
            genomes.extend((0..3).map(|_| random_genome(&mut rng, ctx.n, g.num_tensors())));
            for genome in &genomes {
                let plan = discard::plan(&ctx, genome);
                let a = recompute::schedule(&ctx, genome, &plan);
                let b = recompute::scheduled(&ctx, genome, &plan, false);
                match (a, b) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(a.steps, b.steps, "{}: {genome:?}", p.display());
                        assert_eq!(a.live, b.live, "{}: {genome:?}", p.display());
                    }
                    (Err(a), Err(b)) => assert_eq!(a, b, "{}", p.display()),
                    (a, b) => panic!("{}: {:?} vs {:?}", p.display(), a.is_ok(), b.is_ok()),
                }
                let from = recompute::resumes_at(&ctx, &plan).unwrap_or(0);
                resumed += usize::from(from as usize > ctx.n / 4);
            }
        }
        assert!(files.len() >= 12, "real graphs found: {}", files.len());
        // At least the threshold plans resume past the first quarter of the graph.
        assert!(
            resumed >= files.len() * 3,
            "walks resumed past n/4: {resumed}"
        );
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
