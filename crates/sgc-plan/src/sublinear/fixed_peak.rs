//! The search's last phases, once the lowest-peak pick is made (without a budget):
//! - [`at_peak`]: the peak reached becomes a budget, and the plan recomputing least under it
//!   is searched for again (a genetic refinement bred from the plans under it, and climbs
//!   from the cheapest plans a little above it);
//! - [`near_peak`]: a plan a little above the peak replaces the pick when the recompute it
//!   saves is worth the memory it adds ([`PEAK_WORTH`]), in the memory model and in device
//!   bytes;
//! - [`last_climb`]: a climb under the pick's peak that judges moves after memory for speed.
//!
//! Each builds at most a bounded phase's schedules ([`Evaluator::phase_schedules`]: a fixed
//! number of op-steps walked, so on large graphs their time stays bounded), finishing the
//! round it is in.
//!
//! None of them raises the peak or the recompute of what it is given, beyond the trade that
//! [`near_peak`] weighs. [`refine_under`] (a climb and memory for speed under a fixed level)
//! also serves the budget ladder of [`crate::budget`].

use crate::options::PlanOptions;
use crate::sublinear::evaluate::{Fitness, Objective};
use crate::sublinear::genetic;
use crate::sublinear::genome::Genome;
use crate::sublinear::polish;
use crate::sublinear::relax::relax;
use crate::sublinear::search::{self, dedup, sort_population, Evaluator, Member};

/// Islands of the fixed-peak refinement ([`at_peak`]).
const AT_PEAK_ISLANDS: u64 = 3;

/// Offset of the fixed-peak refinement's random streams from the main search's.
const AT_PEAK_STREAM: u64 = 0x5EED_0FA7_BEA4;

/// How far above the peak the fixed-peak refinement ([`at_peak`]) looks for cheaper plans
/// to climb under it, as fractions 1/k of the peak: a ladder about four times as wide at
/// each rung, up to 5%, since a climb from farther above reaches plans the nearer starts
/// do not.
const ABOVE_PEAK: [u64; 4] = [2000, 500, 100, 20];

/// The share of the schedules built before it after which [`last_climb`] starts no round: a
/// fortieth, so that the last climb stays a small part of the plan time (a larger share
/// rarely changes a plan).
const LAST_CLIMB_SHARE: usize = 40;

/// The search's last step: the climb that judges moves after memory for speed ranked by
/// savings ([`polish::relaxed`]), from the pick and under its peak, so it never
/// raises the peak or the recompute. It starts no round once it has built
/// 1/[`LAST_CLIMB_SHARE`] as many schedules as the search before it, or a bounded phase's
/// walk ([`Evaluator::phase_schedules`]); a round can end past that.
pub(crate) fn last_climb(ev: &mut Evaluator<'_>, picked: (Genome, Fitness)) -> (Genome, Fitness) {
    let level = picked.1.peak;
    let obj = Objective::budget(Some(level));
    let saved_limit = ev
        .limit
        .replace(ev.phase_limit(ev.stats.evaluated / LAST_CLIMB_SHARE));
    let saved = std::mem::replace(&mut ev.objective, obj);
    let start = Member {
        genome: picked.0,
        fitness: picked.1,
    };
    let m = polish::relaxed(ev, start, level);
    ev.objective = saved;
    ev.limit = saved_limit;
    (m.genome, m.fitness)
}

/// What `sublinear` (goal `lowest-peak`) asks of a trade next to the lowest peak
/// (`near_peak`): each 1% more memory must save at least 20% of a step in recompute
/// (recompute in steps over relative memory growth).
pub const PEAK_WORTH: u64 = 20;

/// How far above the lowest peak `near_peak` looks, as a fraction of it (1/100).
pub const NEAR_PEAK_SPAN: u64 = 100;

/// Steep trades next to the lowest peak. The lowest-peak rule ranks any lower peak above any
/// saving in recompute, however small the peak difference, while the recompute is paid
/// every step; a plan a hair above the lowest peak can recompute markedly less. So among
/// the plans
/// evaluated ([`search::Front`]) that peak above the pick by at most 1/100 of it
/// (and no higher than Chen's plan, so the pick never peaks above that), the one
/// minimising `recompute / step + PEAK_WORTH * (peak / pick's peak - 1)` is refined with
/// its peak as the budget ([`refine_under`]). It replaces the pick when it scores lower and
/// the trade holds in device bytes too: the recompute it saves, in steps, is at least
/// `PEAK_WORTH` times the relative growth of the device floor
/// ([`crate::device::device_floor`]: the aligned live peak with in-place chains merged, plus
/// the persistent bytes; no arena is placed). The memory model's peak does not see in-place
/// sharing, so a plan a little above the lowest peak can need more device memory than its
/// peak says, when it loses an output written over its input; the floor turns such a trade
/// down. Where the front is flat next to the lowest peak nothing moves. The refinement
/// builds at most a bounded phase's schedules ([`Evaluator::phase_schedules`]).
pub(crate) fn near_peak(
    ev: &mut Evaluator<'_>,
    opts: &PlanOptions,
    picked: (Genome, Fitness),
    cap: u64,
) -> (Genome, Fitness) {
    let step = ev.ctx.step_units;
    let Some(m) = near_candidate(&ev.front.members, &picked.1, cap, step).cloned() else {
        return picked;
    };
    let saved_limit = ev.limit.replace(ev.phase_limit(usize::MAX));
    let r = refine_under(ev, &m, m.fitness.peak);
    ev.limit = saved_limit;
    let knee = if r.1.feasible && r.1.peak <= m.fitness.peak && r.1.cost < m.fitness.cost {
        r
    } else {
        (m.genome, m.fitness)
    };
    let device = |g: &Genome| {
        let steps = crate::sublinear::evaluate::schedule(ev.ctx, g)?;
        crate::device::device_floor(ev.ctx, opts, &steps).ok()
    };
    // The score already makes the trade steep in the memory model's peak.
    let saved = picked.1.cost.saturating_sub(knee.1.cost);
    match (device(&picked.0), device(&knee.0)) {
        (Some(a), Some(b)) if steep(saved, step, a, b) => {
            ev.stats.traded_from = Some(search::Traded {
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
/// first plan that reaches its best peak, not the cheapest one there.
/// Here the peak is a budget and recompute the objective, from these starts, each climbed
/// ([`super::polish`]) and relaxed ([`relax`]) under it:
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
pub(crate) fn at_peak(
    ev: &mut Evaluator<'_>,
    opts: &PlanOptions,
    pop: Vec<Member>,
    picked: (Genome, Fitness),
) -> (Genome, Fitness) {
    let peak = picked.1.peak;
    let obj = Objective::budget(Some(peak));
    // This stage builds at most as many schedules as the search before it, and at most
    // a bounded phase's walk: its climbs from several starts otherwise grow with the number
    // of blocks, and would dominate the plan time on large graphs.
    let saved_limit = ev.limit.replace(ev.phase_limit(ev.stats.evaluated));
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
        let stream = opts.seed.wrapping_add(AT_PEAK_STREAM);
        let mut islands = genetic::islands(AT_PEAK_ISLANDS, stream, |_| pop.clone());
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
        let c = polish::bottleneck(ev, &m);
        let c = polish::polish(ev, &c);
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
    let c = polish::bottleneck(ev, start);
    let c = polish::polish(ev, &c);
    let out = if c.fitness.feasible && c.fitness.peak <= level {
        relax(ev, c.genome, c.fitness, level)
    } else {
        (c.genome, c.fitness)
    };
    ev.objective = saved;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sublinear::search::member;

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

    /// The bounded phases stop at their walk: on a chain of small layers (one the default
    /// walk does not reach), a walk of one schedule per bounded phase makes the search build fewer
    /// schedules, yet its pick still peaks no higher than Chen's plan and has its genome's
    /// fitness; and the default walk leaves the search as it was without one.
    #[test]
    fn the_bounded_phases_stop_at_their_walk() {
        let g = sgc_ir::zoo::deep_narrow(30, 4);
        let ctx = crate::context::Context::new(&g);
        let pool = crate::sublinear::search::pool();
        let opts = PlanOptions {
            genetic_iters: 2,
            ..PlanOptions::default()
        };
        let search = |walk: usize| {
            let mut ev = Evaluator::new(&ctx, &pool, None);
            ev.phase_walk = walk;
            let (genome, fit) = crate::sublinear::best(&mut ev, &opts);
            assert_eq!(ev.eval(&genome), fit, "walk {walk}");
            (genome, fit, ev.stats.evaluated)
        };
        let chen = {
            let mut ev = Evaluator::new(&ctx, &pool, None);
            ev.eval(&crate::sublinear::chen::best(&ctx))
        };
        let (free_genome, free, free_built) = search(usize::MAX);
        let (genome, _, built) = search(crate::sublinear::search::PHASE_WALK);
        assert_eq!((&genome, built), (&free_genome, free_built));
        let (_, short, short_built) = search(ctx.n);
        assert!(
            short_built < free_built,
            "{short_built} of {free_built} schedules"
        );
        assert!(
            short.feasible && short.peak <= chen.peak,
            "{short:?} above {chen:?}"
        );
        assert!(free.peak <= chen.peak);
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
