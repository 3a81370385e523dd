//! The starting population of the sublinear search: plans from thresholds on the live bytes
//! a block creates, and Chen's plans.
//!
//! **Threshold to plan** ([`threshold_splits`]): walk the traced order summing the bytes of
//! the storages created in the current block that are still live (unplanned order); when the
//! sum reaches the threshold, close the block at that op. [`budget_splits`] counts the
//! checkpoints kept so far against the threshold too (Chen's greedy segmentation under a
//! memory budget).
//!
//! **Which thresholds** ([`initial_population`]): with P the unplanned activation peak, the
//! baseline is one block (no recomputation); then P/2, P/4, ... down to 1 KiB; then
//! `thresh_tries` evenly spaced thresholds i*P/(N+1); then `thresh_tries` over
//! [best/2, 2*best] around the best threshold. Chen's sqrt(n) split set, its variants with
//! segments 1/4, 1/2, 2 and 4 times as long, and Chen's greedy segmentations under
//! [`BUDGET_RUNGS`] budgets join the population too, so the search starts at least as good
//! as that baseline.

use crate::context::Context;
use crate::sublinear::chen;
use crate::sublinear::evaluate::Fitness;
use crate::sublinear::genome::Genome;
use crate::sublinear::search::{dedup, sort_population, Evaluator, Member};

/// Memory budgets (i/24 of the unplanned activation peak) of Chen's greedy segmentations in
/// the starting population: enough rungs that some block boundary falls near each peak.
const BUDGET_RUNGS: u64 = 24;

/// The starting population, deduplicated and sorted best first, and Chen's plan (which the
/// search's last steps compare against).
pub(crate) fn initial_population(ev: &mut Evaluator<'_>, tries: usize) -> (Vec<Member>, Member) {
    let ctx = ev.ctx;
    let base = Genome::default();
    // Thresholds are in activation bytes, as the block sums they are compared with.
    let p = ev.eval(&base).peak.saturating_sub(ctx.persistent_bytes);
    let n = tries as u64;
    let thresholds = ladder(p, n);
    let mut pop = vec![Member {
        genome: base,
        fitness: ev.eval(&Genome::default()),
    }];
    let chen = chen::best(ctx);
    let chen_fit = ev.eval(&chen);
    let sums = BlockSums::of(ctx);
    if let Some(bt) = add_thresholds(ev, &sums, &mut pop, &thresholds) {
        add_thresholds(ev, &sums, &mut pop, &around(bt, n));
    }
    let budgets = (1..=BUDGET_RUNGS).map(|i| mul_div(p, i, BUDGET_RUNGS));
    let seeds: Vec<Genome> = [0.25, 0.5, 1.0, 2.0, 4.0]
        .into_iter()
        .map(|k| chen::scaled(ctx, k))
        .chain(budgets.map(|b| budget_splits(&sums, b)))
        .chain([chen.clone()])
        .collect();
    let fits = ev.eval_batch(&seeds);
    pop.extend(
        seeds
            .into_iter()
            .zip(fits)
            .map(|(genome, fitness)| Member { genome, fitness }),
    );
    dedup(&mut pop);
    sort_population(&mut pop, ev.objective);
    let chen = Member {
        genome: chen,
        fitness: chen_fit,
    };
    (pop, chen)
}

/// P/2, P/4, ... down to 1 KiB, then `n` thresholds i*P/(n+1) evenly spaced below `p`.
fn ladder(p: u64, n: u64) -> Vec<u64> {
    let mut thresholds: Vec<u64> = Vec::new();
    let mut t = p / 2;
    while t >= 1024 {
        thresholds.push(t);
        t /= 2;
    }
    thresholds.extend((1..=n).map(|i| mul_div(p, i, n + 1)));
    thresholds
}

/// `n` thresholds evenly spaced over [best/2, 2*best].
fn around(best: u64, n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| {
            (best / 2).saturating_add(mul_div(
                best.saturating_add(best / 2),
                i,
                n.saturating_sub(1).max(1),
            ))
        })
        .collect()
}

/// Evaluates the split sets of `thresholds`, adds them to `pop` and returns the threshold
/// of the best one.
fn add_thresholds(
    ev: &mut Evaluator<'_>,
    sums: &BlockSums,
    pop: &mut Vec<Member>,
    thresholds: &[u64],
) -> Option<u64> {
    let genomes: Vec<Genome> = thresholds
        .iter()
        .map(|&t| threshold_splits(sums, t))
        .collect();
    let fits = ev.eval_batch(&genomes);
    let mut best: Option<(Fitness, u64)> = None;
    for ((genome, fitness), &t) in genomes.into_iter().zip(fits).zip(thresholds) {
        if best.is_none_or(|(bf, _)| fitness.cmp(&bf, ev.objective).is_lt()) {
            best = Some((fitness, t));
        }
        pop.push(Member { genome, fitness });
    }
    ev.report("threshold search", pop.len(), pop.len());
    best.map(|b| b.1)
}

fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    (u128::from(a) * u128::from(b) / u128::from(c.max(1))) as u64
}

/// Closes a block whenever the live bytes created in it reach `threshold`: walking the
/// traced order, a storage made in the current block and read later adds its bytes when it
/// is made and gives them back after its last access; the block closes after an op whose
/// sum reaches the threshold (the last op always closes one).
pub(crate) fn threshold_splits(sums: &BlockSums, threshold: u64) -> Genome {
    block_splits(sums, threshold, false)
}

/// [`threshold_splits`] where the checkpoints kept so far count against the threshold too
/// (Chen's greedy segmentation under a memory budget): the backward pass recomputes a
/// block while every earlier block's checkpoint is still held, so later blocks get
/// shorter.
pub(crate) fn budget_splits(sums: &BlockSums, budget: u64) -> Genome {
    block_splits(sums, budget, true)
}

/// What [`block_splits`] sums, per traced position: the bytes of the activation roots made
/// there that are read later, and the roots whose last access it is (with the position
/// that made them). The same for every threshold, so made once per search.
pub(crate) struct BlockSums {
    created: Vec<u64>,
    /// Position `i`'s dying roots are `dying[dying_at[i]..dying_at[i + 1]]`: (made at, bytes).
    dying: Vec<(usize, u64)>,
    dying_at: Vec<usize>,
}

impl BlockSums {
    pub(crate) fn of(ctx: &Context<'_>) -> BlockSums {
        let g = ctx.g;
        let mut created = vec![0u64; ctx.n];
        let mut by_last: Vec<(usize, usize, u64)> = Vec::new();
        for t in g.tensor_ids() {
            let acc = &ctx.accesses[t.index()];
            let made = g.producer(t).filter(|_| g.storage_root(t) == t);
            let (Some(p), [_, .., last]) = (made, &acc[..]) else {
                continue;
            };
            if g.tensor(t).kind == sgc_ir::TensorKind::Activation {
                created[p.index()] += ctx.size(t);
                by_last.push((*last as usize, p.index(), ctx.size(t)));
            }
        }
        // Stable by position, so each position's roots stay in id order.
        by_last.sort_by_key(|d| d.0);
        let mut dying_at = vec![0usize; ctx.n + 1];
        for d in &by_last {
            dying_at[d.0 + 1] += 1;
        }
        for i in 0..ctx.n {
            dying_at[i + 1] += dying_at[i];
        }
        BlockSums {
            created,
            dying: by_last.into_iter().map(|(_, p, b)| (p, b)).collect(),
            dying_at,
        }
    }
}

fn block_splits(sums: &BlockSums, threshold: u64, count_checkpoints: bool) -> Genome {
    let n = sums.created.len();
    let mut splits = Vec::new();
    let (mut sum, mut start, mut kept) = (0u64, 0usize, 0u64);
    for i in 0..n {
        sum += sums.created[i];
        for &(made, bytes) in &sums.dying[sums.dying_at[i]..sums.dying_at[i + 1]] {
            if made >= start {
                sum -= bytes;
            }
        }
        if sum.saturating_add(kept) >= threshold || i + 1 == n {
            splits.push(i as u32);
            if count_checkpoints {
                kept += sums.created[i];
            }
            sum = 0;
            start = i + 1;
        }
    }
    Genome::from_splits(splits)
}
