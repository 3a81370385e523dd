//! Memory for speed: a plan's costliest recomputations are turned back into kept storages
//! while the peak stays at or under a bound and the recompute cost does not rise
//! (MegEngine's `lb_memory` step; without a bound, the bound is the plan's own peak, so
//! recompute drops at no memory cost).
//!
//! Candidates are the storages the plan discards, grouped by the op that recomputes them,
//! costliest op first, each tried against the plan with every group accepted before it, as
//! a sequential greedy pass would. Keeping a storage keeps its original alive over its
//! discarded gap, so a group whose gaps cross a step where the current plan's live bytes
//! plus the group's bytes already exceed the bound is passed over without an evaluation
//! (a screen against the current plan's profile, rebuilt after every acceptance; the rare
//! group it passes over wrongly is one whose kept storage would also have let another
//! storage die earlier). The groups that pass the screen are evaluated exactly, `width`
//! at a time in parallel against the same plan: the first that passes is taken and the
//! rest are judged again against the new plan. When several groups of a batch pass alone,
//! the first m of them together are evaluated too (m = all, half, a quarter, ...) and the
//! largest set that passes is taken at once (on a recurrent net hundreds of groups pass,
//! one round each otherwise); when all of them are taken, the batch's failing groups are
//! passed over, as judged against the plan before. Every plan taken is evaluated
//! exactly, and `width` depends only on the outcomes, never on the number of workers. A
//! pass builds at most [`RELAX_SCHEDULES`] schedules, and no more than a bounded phase walks
//! ([`Evaluator::phase_schedules`]), so its time stays bounded however many groups it has.
//!
//! **Ranked by what they save** ([`by_savings`], for the search's last step only). The
//! costliest op is not always the best storage to keep: keeping a storage also spares the
//! recomputation of the inputs made only for it, and lets their copies die, which the
//! screen does not see: a cheap op whose output spares costlier recomputations (a
//! recurrent net's cell state) loses to a costlier op that spares nothing else
//! (`ranked_by_savings_keeps_what_the_screen_passes_over` is such a case). So every group
//! is first evaluated alone against the plan, exactly; those that
//! fit and save go on, the largest saving first, through the same greedy pass without the
//! screen. It costs an evaluation per group more than the screened pass.

use crate::context::Context;
use crate::sublinear::discard::{self, Discard};
use crate::sublinear::evaluate::{Fitness, Objective};
use crate::sublinear::genome::Genome;
use crate::sublinear::search::{sort_population, Evaluator, Member};
use sgc_ir::TensorId;

/// Runs the step on `best` (fitness `fit`) under `bound`: groups in cost order, screened.
pub(crate) fn relax(
    ev: &mut Evaluator<'_>,
    best: Genome,
    fit: Fitness,
    bound: u64,
) -> (Genome, Fitness) {
    let Some((screen, groups)) = screened(ev, &best) else {
        return (best, fit);
    };
    let stop = ev.phase_limit(RELAX_SCHEDULES);
    greedy(ev, best, fit, bound, &groups, Some(screen), Some(stop))
}

/// The most schedules one screened pass ([`relax`]) builds (it starts no batch past them;
/// the groups left over stay recomputed). The groups grow with the graph: on a long chain
/// of small layers each layer's groups pass the screen and are evaluated, so an unbounded
/// pass builds a schedule per few layers, each walking the whole graph (quadratic time:
/// 2,300 schedules at 100k ops). The real corpus's passes build at most 421 (the LSTM
/// language model), so none of them reaches the bound. On large graphs a bounded phase's walk
/// ([`crate::sublinear::search::PHASE_WALK`]) bounds a pass further.
const RELAX_SCHEDULES: usize = 512;

/// The screen of `best`'s schedule and its groups of recomputed storages, costliest first;
/// `None` when `best` has no schedule.
fn screened(ev: &Evaluator<'_>, best: &Genome) -> Option<(Screen, Vec<Vec<TensorId>>)> {
    let screen = Screen::of(ev.ctx, best)?;
    let groups = screen.groups(ev.ctx);
    Some((screen, groups))
}

/// Groups [`by_savings`] evaluates alone at a time.
const SAVINGS_CHUNK: usize = 64;

/// The step with its groups ranked by what each saves alone, exactly (see the module doc):
/// groups that do not fit alone, or save nothing, are left out. They are evaluated
/// [`SAVINGS_CHUNK`] at a time, costliest op first, and no chunk starts once the
/// evaluator's limit is spent; the groups not evaluated are left out too. The greedy pass
/// after them builds at most a bounded phase's schedules ([`Evaluator::phase_schedules`]).
pub(crate) fn by_savings(
    ev: &mut Evaluator<'_>,
    best: Genome,
    fit: Fitness,
    bound: u64,
) -> (Genome, Fitness) {
    let Some((_, groups)) = screened(ev, &best) else {
        return (best, fit);
    };
    let proposed = ev.stats.candidates;
    let mut ranked: Vec<(u64, Vec<TensorId>)> = Vec::new();
    // In chunks, costliest op first, while the evaluator's limit allows: on a 100k-op graph
    // thousands of groups, each a discard plan held until its batch is evaluated.
    for chunk in groups.chunks(SAVINGS_CHUNK) {
        if ev.spent() {
            break;
        }
        let cands: Vec<Genome> = chunk.iter().map(|g| with(&best, g)).collect();
        let fits = ev.eval_batch(&cands);
        ranked.extend(
            chunk
                .iter()
                .zip(fits)
                .filter(|(_, f)| passes(f, &fit, bound) && f.cost < fit.cost)
                .map(|(g, f)| (fit.cost - f.cost, g.clone())),
        );
    }
    ev.stats.relax_candidates += ev.stats.candidates - proposed;
    // Stable: equal savings keep the cost order.
    ranked.sort_by_key(|r| std::cmp::Reverse(r.0));
    let groups: Vec<Vec<TensorId>> = ranked.into_iter().map(|r| r.1).collect();
    let stop = ev.phase_limit(usize::MAX);
    greedy(ev, best, fit, bound, &groups, None, Some(stop))
}

/// The greedy pass over `groups` in order (see the module doc); `screen`, when given,
/// passes over the groups it judges cannot fit.
fn greedy(
    ev: &mut Evaluator<'_>,
    mut best: Genome,
    mut fit: Fitness,
    bound: u64,
    groups: &[Vec<TensorId>],
    mut screen: Option<Screen>,
    stop: Option<usize>,
) -> (Genome, Fitness) {
    let ctx = ev.ctx;
    let total = groups.len();
    let proposed = ev.stats.candidates;
    let (mut i, mut width) = (0, 2);
    while i < total && stop.is_none_or(|s| ev.stats.evaluated < s) {
        let mut picked = Vec::with_capacity(width);
        while i < total && picked.len() < width {
            if screen
                .as_ref()
                .is_none_or(|s| s.may_fit(ctx, &groups[i], bound))
            {
                picked.push(i);
            }
            i += 1;
        }
        if picked.is_empty() {
            break;
        }
        let cands: Vec<Genome> = picked.iter().map(|&j| with(&best, &groups[j])).collect();
        let fits = ev.eval_batch(&cands);
        let passing: Vec<usize> = (0..fits.len())
            .filter(|&k| passes(&fits[k], &fit, bound))
            .collect();
        let Some(&first) = passing.first() else {
            width = (width * 2).min(32);
            ev.report("trading memory for speed", i, total);
            continue;
        };
        // Several passed alone: try the first m of them together (m = all, half, a
        // quarter, ... down to 2) and take the largest set that passes; on a recurrent net
        // hundreds of groups pass, one round each otherwise.
        let sizes: Vec<usize> = std::iter::successors(Some(passing.len()), |&m| Some(m / 2))
            .take_while(|&m| m >= 2)
            .collect();
        let unions: Vec<Genome> = sizes
            .iter()
            .map(|&m| {
                let kept: Vec<TensorId> = passing[..m]
                    .iter()
                    .flat_map(|&k| groups[picked[k]].iter().copied())
                    .collect();
                with(&best, &kept)
            })
            .collect();
        let ufits = ev.eval_batch(&unions);
        match (0..sizes.len()).find(|&u| passes(&ufits[u], &fit, bound)) {
            Some(u) => {
                let m = sizes[u];
                fit = ufits[u];
                best = unions.into_iter().nth(u).unwrap_or(best);
                if m < passing.len() {
                    // The rest are judged again against the new plan.
                    i = picked[passing[m - 1]] + 1;
                    width = 2;
                } else {
                    width = (width * 2).min(64);
                }
            }
            None => {
                fit = fits[first];
                best = cands.into_iter().nth(first).unwrap_or(best);
                // Groups after the accepted one are judged again against the new plan.
                i = picked[first] + 1;
                width = if passing.len() > 1 {
                    2
                } else {
                    (width * 2).min(32)
                };
            }
        }
        if screen.is_some() {
            match Screen::of(ctx, &best) {
                Some(s) => screen = Some(s),
                None => break,
            }
        }
        ev.report("trading memory for speed", i, total);
    }
    ev.stats.relax_candidates += ev.stats.candidates - proposed;
    (best, fit)
}

/// `best` with the roots of `group` kept.
fn with(best: &Genome, group: &[TensorId]) -> Genome {
    let mut cand = best.clone();
    cand.keep.extend(group.iter().map(|r| r.0));
    cand.keep.sort_unstable();
    cand.keep.dedup();
    cand
}

/// Whether a relaxed plan is acceptable: it fits the bound and recomputes no more.
fn passes(f: &Fitness, fit: &Fitness, bound: u64) -> bool {
    f.feasible && f.peak <= bound && f.cost <= fit.cost
}

/// The current plan's discards and live bytes, for screening candidates.
struct Screen {
    plan: Vec<Discard>,
    /// Per traced position: the step of its original run.
    step_of: Vec<u32>,
    /// The op of every recompute step.
    recomputed: Vec<sgc_ir::OpId>,
    live: RangeMax,
}

impl Screen {
    fn of(ctx: &Context<'_>, genome: &Genome) -> Option<Screen> {
        let plan = discard::plan(ctx, genome);
        let s = crate::sublinear::recompute::schedule(ctx, genome, &plan).ok()?;
        let mut step_of = vec![0; ctx.n];
        for (k, &(op, rec)) in s.steps.iter().enumerate() {
            if !rec {
                step_of[op.index()] = k as u32;
            }
        }
        let recomputed = s.steps.iter().filter(|x| x.1).map(|x| x.0).collect();
        Some(Screen {
            plan,
            step_of,
            recomputed,
            live: RangeMax::new(s.live),
        })
    }

    /// The discarded roots, grouped by the recomputed op that makes them again, costliest
    /// op first (ties: op order).
    fn groups(&self, ctx: &Context<'_>) -> Vec<Vec<TensorId>> {
        let mut ops = self.recomputed.clone();
        ops.sort();
        ops.dedup();
        ops.sort_by(|a, b| {
            ctx.cost[b.index()]
                .total_cmp(&ctx.cost[a.index()])
                .then(a.cmp(b))
        });
        let discarded = |r: &TensorId| self.plan.binary_search_by_key(r, |d| d.root).is_ok();
        ops.into_iter()
            .map(|o| {
                let mut g = ctx.out_roots[o.index()].clone();
                g.retain(discarded);
                g
            })
            .filter(|g| !g.is_empty())
            .collect()
    }

    /// Whether keeping `group` may keep the current plan's peak under `bound`.
    fn may_fit(&self, ctx: &Context<'_>, group: &[TensorId], bound: u64) -> bool {
        let extra: u64 = group.iter().map(|&r| ctx.size(r)).sum();
        let room = bound.saturating_sub(ctx.persistent_bytes);
        group.iter().all(|r| {
            let Ok(k) = self.plan.binary_search_by_key(r, |d| d.root) else {
                return true;
            };
            let d = self.plan[k];
            let (lo, hi) = (
                self.step_of[d.open as usize] + 1,
                self.step_of[d.close as usize],
            );
            self.live
                .max(lo as usize, hi as usize)
                .saturating_add(extra)
                <= room
        })
    }
}

/// Range maximum over a fixed array (a sparse table: O(n log n) to build, O(1) a query).
struct RangeMax {
    levels: Vec<Vec<u64>>,
}

impl RangeMax {
    fn new(v: Vec<u64>) -> Self {
        let mut levels = vec![v];
        let mut w = 1;
        while 2 * w <= levels[0].len() {
            let prev = &levels[levels.len() - 1];
            let next = (0..prev.len() - w)
                .map(|i| prev[i].max(prev[i + w]))
                .collect();
            levels.push(next);
            w *= 2;
        }
        RangeMax { levels }
    }

    /// The largest value in `lo..hi` (0 when empty).
    fn max(&self, lo: usize, hi: usize) -> u64 {
        let hi = hi.min(self.levels[0].len());
        if lo >= hi {
            return 0;
        }
        let k = (usize::BITS - 1 - (hi - lo).leading_zeros()) as usize;
        let l = &self.levels[k];
        l[lo].max(l[hi - (1 << k)])
    }
}

/// The search's pick from a population (Chen's plan added): the memory-for-speed step on
/// the best plan, and with a bound on the lowest-peak plan and the cheapest plan under it
/// too.
pub(crate) fn finish(
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

fn best_by(pop: &[Member], obj: Objective) -> Member {
    let mut v = pop.to_vec();
    sort_population(&mut v, obj);
    v.swap_remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;
    use crate::sublinear::genome::{random_splits, Rules};
    use crate::sublinear::search::pool;
    use sgc_ir::testgen::{random_graph, GenConfig, SplitMix64};

    /// Both passes end at or under the bound, recompute no more than they start, and only
    /// add kept roots, on random graphs, genomes and bounds (the plan's own peak and 5%
    /// above it).
    #[test]
    fn both_passes_fit_the_bound_and_never_recompute_more() {
        let pool = pool();
        let mut moved = [0; 2];
        for seed in 0..60 {
            let g = random_graph(seed, &GenConfig::small());
            let ctx = Context::new(&g);
            let mut rng = SplitMix64::new(seed);
            let mut genome = random_splits(&mut rng, ctx.n);
            genome.rules = Rules::all()[rng.index(8)];
            let mut ev = Evaluator::new(&ctx, &pool, None);
            let fit = ev.eval(&genome);
            if !fit.feasible {
                continue;
            }
            for bound in [fit.peak, fit.peak + fit.peak / 20] {
                let ends = [
                    relax(&mut ev, genome.clone(), fit, bound),
                    by_savings(&mut ev, genome.clone(), fit, bound),
                ];
                for (k, (g2, f2)) in ends.iter().enumerate() {
                    assert!(
                        f2.feasible && f2.peak <= bound,
                        "{seed}: {f2:?} over {bound}"
                    );
                    assert!(f2.cost <= fit.cost, "{seed}: {f2:?} from {fit:?}");
                    assert!(genome.keep.iter().all(|r| g2.keep.contains(r)));
                    assert_eq!(ev.eval(g2), *f2, "{seed}: the fitness is the genome's");
                    moved[k] += usize::from(f2.cost < fit.cost);
                }
            }
        }
        assert!(
            moved.iter().all(|&m| m > 0),
            "a pass never kept anything: {moved:?}"
        );
    }

    /// The case the ranking exists for (module doc): on the real LSTM language model split
    /// at ops 120 and 1110, the screened pass keeps two sigmoids, while ranked by savings
    /// the cell state `add_2` makes is kept and the plan recomputes less, at the same peak.
    #[test]
    fn ranked_by_savings_keeps_what_the_screen_passes_over() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../graphs/real/lstm_lm.json.gz");
        let g = sgc_ir::load_any(&path).expect("the LSTM graph loads");
        let ctx = Context::new(&g);
        let pool = pool();
        let mut ev = Evaluator::new(&ctx, &pool, None);
        let genome = Genome::from_splits(vec![120, 1110]);
        let fit = ev.eval(&genome);
        let screened = relax(&mut ev, genome.clone(), fit, fit.peak);
        let ranked = by_savings(&mut ev, genome, fit, fit.peak);
        assert!(ranked.1.peak <= fit.peak);
        // 5.5597% of a step screened, 5.5551% ranked.
        let share = |f: &Fitness| f.cost as f64 / ctx.step_units as f64;
        assert!(share(&screened.1) > 0.055596 && share(&ranked.1) < 0.055552);
        assert!(
            ranked.1.cost < screened.1.cost,
            "ranked {:?}, screened {:?}",
            ranked.1,
            screened.1
        );
        let cell = (0..g.num_ops())
            .map(sgc_ir::OpId::new)
            .find(|&o| g.op(o).name == "layers.0:add_2")
            .expect("the first cell-state update");
        let root = ctx.out_roots[cell.index()][0].0;
        assert!(ranked.0.keep.contains(&root), "kept {:?}", ranked.0.keep);
        assert!(
            !screened.0.keep.contains(&root),
            "kept {:?}",
            screened.0.keep
        );
    }

    /// A screened pass starts no batch once it has built the schedules it may: stopped one
    /// schedule after its start, it builds one batch at most (two groups and their union),
    /// and still ends at or under the bound recomputing no more; unbounded, the same passes
    /// build more.
    #[test]
    fn a_pass_stops_at_its_schedule_bound() {
        let pool = pool();
        let mut longer = 0;
        for seed in 0..60 {
            let g = random_graph(seed, &GenConfig::small());
            let ctx = Context::new(&g);
            let mut rng = SplitMix64::new(seed);
            let genome = random_splits(&mut rng, ctx.n);
            let built = |stop: Option<usize>| {
                let mut ev = Evaluator::new(&ctx, &pool, None);
                let fit = ev.eval(&genome);
                let bound = fit.peak + fit.peak / 20;
                let (screen, groups) = screened(&ev, &genome).filter(|_| fit.feasible)?;
                let start = ev.stats.evaluated;
                let stop = stop.map(|s| start + s);
                let (_, f) = greedy(
                    &mut ev,
                    genome.clone(),
                    fit,
                    bound,
                    &groups,
                    Some(screen),
                    stop,
                );
                assert!(passes(&f, &fit, bound), "{seed}: {f:?} from {fit:?}");
                Some(ev.stats.evaluated - start)
            };
            let (Some(bounded), Some(free)) = (built(Some(1)), built(None)) else {
                continue;
            };
            assert!(bounded <= 3, "{seed}: {bounded} schedules");
            longer += usize::from(free > 3);
        }
        assert!(longer > 0, "no pass built more than one batch");
    }

    #[test]
    fn range_max_matches_a_scan() {
        let v: Vec<u64> = (0..97u64).map(|i| (i * 7919) % 113).collect();
        let t = RangeMax::new(v.clone());
        for lo in 0..v.len() {
            for hi in lo..=v.len() {
                let want = v[lo..hi].iter().copied().max().unwrap_or(0);
                assert_eq!(t.max(lo, hi), want, "{lo}..{hi}");
            }
        }
    }
}
