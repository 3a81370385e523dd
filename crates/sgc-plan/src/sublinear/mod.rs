//! The sublinear-memory search (MegEngine's static-graph method): split the traced order
//! into blocks, keep each block's checkpoints, and recompute the rest of a block when the
//! backward pass reads it; choose the splits for the lowest peak (or, with a budget, the
//! least recompute under it).
//!
//! **A candidate and its evaluation.** A candidate plan is a [`genome::Genome`]: split
//! points, kept roots and a variant of the rules. Every candidate goes through the same
//! steps, one module each:
//! - [`discard`]: the discard plan, which storage is freed after which access and
//!   recomputed before which read (its key, fingerprinted by [`fingerprint`], is all a
//!   schedule depends on);
//! - [`recompute`]: the discard plan becomes a step sequence with bounded recomputation
//!   (bounded to the block; every op runs at most twice), its live bytes counted as it goes
//!   under the IR's memory model ([`profile`] counts them again from the steps, for the
//!   bottleneck climb and the tests);
//! - [`evaluate`]: the schedule's peak and recompute cost make a fitness under the
//!   objective (the lowest peak, a budget, or a balance of the two);
//! - [`search`]: the evaluator that runs batches of candidates in parallel, caches them by
//!   genome and by discard plan, and keeps the front of every plan it has seen.
//!
//! **The phases, in the order a plan is made** ([`best`]):
//! 1. **Starting population** ([`thresholds`]): plans from thresholds on the live bytes a
//!    block creates, Chen's sqrt(n) plan ([`chen`]) and its variants.
//! 2. **Climb** ([`polish`]): a local hill climb from the best plan (moving, adding and
//!    removing splits, reshaping the blocks at the peak).
//! 3. **Genetic refinement** ([`genetic`]): `genetic_iters` generations of mutation and
//!    crossover on [`ISLANDS`] independent populations, some from the climbed population
//!    and some from the one before it, so the search does not stay in one climb's basin;
//!    then a climb from the best again.
//! 4. **Memory for speed** ([`relax`]): recomputed ops turned back into checkpoints, the
//!    most expensive first, each kept only while the peak stays under the bound
//!    (`lb_memory` or the budget, the smaller if both; without either the best peak itself,
//!    so recompute drops at no memory cost). Phases 2-4 also run on the population before
//!    the refinement, and the better pick wins, since the greedy last steps could otherwise
//!    end worse after a refinement than without it.
//! 5. **Least recompute at the peak** ([`fixed_peak`]), without a budget: the peak reached
//!    becomes the budget and the plan recomputing least under it is searched for again;
//!    then a plan a little above it may be traded for, when the recompute saved is worth
//!    the memory added; last, a climb under the pick's peak judged after memory for speed.
//!
//! Chen's plan is in the population, so the pick never peaks above it; with Chen's peak as
//! the budget, it never recomputes more either (tests check both on every graph).

pub(crate) mod chen;
pub(crate) mod discard;
pub(crate) mod evaluate;
mod fingerprint;
pub(crate) mod fixed_peak;
mod genetic;
pub(crate) mod genome;
mod polish;
mod profile;
pub(crate) mod recompute;
mod relax;
pub(crate) mod search;
mod thresholds;

pub use fixed_peak::{NEAR_PEAK_SPAN, PEAK_WORTH};

use crate::options::PlanOptions;
use evaluate::Fitness;
use genome::Genome;
use search::{dedup, sort_population, Evaluator, Member};

/// Independent populations of the genetic refinement, each with its own random stream; the
/// best of all is kept. One population's result depends strongly on its seed, and
/// populations from different starts reach different basins.
const ISLANDS: u64 = 5;

/// Islands that start from the climbed population (refining the climb's basin); the others
/// start from the population before the climb, whose threshold plans lead elsewhere.
const CLIMBED_ISLANDS: u64 = 2;

/// The climbed island that starts from a population climbed with its costliest
/// recomputations kept too ([`polish::costly`]): it reaches plans that recompute less than
/// a second plain climbed island does.
const COSTLY_ISLAND: u64 = 1;

/// Runs the whole search and returns the best genome and its fitness.
pub(crate) fn best(ev: &mut Evaluator<'_>, opts: &PlanOptions) -> (Genome, Fitness) {
    let (mut pop, chen) = thresholds::initial_population(ev, opts.thresh_tries);
    let unclimbed = pop.clone();
    // Both climbs start from the best plan with its peak's blocks reshaped, once. The
    // reshaping's rounds grow with the number of blocks: it walks at most a bounded
    // phase's op-steps.
    let saved_limit = ev.limit.replace(ev.phase_limit(usize::MAX));
    let shaped = polish::bottleneck(ev, &pop[0]);
    ev.limit = saved_limit;
    let climbed = polish::polish(ev, &shaped);
    push_best(&mut pop, climbed);
    let initial = pop.clone();
    if opts.genetic_iters > 0 {
        pop = refine(ev, opts, pop, &unclimbed, &shaped);
    }
    let bound = match (opts.budget, opts.lb_memory) {
        (Some(b), Some(l)) => Some(b.min(l)),
        (b, l) => b.or(l),
    };
    let obj = ev.objective;
    let ours = relax::finish(ev, pop.clone(), bound, &chen);
    // The finishing steps are greedy, so refinement could end worse than no refinement
    // after them; finishing the initial population too makes it never do.
    let picked = if opts.genetic_iters == 0 {
        ours
    } else {
        let theirs = relax::finish(ev, initial, bound, &chen);
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
    ev.stats.before_fixed_peak = Some(search::Traded {
        peak: picked.1.peak,
        recompute_units: picked.1.cost,
        step_units: ev.ctx.step_units,
    });
    let picked = fixed_peak::at_peak(ev, opts, pop, picked);
    let picked = fixed_peak::near_peak(ev, opts, picked, cap);
    fixed_peak::last_climb(ev, picked)
}

/// The genetic refinement of the climbed population `climbed` on [`ISLANDS`] islands, then
/// a climb from its best. `unclimbed` is the population before the climb and `shaped` the
/// best plan with its peak's blocks reshaped, where the costly island's climb starts.
fn refine(
    ev: &mut Evaluator<'_>,
    opts: &PlanOptions,
    climbed: Vec<Member>,
    unclimbed: &[Member],
    shaped: &Member,
) -> Vec<Member> {
    let mut costly = unclimbed.to_vec();
    let kept = polish::costly(ev, shaped);
    let kept = polish::polish(ev, &kept);
    push_best(&mut costly, kept);
    // The later islands start from the population before the climb: the climb pulls every
    // member towards one basin, and an unclimbed island keeps the threshold plans'
    // diversity, as MegEngine's own refinement does.
    let mut islands = genetic::islands(ISLANDS, opts.seed, |k| {
        if k == COSTLY_ISLAND {
            costly.clone()
        } else if k < CLIMBED_ISLANDS {
            climbed.clone()
        } else {
            unclimbed.to_vec()
        }
    });
    genetic::refine(ev, &mut islands, opts.genetic_iters, opts.pool_size);
    let mut pop: Vec<Member> = islands.into_iter().flat_map(|i| i.pop).collect();
    dedup(&mut pop);
    climb(ev, &mut pop);
    pop
}

/// Adds the local refinement of the population's best member ([`polish`]).
fn climb(ev: &mut Evaluator<'_>, pop: &mut Vec<Member>) {
    sort_population(pop, ev.objective);
    let better = polish::bottleneck(ev, &pop[0]);
    let better = polish::polish(ev, &better);
    push_best(pop, better);
}

/// Puts `better`, climbed from the best of `pop` (sorted, best first), in front of it
/// unless the climb did not move.
fn push_best(pop: &mut Vec<Member>, better: Member) {
    if better.genome != pop[0].genome {
        pop.insert(0, better);
    }
}
