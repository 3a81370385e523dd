//! The sublinear-memory search (MegEngine's static-graph method), with a fitness that knows
//! the budget.
//!
//! 1. **Threshold to plan.** Walk the traced order summing the bytes of storages created in
//!    the current block that are still live (unplanned order); when the sum reaches the
//!    threshold, close the block at that op.
//! 2. **Threshold search.** The baseline is one block (no recomputation, peak P); then
//!    thresholds P/2, P/4, ... down to 1 KiB; then `thresh_tries` evenly spaced thresholds
//!    i*P/(N+1); then `thresh_tries` over [best/2, 2*best] around the best threshold (P:
//!    the unplanned activation peak). Chen's sqrt(n) split set (and its variants with
//!    segments 1/4, 1/2, 2 and 4 times as long) joins the population too, so the search
//!    starts at least as good as that baseline; so do Chen's greedy segmentations under 24
//!    memory budgets ([`budget_splits`]).
//! 3. **Genetic refinement** ([`crate::genetic`]) for `genetic_iters` generations in five
//!    independent runs ([`ISLANDS`]), with a local hill climb ([`crate::polish`]) on the
//!    best plan before and after; one run starts from the climbed population, one from the
//!    population climbed also by keeping its costliest recomputations
//!    ([`crate::polish::costly`]), three from the population before the first climb, so
//!    the search does not stay in one climb's basin.
//! 4. **Memory for speed.** Recomputed ops are turned back into checkpoints, the most
//!    expensive first, each kept only while the peak stays at or under the bound and the
//!    recompute cost does not rise. The bound is `lb_memory` or the budget (the smaller if
//!    both); without either it is the best peak itself, so the plan's recompute cost drops
//!    at no memory cost.
//!
//! 5. **Least recompute at the peak** ([`at_peak`]): without a budget, the peak reached
//!    becomes one, and the plan that recomputes least under it is searched for again;
//!    then a plan a little above it may be traded for ([`near_peak`]).
//! 6. **Last climb** ([`last_climb`]): from the pick, under its peak, moves judged after
//!    memory for speed, whose storages are ranked by what each saves.
//!
//! Chen's plan is in the population, so the pick never peaks above it; with Chen's peak as
//! the budget, it never recomputes more either (tests check both on every graph).

use crate::context::Context;
use crate::evaluate::{Fitness, Objective};
use crate::genetic;
use crate::genome::Genome;
use crate::relax::relax;
use crate::search::{sort_population, Evaluator, Member};
use crate::PlanOptions;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Independent runs of the genetic refinement, each with its own random stream; the best of
/// all is kept. One run's result varies widely with its seed on the real corpus. The first
/// [`CLIMBED_ISLANDS`] start from a climbed population ([`COSTLY_ISLAND`] from one climbed
/// with more moves), which refines the climb's basin
/// (DenseNet-121, GPT-2 and ViT-B/16 reach their lowest peaks there); the others start
/// from the population before the climb, whose threshold plans lead to other basins: with
/// one such island, Inception-v3's lowest peak was 1.044x, 1.010x and 1.071x the
/// reference's on seeds 0, 4 and 5 (seeds 1-3 reached it); with three, every seed 0-5
/// reaches it or goes below. The two more islands cost 1.1-1.7x the schedules built
/// (`sgc plan --json`'s `search`, before and after).
const ISLANDS: u64 = 5;

/// Islands of the main refinement that start from a climbed population.
const CLIMBED_ISLANDS: u64 = 2;

/// The island of the main refinement that starts from the population climbed with the
/// costliest recomputations kept too ([`crate::polish::costly`]), in place of a second
/// island from the plain climb. On the real corpus at seeds 0-6 (`sgc plan --seed N`),
/// ResNet-50 recomputes 18.7-20.3% of a step and DenseNet-121 peaks 0.728x the
/// reference's on every seed; commit 72325ab compares this with the plain island
/// (23.1-26.0% and 0.76-0.91x, for 5.9% fewer schedules built).
const COSTLY_ISLAND: u64 = 1;

/// Islands of the fixed-peak refinement ([`at_peak`]).
const AT_PEAK_ISLANDS: u64 = 3;

/// Offset of the fixed-peak refinement's random streams from the main search's.
const AT_PEAK_STREAM: u64 = 0x5EED_0FA7_BEA4;

/// How far above the peak the fixed-peak refinement ([`at_peak`]) looks for cheaper plans
/// to climb under it, as fractions 1/k of the peak: a ladder about four times as wide at
/// each rung, up to 5%. The climb from up to 5% above reaches plans the nearer starts do
/// not: `sgc plan graphs/real/unet.json.gz` recomputes 19.7% of a step at the peak where
/// it recomputed 23.7% with the rungs up to 1%, DenseNet-121 24.4% instead of 25.5% (the
/// commit that added the rung compares them over 40 traced graphs and 3 seeds).
const ABOVE_PEAK: [u64; 4] = [2000, 500, 100, 20];

/// Runs the whole search and returns the best genome and its fitness.
pub(crate) fn search(ev: &mut Evaluator<'_>, opts: &PlanOptions) -> (Genome, Fitness) {
    let ctx = ev.ctx;
    let base = Genome::default();
    // Thresholds are in activation bytes, as the block sums they are compared with.
    let p = ev.eval(&base).peak.saturating_sub(ctx.persistent_bytes);
    let mut thresholds: Vec<u64> = Vec::new();
    let mut t = p / 2;
    while t >= 1024 {
        thresholds.push(t);
        t /= 2;
    }
    let n = opts.thresh_tries as u64;
    thresholds.extend((1..=n).map(|i| mul_div(p, i, n + 1)));
    let mut pop = vec![Member {
        genome: base,
        fitness: ev.eval(&Genome::default()),
    }];
    let chen = crate::chen::best(ctx);
    let chen_fit = ev.eval(&chen);
    let sums = BlockSums::of(ctx);
    let best_t = add_thresholds(ev, &sums, &mut pop, &thresholds);
    if let Some(bt) = best_t {
        let around: Vec<u64> = (0..n)
            .map(|i| {
                (bt / 2).saturating_add(mul_div(
                    bt.saturating_add(bt / 2),
                    i,
                    n.saturating_sub(1).max(1),
                ))
            })
            .collect();
        add_thresholds(ev, &sums, &mut pop, &around);
    }
    let budgets = (1..=24u64).map(|i| mul_div(p, i, 24));
    let seeds: Vec<Genome> = [0.25, 0.5, 1.0, 2.0, 4.0]
        .into_iter()
        .map(|k| crate::chen::scaled(ctx, k))
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
    let unclimbed = pop.clone();
    // Both climbs start from the best plan with its peak's blocks reshaped, once.
    let shaped = crate::polish::bottleneck(ev, &pop[0]);
    let climbed = crate::polish::polish(ev, &shaped);
    push_best(&mut pop, climbed);
    let initial = pop.clone();
    if opts.genetic_iters > 0 {
        let mut costly = unclimbed.clone();
        let kept = crate::polish::costly(ev, &shaped);
        let kept = crate::polish::polish(ev, &kept);
        push_best(&mut costly, kept);
        let mut islands: Vec<genetic::Island> = (0..ISLANDS)
            .map(|k| genetic::Island {
                // The later islands start from the population before the climb: the climb
                // pulls every member towards one basin (on Inception-v3 the climbed
                // islands never leave it), and an unclimbed island keeps the threshold
                // plans' diversity, as MegEngine's own refinement does. The costly
                // island's climb also keeps the costliest recomputations.
                pop: if k == COSTLY_ISLAND {
                    costly.clone()
                } else if k < CLIMBED_ISLANDS {
                    pop.clone()
                } else {
                    unclimbed.clone()
                },
                rng: ChaCha8Rng::seed_from_u64(
                    opts.seed
                        .wrapping_add(k.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                ),
            })
            .collect();
        genetic::refine(ev, &mut islands, opts.genetic_iters, opts.pool_size);
        let all: Vec<Member> = islands.into_iter().flat_map(|i| i.pop).collect();
        pop = all;
        dedup(&mut pop);
        climb(ev, &mut pop);
    }
    let bound = match (opts.budget, opts.lb_memory) {
        (Some(b), Some(l)) => Some(b.min(l)),
        (b, l) => b.or(l),
    };
    let obj = ev.objective;
    let chen = Member {
        genome: chen,
        fitness: chen_fit,
    };
    let ours = finish(ev, pop.clone(), bound, &chen);
    // The finishing steps are greedy, so refinement could end worse than no refinement
    // after them; finishing the initial population too makes it never do.
    let picked = if opts.genetic_iters == 0 {
        ours
    } else {
        let theirs = finish(ev, initial, bound, &chen);
        if theirs.1.cmp(&ours.1, obj).is_lt() {
            theirs
        } else {
            ours
        }
    };
    if bound.is_some() || obj.balance.is_some() {
        // A budget is already the fixed-peak objective; a balance weighs the peak itself.
        return picked;
    }
    let cap = chen.fitness.peak;
    ev.stats.before_fixed_peak = Some(crate::search::Traded {
        peak: picked.1.peak,
        recompute_units: picked.1.cost,
        step_units: ev.ctx.step_units,
    });
    let picked = at_peak(ev, opts, pop, picked);
    let picked = near_peak(ev, opts, picked, cap);
    last_climb(ev, picked)
}

/// The share of the schedules built before it after which [`last_climb`] starts no round: a
/// fortieth. Over the 12 corpus graphs and 28 other traced models at seeds 0-2, a twentieth
/// changes one plan (Swin-T at batch 32, seed 0: 16.9% of a step instead of 18.1%; 19.1%
/// without the climb) and lets MobileNetV3 build 10.6% more schedules instead of 4.8%, on
/// the graph whose plan time is closest to its target (10x below the reference's).
const LAST_CLIMB_SHARE: usize = 40;

/// The search's last step: the climb that judges moves after memory for speed ranked by
/// savings ([`crate::polish::relaxed`]), from the pick and under its peak, so it never
/// raises the peak or the recompute. It starts no round once it has built
/// 1/[`LAST_CLIMB_SHARE`] as many schedules as the search before it; a round can end past
/// that (on the real corpus at seed 0 the climb adds 0.3-11% to the schedules built).
fn last_climb(ev: &mut Evaluator<'_>, picked: (Genome, Fitness)) -> (Genome, Fitness) {
    let level = picked.1.peak;
    let obj = Objective::budget(Some(level));
    let saved_limit = ev.limit.replace(
        ev.stats
            .evaluated
            .saturating_add(ev.stats.evaluated / LAST_CLIMB_SHARE),
    );
    let saved = std::mem::replace(&mut ev.objective, obj);
    let start = Member {
        genome: picked.0,
        fitness: picked.1,
    };
    let m = crate::polish::relaxed(ev, start, level);
    ev.objective = saved;
    ev.limit = saved_limit;
    (m.genome, m.fitness)
}

/// What `sublinear` (goal `lowest-peak`) asks of a trade next to the lowest peak
/// ([`near_peak`]): each 1% more memory must save at least 20% of a step in recompute
/// (recompute in steps over relative memory growth).
pub const PEAK_WORTH: u64 = 20;

/// How far above the lowest peak [`near_peak`] looks, as a fraction of it (1/100).
pub const NEAR_PEAK_SPAN: u64 = 100;

/// Steep trades next to the lowest peak. The lowest-peak rule ranks any lower peak above any
/// saving in recompute, however small the peak difference: on the real LSTM language model
/// the lowest peak found recomputes 8.2% of a step, and a plan 0.07% above it 5.6% (and
/// its arena is 2.4% smaller: `sgc plan` prints both, the lowest-peak plan with its peak as
/// `--budget` and `--budget-of peak`). The recompute is paid every step. So among the plans
/// evaluated ([`crate::search::Front`]) that peak above the pick by at most 1/100 of it
/// (and no higher than Chen's plan, so the pick never peaks above that), the one
/// minimising `recompute / step + PEAK_WORTH * (peak / pick's peak - 1)` is refined with
/// its peak as the budget ([`refine_under`]). It replaces the pick when it scores lower and
/// the trade holds in device bytes too: the recompute it saves, in steps, is at least
/// `PEAK_WORTH` times the relative growth of the device floor
/// ([`crate::device::device_floor`]: the aligned live peak with in-place chains merged, plus
/// the persistent bytes; no arena is placed). The memory model's peak does not see in-place
/// sharing, so a plan a little above the lowest peak can need more device memory than its
/// peak says, when it loses an output written over its input; the floor turns such a trade
/// down. Where the front is flat next to the lowest peak nothing moves.
fn near_peak(
    ev: &mut Evaluator<'_>,
    opts: &PlanOptions,
    picked: (Genome, Fitness),
    cap: u64,
) -> (Genome, Fitness) {
    let step = ev.ctx.step_units;
    let Some(m) = near_candidate(&ev.front.members, &picked.1, cap, step).cloned() else {
        return picked;
    };
    let r = refine_under(ev, &m, m.fitness.peak);
    let knee = if r.1.feasible && r.1.peak <= m.fitness.peak && r.1.cost < m.fitness.cost {
        r
    } else {
        (m.genome, m.fitness)
    };
    let device = |g: &Genome| {
        let steps = crate::evaluate::schedule(ev.ctx, g)?;
        crate::device::device_floor(ev.ctx, opts, &steps).ok()
    };
    // The score already makes the trade steep in the memory model's peak.
    let saved = picked.1.cost.saturating_sub(knee.1.cost);
    match (device(&picked.0), device(&knee.0)) {
        (Some(a), Some(b)) if steep(saved, step, a, b) => {
            ev.stats.traded_from = Some(crate::search::Traded {
                peak: picked.1.peak,
                recompute_units: picked.1.cost,
                step_units: step,
            });
            knee
        }
        _ => picked,
    }
}

/// The plan of `front` (by increasing peak) that [`near_peak`] trades the pick for: peaking
/// above it by at most 1/[`NEAR_PEAK_SPAN`] of its peak and at most `cap`, with the lowest
/// score `recompute / step + PEAK_WORTH * (peak / pick's peak - 1)`, when that is below the
/// pick's (the first such on a tie). `step`: the cost units of one step.
fn near_candidate<'m>(
    front: &'m [Member],
    pick: &Fitness,
    cap: u64,
    step: u64,
) -> Option<&'m Member> {
    let low = pick.peak;
    let cap = cap.min(low.saturating_add(low / NEAR_PEAK_SPAN));
    // The score times `step * low`, exact in integers.
    let score = |f: &Fitness| {
        u128::from(f.cost) * u128::from(low)
            + u128::from(PEAK_WORTH) * u128::from(f.peak.saturating_sub(low)) * u128::from(step)
    };
    front
        .iter()
        .filter(|m| m.fitness.feasible && m.fitness.peak > low && m.fitness.peak <= cap)
        .min_by_key(|m| score(&m.fitness))
        .filter(|m| score(&m.fitness) < score(pick))
}

/// Whether saving `saved` cost units (of `step` per step) is worth growing memory from
/// `base` to `grown` bytes: `saved / step >= PEAK_WORTH * (grown - base) / base`, in
/// integers. Shrinking memory always is.
fn steep(saved: u64, step: u64, base: u64, grown: u64) -> bool {
    let added = u128::from(grown.saturating_sub(base));
    u128::from(saved) * u128::from(base) >= u128::from(PEAK_WORTH) * added * u128::from(step)
}

/// Fixed-peak refinement: the least recompute at the peak the search reached. The
/// lowest-peak search ranks any lower peak above any saving in recompute, so it ends on the
/// first plan that reaches its best peak, not the cheapest one there (on the real ViT-B/16
/// at seed 0 this stage takes recompute from 22.1% to 21.1% of a step at the same peak).
/// Here the peak is a budget and recompute the objective, from these starts, each climbed
/// ([`crate::polish`]) and relaxed ([`relax`]) under it:
/// 1. with `genetic_iters` > 0, the best of a genetic refinement ([`AT_PEAK_ISLANDS`]
///    islands, half as many generations as the main search) bred from every plan of the
///    population at or under the peak, the pick included (the refinement keeps the best
///    plan it has seen, so this start is at least as good as the pick); without
///    generations, the pick itself (a climb from the pick as well would repeat work the
///    bred start already covers);
/// 2. the cheapest plans evaluated so far that peak above it by at most 1/2000, 1/500,
///    1/100 and 1/20 of it ([`ABOVE_PEAK`]): the climbs push them under the peak where
///    reshaping its blocks can, and they recompute less than the pick to begin with.
///
/// The cheapest result that fits wins, the pick if none is cheaper, so the stage never
/// raises the peak or the recompute.
fn at_peak(
    ev: &mut Evaluator<'_>,
    opts: &PlanOptions,
    pop: Vec<Member>,
    picked: (Genome, Fitness),
) -> (Genome, Fitness) {
    let peak = picked.1.peak;
    let obj = Objective::budget(Some(peak));
    // This stage builds at most as many schedules as the search before it: its climbs
    // from several starts otherwise grow with the number of blocks (on a 30k-op
    // transformer 3.6 times the search, the largest part of the plan time), while on the
    // real corpus they stay within 0.3-0.8 times the search, below the limit.
    let saved_limit = ev.limit.replace(ev.stats.evaluated.saturating_mul(2));
    let saved = std::mem::replace(&mut ev.objective, obj);
    let pick = Member {
        genome: picked.0,
        fitness: picked.1,
    };
    let mut starts = Vec::new();
    if opts.genetic_iters == 0 {
        starts.push(pick.clone());
    } else {
        let mut pop: Vec<Member> = pop
            .into_iter()
            .filter(|m| m.fitness.feasible && m.fitness.peak <= peak)
            .chain([pick.clone()])
            .collect();
        dedup(&mut pop);
        let mut islands: Vec<genetic::Island> = (0..AT_PEAK_ISLANDS)
            .map(|k| genetic::Island {
                pop: pop.clone(),
                rng: ChaCha8Rng::seed_from_u64(
                    opts.seed
                        .wrapping_add(AT_PEAK_STREAM)
                        .wrapping_add(k.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                ),
            })
            .collect();
        genetic::refine(
            ev,
            &mut islands,
            opts.genetic_iters.div_ceil(2),
            opts.pool_size,
        );
        let mut bred: Vec<Member> = islands.into_iter().flat_map(|i| i.pop).collect();
        sort_population(&mut bred, obj);
        starts.extend(bred.into_iter().next());
    }
    for e in ABOVE_PEAK {
        let above = ev
            .front
            .cheapest_under(peak.saturating_add(peak / e))
            .cloned();
        starts.extend(above.filter(|m| m.fitness.peak > peak));
    }
    let mut best = (pick.genome, pick.fitness);
    for m in starts {
        if ev.spent() {
            break;
        }
        let c = crate::polish::bottleneck(ev, &m);
        let c = crate::polish::polish(ev, &c);
        if c.fitness.feasible && c.fitness.peak <= peak {
            let r = relax(ev, c.genome, c.fitness, peak);
            if r.1.cmp(&best.1, obj).is_lt() {
                best = r;
            }
        }
    }
    ev.objective = saved;
    ev.limit = saved_limit;
    best
}

/// The plan recomputing least under `level` reachable from `start` by the local climbs
/// and the memory-for-speed step, with `level` as the budget (for the budget ladder of
/// [`crate::budget`]); everything it evaluates joins the evaluator's front.
pub(crate) fn refine_under(
    ev: &mut Evaluator<'_>,
    start: &Member,
    level: u64,
) -> (Genome, Fitness) {
    let saved = std::mem::replace(&mut ev.objective, Objective::budget(Some(level)));
    let c = crate::polish::bottleneck(ev, start);
    let c = crate::polish::polish(ev, &c);
    let out = if c.fitness.feasible && c.fitness.peak <= level {
        relax(ev, c.genome, c.fitness, level)
    } else {
        (c.genome, c.fitness)
    };
    ev.objective = saved;
    out
}

/// The search's final pick from a population (Chen's plan added): the memory-for-speed
/// step on the best plan, and with a bound on the lowest-peak plan too.
fn finish(
    ev: &mut Evaluator<'_>,
    mut pop: Vec<Member>,
    bound: Option<u64>,
    chen: &Member,
) -> (Genome, Fitness) {
    pop.push(chen.clone());
    sort_population(&mut pop, ev.objective);
    let best = pop[0].clone();
    let Some(bound) = bound else {
        // Without a bound, trade nothing: keep only what the best peak already affords.
        return relax(ev, best.genome, best.fitness, best.fitness.peak);
    };
    // With a bound, relax the best plan under it, the lowest-peak plan and the cheapest
    // plan under it ever evaluated, and keep the cheapest result that fits.
    sort_population(&mut pop, Objective::default());
    let lowest = pop[0].clone();
    let cheapest = ev.front.cheapest_under(bound).cloned();
    [Some(best), Some(lowest), cheapest]
        .into_iter()
        .flatten()
        .filter(|m| m.fitness.feasible && m.fitness.peak <= bound)
        .map(|m| relax(ev, m.genome, m.fitness, bound))
        .min_by(|a, b| a.1.cmp(&b.1, Objective::budget(Some(bound))))
        .unwrap_or_else(|| {
            let m = best_by(&pop, ev.objective);
            (m.genome, m.fitness)
        })
}

/// Adds the local refinement of the population's best member ([`crate::polish`]).
fn climb(ev: &mut Evaluator<'_>, pop: &mut Vec<Member>) {
    sort_population(pop, ev.objective);
    let better = crate::polish::bottleneck(ev, &pop[0]);
    let better = crate::polish::polish(ev, &better);
    push_best(pop, better);
}

/// Puts `better`, climbed from the best of `pop` (sorted, best first), in front of it
/// unless the climb did not move.
fn push_best(pop: &mut Vec<Member>, better: Member) {
    if better.genome != pop[0].genome {
        pop.insert(0, better);
    }
}

fn best_by(pop: &[Member], obj: Objective) -> Member {
    let mut v = pop.to_vec();
    sort_population(&mut v, obj);
    v.swap_remove(0)
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

/// Drops the later members with the genome of an earlier one (by fingerprint, the
/// evaluator's cache key, without cloning genomes).
fn dedup(pop: &mut Vec<Member>) {
    let mut seen = rustc_hash::FxHashSet::default();
    pop.retain(|m| seen.insert(m.genome.fingerprint()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::member;

    const STEP: u64 = 1_000_000;

    /// Peaks in units of 1/100000 of the pick's: 100_000 is the pick's, 100_070 is 0.07%
    /// above it. The pick recomputes 8% of a step.
    fn candidate(front: &[Member], cap: u64) -> Option<(u64, u64)> {
        let pick = member(100_000, 80_000, 0).fitness;
        near_candidate(front, &pick, cap, STEP).map(|m| (m.fitness.peak, m.fitness.cost))
    }

    #[test]
    fn a_steep_trade_next_to_the_lowest_peak_is_taken() {
        // 0.07% more memory for 2.4% of a step (34 times as much): taken.
        let front = [member(100_000, 80_000, 0), member(100_070, 56_000, 1)];
        assert_eq!(candidate(&front, u64::MAX), Some((100_070, 56_000)));
        // Of two trades, the better score: 0.5% more for 4.5% of a step scores
        // 3.5% + 10% against 5.6% + 1.4%.
        let front = [member(100_070, 56_000, 1), member(100_500, 35_000, 2)];
        assert_eq!(candidate(&front, u64::MAX), Some((100_070, 56_000)));
    }

    #[test]
    fn shallow_far_or_capped_trades_are_not() {
        // 0.07% more memory for 1% of a step (14 times as much, below 20).
        assert_eq!(candidate(&[member(100_070, 70_000, 1)], u64::MAX), None);
        // 2% more memory for all of the recompute: beyond the 1% looked at.
        assert_eq!(candidate(&[member(102_000, 0, 1)], u64::MAX), None);
        // A steep trade above Chen's peak (the cap).
        assert_eq!(candidate(&[member(100_070, 56_000, 1)], 100_050), None);
        // Plans at or under the pick's peak are the fixed-peak refinement's, not traded.
        assert_eq!(candidate(&[member(100_000, 10_000, 1)], u64::MAX), None);
    }

    #[test]
    fn the_device_test_weighs_the_saving_against_the_growth() {
        // 2% of a step saved is worth up to 0.1% more bytes, not more.
        assert!(steep(20_000, STEP, 1_000_000, 1_001_000));
        assert!(!steep(20_000, STEP, 1_000_000, 1_001_001));
        // Fewer bytes always are.
        assert!(steep(0, STEP, 1_000_000, 999_000));
    }
}
