//! Planning under a memory budget (`--budget`), in device bytes.
//!
//! **What a budget bounds.** What `sgc run` allocates: the plan's arena (offsets aligned
//! to `align`, sizes padded, as [`crate::arena`] places them) plus the persistent bytes.
//! The arena holds the aligned live bytes of every step, less what in-place sharing saves
//! at one op (an output written over a dying input), so a plan is screened by its peak
//! less that saving first ([`in_place_slack`]) and placed only when that fits.
//!
//! **Monotone by construction.** A search run once per budget ends wherever its greedy
//! steps lead, so a larger budget could cost more recompute. Here the planner builds a
//! set of candidate plans that
//! does not depend on the budget, and the budget only selects from it: the candidate with
//! the least recompute (then the lower peak) whose device bytes fit. A larger budget
//! admits every plan a smaller one admitted, so it never costs more. The set:
//! 1. the memory/recompute front of every candidate the unbudgeted sublinear search
//!    evaluated ([`crate::sublinear::search::Front`]: thousands of plans over the whole range of
//!    peaks), and that search's pick and Chen's plan by name (the front ranks by the
//!    memory model's peak, and device bytes can order plans otherwise);
//! 2. refinements at a fixed ladder of [`LADDER`] peak levels, geometrically spaced from
//!    the lowest peak that search reached to the unplanned peak: at each level the
//!    front's cheapest plan under it is climbed and relaxed with the level as its budget
//!    ([`crate::sublinear::fixed_peak::refine_under`]); what they evaluate joins the front;
//! 3. static DTR ([`crate::dtr`]) at [`DTR_LEVELS`] eviction thresholds from its
//!    eviction floor (or the per-op lower bound) up to the unplanned peak: eviction
//!    reaches below what split points can, and at many memories recomputes less. Such a
//!    plan is recorded with strategy `dtr` (the verifier's rules for eviction: an op may
//!    run more than twice). Eviction is greedy, so its recompute can fall steeply between
//!    two neighbouring thresholds (ResNet-50 at batch 585: from 23.6% of a step at 11.02 GiB
//!    to 47.7% at 8.39 GiB, with no plan between), and a budget inside such a cliff pays
//!    for the plan below it: [`CLIFF_THRESHOLDS`] more thresholds go to the steepest falls
//!    ([`cliffs`]). They compete with the split plans on recompute like any other
//!    candidate.
//! 4. exchange refinements ([`crate::exchange`]) at [`EXCHANGE_LEVELS`] peak levels,
//!    geometrically spaced like the ladder: at each level the cheapest plan under it (the
//!    front's, or the one the level below ended with) trades recomputations for cheaper
//!    ones, single ops and single reads at a time, with the level as its cap. The split
//!    plans choose whole blocks; on Checkmate's graphs the optimum differs from them in a
//!    few single ops, and this reaches it (docs/benchmarks.md).
//! 5. the same exchange refinements of the eviction plans, at [`EVICTION_EXCHANGE_LEVELS`]
//!    peak levels geometrically spaced from the lowest eviction plan's peak to the
//!    unplanned peak (and at that lowest peak itself): at each level the cheapest eviction
//!    plan under it (or the one the level below ended with) drops the recomputations the
//!    level leaves room for and trades others for cheaper ones. Each is recorded as `dtr`,
//!    as its start is. Below the lowest split plan these are the only plans that fill the
//!    cliffs between eviction thresholds by single ops.
//! 6. `partition`'s kept sets ([`crate::partition`]: the forward runs once, a set of its
//!    tensors is kept, the rest is recomputed right before the backward reads it; the sets
//!    from parametric minimum cuts over bytes kept and recompute cost, and the walks between
//!    them), recorded as `partition`, and their exchange refinements as in 5, recorded as
//!    `sublinear` (an op still runs at most twice). Between the lowest split plan and the
//!    unplanned peak they are often the cheapest: a minimum cut prices every tensor's
//!    recompute exactly, where the split search chooses whole blocks (docs/benchmarks.md).
//!
//! Candidates are tried by increasing recompute; the first whose device bytes fit wins.
//! With `--budget-of peak` the budget bounds the memory model's peak instead (what
//! MegEngine's and Checkmate's budgets bound), and the first whose peak fits wins.
//! When none fits, the error states the lowest device bytes reached (among the plans
//! with the lowest peaks) and the per-op lower bound.

use crate::context::Context;
use crate::device::device_bytes;
use crate::dtr;
use crate::error::{LowerBoundKind, PlanError, Retry};
use crate::options::{BudgetOf, PlanOptions, Strategy};
use crate::sublinear::evaluate::{fitness_of, schedule, Fitness};
use crate::sublinear::genome::Genome;
use crate::sublinear::search::Evaluator;
use rayon::prelude::*;
use sgc_ir::OpId;

/// Peak levels of the refinement ladder.
pub(crate) const LADDER: u32 = 16;
/// Peak levels of the exchange refinement.
pub(crate) const EXCHANGE_LEVELS: u32 = 64;
/// Steps the exchange refinements replay in all (moves tried times schedule length).
pub(crate) const EXCHANGE_WORK: u64 = 10_000_000;
/// Eviction thresholds tried.
pub(crate) const DTR_LEVELS: u32 = 16;
/// Eviction thresholds tried besides, in the front's cliffs ([`cliffs`]).
pub(crate) const CLIFF_THRESHOLDS: usize = 16;
/// Cliff thresholds tried per round (in parallel; the rounds do not depend on the workers).
const CLIFF_ROUND: usize = 4;
/// Peak levels of the exchange refinement of the eviction plans.
pub(crate) const EVICTION_EXCHANGE_LEVELS: u32 = 16;
/// How many of the lowest-peak candidates a refusal places to report the lowest device
/// bytes reached.
const REFUSAL_PLACED: usize = 4;

/// A plan the budget may select.
enum Source {
    Split(Genome),
    /// A schedule made whole, and the strategy whose rules it follows.
    Steps(Vec<(OpId, bool)>, Strategy),
}

pub(crate) struct Candidate {
    source: Source,
    fitness: Fitness,
}

/// What the budget selected: the schedule and the strategy whose rules it follows.
pub(crate) struct Chosen {
    pub steps: Vec<(OpId, bool)>,
    pub strategy: Strategy,
}

/// Geometric levels strictly between `lo` and `hi` and `hi` itself (`k / n` of the way
/// in log space, k = 1..=n).
fn levels(lo: u64, hi: u64, n: u32) -> Vec<u64> {
    if lo == 0 || hi <= lo {
        return vec![hi];
    }
    let ratio = hi as f64 / lo as f64;
    let mut v: Vec<u64> = (1..=n)
        .map(|k| ((lo as f64) * ratio.powf(f64::from(k) / f64::from(n))).round() as u64)
        .map(|l| l.clamp(lo, hi))
        .collect();
    v.dedup();
    v
}

/// The budget-independent candidate set (see the module doc). `lowest` is the peak of the
/// unbudgeted search's pick; the evaluator holds that search's front.
pub(crate) fn candidates(
    ev: &mut Evaluator<'_>,
    opts: &PlanOptions,
    pick: &Genome,
    lowest: u64,
) -> Candidates {
    let ctx = ev.ctx;
    for level in levels(lowest, ctx.unplanned_peak, LADDER) {
        if let Some(start) = ev.front.cheapest_under(level).cloned() {
            crate::sublinear::fixed_peak::refine_under(ev, &start, level);
        }
    }
    let exchanged = exchanged(ev, lowest);
    // The front ranks by the memory model's peak; the unbudgeted pick and Chen's plan join
    // it by name, so that a budget at their own device bytes is always met.
    let named = [pick.clone(), crate::sublinear::chen::best(ctx)];
    let fits = ev.eval_batch(&named);
    let split = ev
        .front
        .members
        .iter()
        .map(|m| (m.genome.clone(), m.fitness))
        .chain(named.into_iter().zip(fits))
        .map(|(g, fitness)| Candidate {
            source: Source::Split(g),
            fitness,
        })
        .chain(exchanged)
        .collect();
    Candidates {
        split,
        evictions: evictions(ctx, ev.pool, opts),
        partitions: partitions(ctx, ev.pool),
    }
}

/// Exchange refinements ([`crate::exchange`]) at [`EXCHANGE_LEVELS`] peak levels from
/// `lowest` up, each from the cheapest plan under its level: the front's, or the one the
/// level below ended with.
fn exchanged(ev: &Evaluator<'_>, lowest: u64) -> Vec<Candidate> {
    let ctx = ev.ctx;
    let budget = EXCHANGE_WORK / u64::from(EXCHANGE_LEVELS);
    let mut out: Vec<Candidate> = Vec::new();
    let mut memo = crate::exchange::Memo::default();
    for level in levels(lowest, ctx.unplanned_peak, EXCHANGE_LEVELS) {
        let below = out.last().and_then(|c| match &c.source {
            Source::Steps(steps, _) => Some((steps, c.fitness.cost)),
            Source::Split(_) => None,
        });
        let front = ev
            .front
            .cheapest_under(level)
            .filter(|m| below.is_none_or(|(_, cost)| m.fitness.cost < cost))
            .and_then(|m| schedule(ctx, &m.genome));
        let Some(start) = front.or_else(|| below.map(|(s, _)| s.clone())) else {
            continue;
        };
        if let Some(r) = crate::exchange::refine(ctx, ev.pool, &start, (level, budget), &mut memo) {
            out.push(Candidate {
                source: Source::Steps(r.steps, Strategy::Sublinear),
                fitness: r.fitness,
            });
        }
    }
    out
}

/// The candidate set: split plans, eviction plans and partition plans.
pub(crate) struct Candidates {
    split: Vec<Candidate>,
    evictions: Vec<Candidate>,
    partitions: Vec<Candidate>,
}

impl Candidates {
    fn all(&self) -> impl Iterator<Item = &Candidate> {
        self.split
            .iter()
            .chain(&self.evictions)
            .chain(&self.partitions)
    }
}

/// Static DTR at thresholds from its eviction floor up to the unplanned peak, and their
/// exchange refinements (each follows eviction's rules, as its start does).
fn evictions(ctx: &Context<'_>, pool: &rayon::ThreadPool, opts: &PlanOptions) -> Vec<Candidate> {
    let plans = eviction_plans(ctx, pool, opts);
    let refined = exchanged_from(ctx, pool, &plans, Strategy::Dtr);
    plans.into_iter().chain(refined).collect()
}

/// `partition`'s kept sets ([`crate::partition`]: parametric minimum cuts and the walks
/// between them), each a schedule that follows partition's rules, and their exchange
/// refinements (which follow the split plans' rules: an op runs at most twice); none when
/// the graph has no backward to partition.
fn partitions(ctx: &Context<'_>, pool: &rayon::ThreadPool) -> Vec<Candidate> {
    let Ok(kept_sets) = crate::partition::candidates(ctx, pool) else {
        return Vec::new();
    };
    let plans: Vec<Candidate> = kept_sets
        .into_iter()
        .map(|c| Candidate::of_steps(c.steps, c.peak, c.units, Strategy::Partition))
        .collect();
    let refined = exchanged_from(ctx, pool, &plans, Strategy::Sublinear);
    plans.into_iter().chain(refined).collect()
}

/// Exchange refinements ([`crate::exchange`]) of the whole schedules `plans` at
/// [`EVICTION_EXCHANGE_LEVELS`] peak levels from their lowest peak up (that peak
/// included), each from the cheapest of them under its level or the one the level below
/// ended with, whichever recomputes less; recorded as following `strategy`'s rules.
fn exchanged_from(
    ctx: &Context<'_>,
    pool: &rayon::ThreadPool,
    plans: &[Candidate],
    strategy: Strategy,
) -> Vec<Candidate> {
    let Some(lowest) = plans.iter().map(|c| c.fitness.peak).min() else {
        return Vec::new();
    };
    let budget = EXCHANGE_WORK / u64::from(EXCHANGE_LEVELS);
    let mut memo = crate::exchange::Memo::default();
    let mut out: Vec<Candidate> = Vec::new();
    let mut caps = vec![lowest];
    caps.extend(levels(lowest, ctx.unplanned_peak, EVICTION_EXCHANGE_LEVELS));
    caps.dedup();
    for level in caps {
        let start = plans
            .iter()
            .chain(out.last())
            .filter(|c| c.fitness.peak <= level)
            .min_by_key(|c| (c.fitness.cost, c.fitness.peak));
        let Some(Candidate {
            source: Source::Steps(steps, _),
            ..
        }) = start
        else {
            continue;
        };
        if let Some(r) = crate::exchange::refine(ctx, pool, steps, (level, budget), &mut memo) {
            out.push(Candidate {
                source: Source::Steps(r.steps, strategy),
                fitness: r.fitness,
            });
        }
    }
    out
}

/// Static DTR at thresholds from its eviction floor up to the unplanned peak: [`DTR_LEVELS`]
/// geometric levels, then [`CLIFF_THRESHOLDS`] more where the recompute falls most
/// between two neighbouring thresholds ([`cliffs`]).
fn eviction_plans(
    ctx: &Context<'_>,
    pool: &rayon::ThreadPool,
    opts: &PlanOptions,
) -> Vec<Candidate> {
    let lb = ctx.lower_bound.bytes.max(dtr::eviction_floor(ctx));
    let mut thresholds = vec![lb];
    thresholds.extend(levels(lb, ctx.unplanned_peak, DTR_LEVELS));
    thresholds.sort_unstable();
    thresholds.dedup();
    let mut tried = evict_at(ctx, pool, opts, &thresholds);
    let mut added = 0;
    while added < CLIFF_THRESHOLDS {
        let next = cliffs(&tried, CLIFF_ROUND.min(CLIFF_THRESHOLDS - added));
        if next.is_empty() {
            break;
        }
        added += next.len();
        tried.extend(evict_at(ctx, pool, opts, &next));
        tried.sort_by_key(|&(t, _)| t);
    }
    tried.into_iter().filter_map(|(_, c)| c).collect()
}

/// Static DTR's plan at each of `thresholds` (in parallel, in order), `None` where it
/// finds none.
fn evict_at(
    ctx: &Context<'_>,
    pool: &rayon::ThreadPool,
    opts: &PlanOptions,
    thresholds: &[u64],
) -> Vec<(u64, Option<Candidate>)> {
    pool.install(|| {
        thresholds
            .par_iter()
            .map(|&threshold| {
                let params = dtr::DtrParams {
                    threshold,
                    min_size: opts.evictee_min_size,
                    sqrt_sampling: opts.sqrt_sampling,
                    seed: opts.seed,
                };
                let plan = dtr::schedule(ctx, &params).ok().and_then(|steps| {
                    let fitness = fitness_of(ctx, &steps, 0);
                    fitness.feasible.then_some(Candidate {
                        source: Source::Steps(steps, Strategy::Dtr),
                        fitness,
                    })
                });
                (threshold, plan)
            })
            .collect()
    })
}

/// Up to `n` thresholds to try next: the midpoints of the `n` neighbouring pairs of `tried`
/// (sorted by threshold) across which the recompute falls most, where both have a plan
/// and a threshold fits between them. Eviction is greedy, so its recompute can fall
/// steeply between two thresholds (a cliff in the memory/recompute front), and a budget
/// inside the cliff pays for the plan below it; the midpoints fill it. Which pairs depends
/// on the plans only, so the set stays the same whatever the budget.
fn cliffs(tried: &[(u64, Option<Candidate>)], n: usize) -> Vec<u64> {
    let mut falls: Vec<(u64, u64)> = tried
        .windows(2)
        .filter_map(|w| {
            let ((lo, Some(a)), (hi, Some(b))) = (&w[0], &w[1]) else {
                return None;
            };
            let fall = a.fitness.cost.saturating_sub(b.fitness.cost);
            (fall > 0 && hi - lo > 1).then_some((fall, lo + (hi - lo) / 2))
        })
        .collect();
    falls.sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    falls.into_iter().take(n).map(|(_, mid)| mid).collect()
}

impl Candidate {
    /// A whole schedule at its measured peak and recompute cost.
    pub(crate) fn of_steps(
        steps: Vec<(OpId, bool)>,
        peak: u64,
        units: u64,
        strategy: Strategy,
    ) -> Self {
        Candidate {
            source: Source::Steps(steps, strategy),
            fitness: Fitness {
                feasible: true,
                peak,
                cost: units,
                splits: 0,
            },
        }
    }

    fn chosen(&self, ctx: &Context<'_>) -> Option<Chosen> {
        match &self.source {
            Source::Split(g) => schedule(ctx, g).map(|steps| Chosen {
                steps,
                strategy: Strategy::Sublinear,
            }),
            Source::Steps(steps, strategy) => Some(Chosen {
                steps: steps.clone(),
                strategy: *strategy,
            }),
        }
    }
}

/// The candidate that recomputes least among those whose device bytes fit `budget`.
pub(crate) fn choose(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    cands: &Candidates,
    budget: u64,
) -> Result<Chosen, PlanError> {
    select(ctx, opts, cands.all().collect(), budget)
}

/// The candidate of another strategy's set recomputing least whose device bytes (or peak)
/// fit `budget`.
pub(crate) fn choose_among(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    cands: &[Candidate],
    budget: u64,
) -> Result<Chosen, PlanError> {
    select(ctx, opts, cands.iter().collect(), budget)
}

/// The cheapest of `all` within `budget`, or the refusal that says how low they reached.
fn select(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    all: Vec<&Candidate>,
    budget: u64,
) -> Result<Chosen, PlanError> {
    if let Some(c) = cheapest(ctx, opts, &all, budget)? {
        return Ok(c);
    }
    Err(refusal(ctx, opts, all, budget))
}

/// The candidate of `cands` recomputing least whose device bytes fit `budget`.
fn cheapest(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    cands: &[&Candidate],
    budget: u64,
) -> Result<Option<Chosen>, PlanError> {
    let by_peak = opts.budget_of == BudgetOf::Peak;
    let slack = if by_peak { 0 } else { in_place_slack(ctx) };
    let mut order: Vec<&Candidate> = cands
        .iter()
        .copied()
        .filter(|c| c.fitness.peak.saturating_sub(slack) <= budget)
        .collect();
    order.sort_by_key(|c| (c.fitness.cost, c.fitness.peak, c.fitness.splits));
    for c in order {
        let Some(chosen) = c.chosen(ctx) else {
            continue;
        };
        // A peak budget is met by the memory model's peak, which the screen checked.
        if by_peak || device_bytes(ctx, opts, &chosen.steps)? <= budget {
            return Ok(Some(chosen));
        }
    }
    Ok(None)
}

/// How far in-place sharing can put a plan's device bytes below its peak: an op that
/// writes an output over a dying input saves at most that output's bytes, at its own step
/// only (elsewhere the two never overlap in time), so device bytes are at least the peak
/// minus the largest such saving of one op. Candidates are screened by it.
pub(crate) fn in_place_slack(ctx: &Context<'_>) -> u64 {
    let g = ctx.g;
    g.op_ids()
        .map(|op| {
            let o = g.op(op);
            o.inplace
                .iter()
                .filter_map(|&(oi, ii)| Some((*o.outputs.get(oi)?, *o.inputs.get(ii)?)))
                .filter(|&(out, inp)| g.in_place_allowed(op, out, inp))
                .map(|(out, _)| ctx.size(out))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// What a refusal reports as reached: the least device bytes among the [`REFUSAL_PLACED`]
/// candidates of lowest peak (`sorted` by peak), placed. A budget of these bytes is met;
/// `lowest_device` gives the least of all candidates.
fn lowest_placed(ctx: &Context<'_>, opts: &PlanOptions, sorted: &[&Candidate]) -> Option<u64> {
    sorted
        .iter()
        .take(REFUSAL_PLACED)
        .filter_map(|c| c.chosen(ctx))
        .filter_map(|c| device_bytes(ctx, opts, &c.steps).ok())
        .min()
}

/// The least device bytes of any candidate (`None` when none can be placed): each is
/// placed by increasing peak until the peak, less the in-place slack ([`in_place_slack`]),
/// exceeds the least found, since no later one can place below that.
pub(crate) fn lowest_device(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    cands: &Candidates,
) -> Option<u64> {
    let mut all: Vec<&Candidate> = cands.all().collect();
    all.sort_by_key(|c| (c.fitness.peak, c.fitness.cost));
    let slack = in_place_slack(ctx);
    let mut least: Option<u64> = None;
    for c in all {
        if least.is_some_and(|l| c.fitness.peak.saturating_sub(slack) > l) {
            break;
        }
        let Some(chosen) = c.chosen(ctx) else {
            continue;
        };
        if let Ok(d) = device_bytes(ctx, opts, &chosen.steps) {
            least = Some(least.map_or(d, |l| l.min(d)));
        }
    }
    least
}

/// The error for a budget no candidate meets: the lowest device bytes among the
/// lowest-peak candidates, and the bound.
fn refusal(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    mut cands: Vec<&Candidate>,
    budget: u64,
) -> PlanError {
    cands.sort_by_key(|c| (c.fitness.peak, c.fitness.cost));
    let lowest_peak = cands.first().map_or(ctx.unplanned_peak, |c| c.fitness.peak);
    let by_peak = opts.budget_of == BudgetOf::Peak;
    let lowest_device = (!by_peak)
        .then(|| lowest_placed(ctx, opts, &cands))
        .flatten();
    PlanError::BudgetNotMet {
        budget,
        of: opts.budget_of,
        best_peak: lowest_peak,
        best_device: lowest_device,
        lower_bound: ctx.lower_bound.bytes,
        bound: LowerBoundKind::PerOp,
        offload: None,
        // The planner names the refusing strategy's own options (PlanError::retrying).
        retry: Retry::Strategy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sublinear::search::pool;

    fn plan_at(peak: u64, cost: u64) -> Option<Candidate> {
        Some(Candidate::of_steps(Vec::new(), peak, cost, Strategy::Dtr))
    }

    /// The midpoints of the steepest falls in recompute, steepest first; none across a pair
    /// without a plan, without a fall, or without a threshold between them.
    #[test]
    fn cliffs_split_the_steepest_falls_first() {
        let tried = vec![
            (100, plan_at(100, 90)),
            (200, plan_at(190, 50)),
            (300, plan_at(290, 45)),
            (301, plan_at(300, 10)),
            (400, None),
            (500, plan_at(480, 0)),
            (600, plan_at(590, 0)),
        ];
        assert_eq!(cliffs(&tried, 4), vec![150, 250]);
        assert_eq!(cliffs(&tried, 1), vec![150]);
        assert!(cliffs(&tried[4..], 4).is_empty());
    }

    /// The cheapest of `cands` whose peak is within `budget`.
    fn cheapest_within(cands: &[Candidate], budget: u64) -> u64 {
        let costs = cands.iter().filter(|c| c.fitness.peak <= budget);
        costs
            .map(|c| c.fitness.cost)
            .min()
            .expect("a plan within the budget")
    }

    fn zoo(name: &str) -> sgc_ir::Graph {
        let m = sgc_ir::zoo::models().into_iter().find(|m| m.name == name);
        (m.expect("a zoo model").build)()
    }

    /// Each of the two additions to the eviction plans fills a cliff of the front below the
    /// split plans: at 40% of the peak, the thresholds added in the cliffs give the zoo's
    /// ResNet-50 a plan recomputing less than any at the geometric thresholds alone, and the
    /// exchange refinement gives the zoo's U-Net one recomputing less than any eviction plan.
    #[test]
    fn cliff_thresholds_and_exchanges_fill_the_front_below_the_split_plans() {
        let (opts, pool) = (PlanOptions::default(), pool());
        let g = zoo("resnet50");
        let ctx = Context::new(&g);
        let budget = ctx.unplanned_peak * 2 / 5;
        let lb = ctx.lower_bound.bytes.max(dtr::eviction_floor(&ctx));
        let mut geometric = vec![lb];
        geometric.extend(levels(lb, ctx.unplanned_peak, DTR_LEVELS));
        geometric.sort_unstable();
        geometric.dedup();
        let plain: Vec<Candidate> = evict_at(&ctx, &pool, &opts, &geometric)
            .into_iter()
            .filter_map(|(_, c)| c)
            .collect();
        let (before, after) = (
            cheapest_within(&plain, budget),
            cheapest_within(&eviction_plans(&ctx, &pool, &opts), budget),
        );
        assert!(after < before, "resnet50 cliffs: {after} against {before}");

        let g = zoo("unet");
        let ctx = Context::new(&g);
        let budget = ctx.unplanned_peak * 2 / 5;
        let (before, after) = (
            cheapest_within(&eviction_plans(&ctx, &pool, &opts), budget),
            cheapest_within(&evictions(&ctx, &pool, &opts), budget),
        );
        assert!(after < before, "unet exchanges: {after} against {before}");
    }

    #[test]
    fn levels_rise_geometrically_to_the_top() {
        let v = levels(100, 1600, 4);
        assert_eq!(v, vec![200, 400, 800, 1600]);
        assert_eq!(levels(100, 100, 4), vec![100]);
        assert_eq!(levels(0, 50, 4), vec![50]);
    }
}
