//! Exchange refinement: a schedule made cheaper under a peak cap by trading one
//! recomputation for a cheaper one, or for none.
//!
//! The split-point search ([`crate::sublinear`]) chooses *which blocks* to recompute; each
//! recomputed storage then lives from its recomputation to its last read. The optimum of
//! the Checkmate program often differs in a few single ops: it keeps a storage the split
//! plan recomputes and pays for the memory by recomputing a cheaper one elsewhere, for just
//! one of its reads. This pass searches that neighbourhood directly on the step sequence.
//!
//! **A move** removes one recomputation step (its readers then read the storage's earlier
//! instance, which lives on until them), and may insert one recomputation of a cheaper op
//! right before one of the reads of its output (that read and the later ones read the new
//! copy, so the earlier instance dies at its previous read). A move is taken only if it
//! lowers the recompute cost, the schedule still replays under the IR's memory model
//! (`sgc_ir::simulate`: every read finds an instance, no view is read stale) and the peak
//! stays within the cap. An inserted op must be one that may run again
//! ([`Context::rerunnable`]) to remake a storage that is not a graph output (a graph output
//! stays resident from its first run to the end: [`Context::keeps_what_it_makes`], the
//! premise of the kept-outputs bound), may not run a third time (the split strategies' promise,
//! which the verifier holds their plans to), and may not read persistent state that a
//! non-recomputable op has already written when it runs ([`Context::root_hazard`]'s rule,
//! as the split plans' walk applies it).
//!
//! **Best improvement, deterministically.** Each round lists the moves by the cost they save
//! (then by position), as many as the remaining budget can replay, replays them in that
//! order in fixed-size chunks evaluated in parallel, and takes the first that passes: the
//! move saving most. The
//! chunk size does not depend on the number of workers, so neither does the plan. The
//! rounds stop when no move passes or after the caller's budget of replayed steps (moves
//! tried times schedule length).
//!
//! **Replays remembered.** A move's replay gives the moved schedule's peak and cost whatever
//! the cap; [`Memo`] keeps them for the schedule they were replayed from. The caller refines
//! at rising caps, often from the schedule the last cap ended with, whose moves all failed
//! that lower cap; with the memo those moves are judged against the new cap without being
//! replayed again. A remembered move is counted in the budget as if replayed, so the memo
//! changes the time a refinement takes, never its result.

use crate::context::Context;
use crate::sublinear::evaluate::{fitness_of, Fitness};
use rayon::prelude::*;
use sgc_ir::OpId;

/// Moves replayed per parallel batch.
const CHUNK: usize = 256;

/// A schedule: `(op, recomputed?)` per step.
type Steps = Vec<(OpId, bool)>;

/// A refined schedule and its fitness (peak and recompute cost units).
pub(crate) struct Refined {
    pub steps: Steps,
    pub fitness: Fitness,
}

/// One move: remove the recomputation at `drop`, and insert a recomputation of `insert.0`
/// before the step now at `insert.1` (positions in the schedule after the removal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Move {
    drop: usize,
    insert: Option<(OpId, usize)>,
}

/// The replays of moves from one schedule: each move's fitness where its schedule replays
/// (`None` where it does not), whatever the cap (see the module doc).
#[derive(Default)]
pub(crate) struct Memo {
    from: Steps,
    replayed: std::collections::HashMap<Move, Option<Fitness>>,
}

impl Memo {
    /// The memo of `s`: this one if it was made from `s`, else emptied for `s`.
    fn of(&mut self, s: &[(OpId, bool)]) -> &mut Self {
        if self.from != s {
            self.from = s.to_vec();
            self.replayed.clear();
        }
        self
    }
}

/// The schedule after exchanges that each lower the recompute cost with the peak within
/// `cap`, replaying at most `budget` steps, with its fitness; `None` when
/// no exchange helps (or `steps` does not replay within the cap). `memo` holds the replays
/// of the schedule the last refinement ended with, and is left with this one's.
pub(crate) fn refine(
    ctx: &Context<'_>,
    pool: &rayon::ThreadPool,
    steps: &[(OpId, bool)],
    (cap, budget): (u64, u64),
    memo: &mut Memo,
) -> Option<Refined> {
    within(ctx, steps, cap)?;
    let mut s = steps.to_vec();
    let mut work = 0u64;
    let mut improved = None;
    while work < budget {
        let left = budget - work;
        let moves = moves(ctx, &s, (left / s.len().max(1) as u64) as usize + 1);
        let memo = memo.of(&s);
        let Some((next, fitness, spent)) = first_passing(ctx, pool, memo, &moves, (cap, left))
        else {
            break;
        };
        work += spent;
        s = next;
        improved = Some(fitness);
    }
    Some(Refined {
        steps: s,
        fitness: improved?,
    })
}

/// The fitness of `steps` under the IR's memory model if they replay with the peak within
/// `cap`.
fn within(ctx: &Context<'_>, steps: &[(OpId, bool)], cap: u64) -> Option<Fitness> {
    Some(fitness_of(ctx, steps, 0)).filter(|f| f.feasible && f.peak <= cap)
}

/// `s` with move `m` applied.
fn apply(s: &[(OpId, bool)], m: Move) -> Steps {
    let mut out = s.to_vec();
    out.remove(m.drop);
    if let Some((op, at)) = m.insert {
        out.insert(at, (op, true));
    }
    out
}

/// The `limit` moves that save most (then by position), most saving first: per removed
/// recomputation its insertions from the cheapest, merged by what they save.
fn moves(ctx: &Context<'_>, s: &[(OpId, bool)], limit: usize) -> Vec<Move> {
    let units = |op: OpId| ctx.cost_units[op.index()];
    let mut runs = vec![0u8; ctx.g.num_ops()];
    for &(op, _) in s {
        runs[op.index()] = runs[op.index()].saturating_add(1);
    }
    let mut inserts = inserts(ctx, s);
    inserts.sort_by_key(|&(op, at)| (units(op), at, op));
    // One cursor per removable step: what its next move saves, its position, the index of
    // its next insertion (`usize::MAX`: the removal alone, not yet taken).
    let mut heap = std::collections::BinaryHeap::new();
    for (d, &(op, recomputed)) in s.iter().enumerate() {
        if recomputed {
            heap.push((units(op), std::cmp::Reverse(d), usize::MAX));
        }
    }
    let mut out = Vec::new();
    while let Some((_, std::cmp::Reverse(d), k)) = heap.pop() {
        if out.len() >= limit {
            break;
        }
        let dropped = s[d].0;
        let full = units(dropped);
        let next = if k == usize::MAX {
            out.push(Move {
                drop: d,
                insert: None,
            });
            0
        } else {
            let (op, before) = inserts[k];
            let twice = runs[op.index()] - u8::from(op == dropped) >= 2;
            // Inserting before the removed step itself gains nothing.
            if !twice && before != d {
                let at = if before > d { before - 1 } else { before };
                out.push(Move {
                    drop: d,
                    insert: Some((op, at)),
                });
            }
            k + 1
        };
        if let Some(&(op, _)) = inserts.get(next) {
            if units(op) < full {
                heap.push((full - units(op), std::cmp::Reverse(d), next));
            }
        }
    }
    out
}

/// The recomputations that may be inserted: `(op, position)` for each read at `position`
/// of a storage whose producer may run again there.
fn inserts(ctx: &Context<'_>, s: &[(OpId, bool)]) -> Vec<(OpId, usize)> {
    let mut out = Vec::new();
    // The traced position of the last original run so far: a recomputation there reads
    // persistent state as the originals up to it left it.
    let mut frontier: Option<u32> = None;
    for (j, &(op, recomputed)) in s.iter().enumerate() {
        for &r in ctx.read_roots(op.index()) {
            let Some(p) = ctx.g.producer(r) else { continue };
            let dirty = frontier.is_some_and(|f| ctx.root_hazard(r) <= f);
            // Reading what the step right before made gains nothing.
            let adjacent = j > 0 && s[j - 1].0 == p;
            if !ctx.keeps_what_it_makes(p) && !dirty && !adjacent {
                out.push((p, j));
            }
        }
        if !recomputed {
            frontier = Some(op.index() as u32);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The first of `moves` (in order) from `memo`'s schedule whose schedule replays within
/// `cap`, with its fitness and the steps replayed to find it (a remembered replay counted
/// as one); `None` when none does within `budget` replayed steps. Every replay joins `memo`.
fn first_passing(
    ctx: &Context<'_>,
    pool: &rayon::ThreadPool,
    memo: &mut Memo,
    moves: &[Move],
    (cap, budget): (u64, u64),
) -> Option<(Steps, Fitness, u64)> {
    let s = &memo.from;
    let per = s.len() as u64;
    let mut spent = 0u64;
    for chunk in moves.chunks(CHUNK) {
        if spent >= budget {
            return None;
        }
        spent += per * chunk.len() as u64;
        let fresh: Vec<Move> = chunk
            .iter()
            .copied()
            .filter(|m| !memo.replayed.contains_key(m))
            .collect();
        let replays = pool.install(|| {
            fresh
                .par_iter()
                .map(|&m| Some(fitness_of(ctx, &apply(s, m), 0)).filter(|f| f.feasible))
                .collect::<Vec<_>>()
        });
        memo.replayed.extend(fresh.into_iter().zip(replays));
        let passing = chunk.iter().find_map(|m| {
            let f = memo.replayed[m].filter(|f| f.peak <= cap)?;
            Some((apply(&memo.from, *m), f))
        });
        if let Some((next, f)) = passing {
            return Some((next, f, spent));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{BudgetOf, PlanOptions, Strategy};
    use crate::sublinear::evaluate::{recompute_units, schedule};
    use crate::sublinear::genome::{random_splits, Rules};
    use crate::sublinear::search::pool;
    use sgc_ir::testgen::{random_graph, GenConfig, SplitMix64};

    const BUDGET: u64 = 10_000_000;

    /// On random graphs, split plans and caps (the plan's own peak, and halfway to the
    /// unplanned peak): a refined schedule replays within its cap, recomputes less than its
    /// start, runs no op more than twice, and its plan passes the independent verifier
    /// under the split strategies' rules; the same on one worker as on two.
    #[test]
    fn refined_schedules_fit_recompute_less_and_verify() {
        let (one, two) = (
            rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap(),
            pool(),
        );
        let mut refined = 0;
        for seed in 0..80 {
            let g = random_graph(seed, &GenConfig::small());
            let ctx = Context::new(&g);
            let mut rng = SplitMix64::new(seed);
            let mut genome = random_splits(&mut rng, ctx.n);
            genome.rules = Rules::all()[rng.index(8)];
            let Some(start) = schedule(&ctx, &genome) else {
                continue;
            };
            let own = fitness_of(&ctx, &start, 0);
            if !own.feasible {
                continue;
            }
            let own = own.peak;
            for cap in [own, own + (ctx.unplanned_peak().saturating_sub(own)) / 2] {
                let Some(r) = refine(&ctx, &two, &start, (cap, BUDGET), &mut Memo::default())
                else {
                    continue;
                };
                refined += 1;
                let ops: Vec<OpId> = r.steps.iter().map(|s| s.0).collect();
                let f = r.fitness;
                assert!(f.peak <= cap, "seed {seed}: peak {} over {cap}", f.peak);
                assert_eq!(
                    f.peak,
                    sgc_ir::simulate(&g, &ops).unwrap().peak,
                    "seed {seed}"
                );
                assert!(f.cost < recompute_units(&ctx, &start), "seed {seed}");
                assert_eq!(f.cost, recompute_units(&ctx, &r.steps), "seed {seed}");
                let options = PlanOptions {
                    strategy: Strategy::Sublinear,
                    arena: false,
                    ..PlanOptions::default()
                };
                crate::plan_schedule(&g, &options, &ops)
                    .unwrap_or_else(|e| panic!("seed {seed}, cap {cap}: {e}"));
                let again = refine(&ctx, &one, &start, (cap, BUDGET), &mut Memo::default());
                let again = again.unwrap();
                assert_eq!(again.steps, r.steps, "seed {seed}: one worker differs");
            }
        }
        assert!(refined >= 20, "only {refined} refinements moved");
    }

    /// Refining at rising caps, each from where the last ended, gives the same schedules
    /// with the memo carried from cap to cap as with a fresh one at each, and the carried
    /// memo holds the replays of the schedule the next cap starts from.
    #[test]
    fn the_memo_changes_no_refinement() {
        let pool = pool();
        let mut carried_from = 0;
        for seed in 0..80 {
            let g = random_graph(seed, &GenConfig::small());
            let ctx = Context::new(&g);
            let mut rng = SplitMix64::new(seed);
            let Some(start) = schedule(&ctx, &random_splits(&mut rng, ctx.n)) else {
                continue;
            };
            let own = fitness_of(&ctx, &start, 0);
            if !own.feasible {
                continue;
            }
            let gap = ctx.unplanned_peak().saturating_sub(own.peak);
            let (mut with, mut without) = (start.clone(), start.clone());
            let mut memo = Memo::default();
            for k in 0..6 {
                let cap = own.peak + gap * k / 5;
                let fresh = refine(&ctx, &pool, &without, (cap, BUDGET), &mut Memo::default());
                let kept = refine(&ctx, &pool, &with, (cap, BUDGET), &mut memo);
                assert_eq!(
                    kept.as_ref().map(|r| &r.steps),
                    fresh.as_ref().map(|r| &r.steps),
                    "seed {seed}, cap {cap}"
                );
                if let (Some(a), Some(b)) = (kept, fresh) {
                    (with, without) = (a.steps, b.steps);
                }
                if memo.from == with && !memo.replayed.is_empty() {
                    carried_from += 1;
                }
            }
        }
        assert!(
            carried_from >= 20,
            "the memo was ready for the next cap {carried_from} times"
        );
    }

    /// Checkmate's random layered graph of 100 ops at 0.8 of its peak: the default plan
    /// (sublinear, 20 generations) recomputed 3.833% of a step before this pass; HiGHS proves 2.296%
    /// the optimum at that budget (`cargo bench --features optimal --bench optimal`,
    /// docs/benchmarks.md). With the exchanges the plan is within 1e-4 of a step of it.
    #[test]
    fn the_budgeted_plan_on_random_layered_n100_reaches_the_optimum() {
        let g = crate::testing::load("benches/data/checkmate/random_layered_n100.json");
        let unplanned = g.memory_profile().peak;
        let options = PlanOptions {
            strategy: Strategy::Sublinear,
            budget: Some(unplanned * 8 / 10),
            budget_of: BudgetOf::Peak,
            genetic_iters: 20,
            arena: false,
            ..PlanOptions::default()
        };
        let plan = crate::plan(&g, &options, &Default::default()).unwrap();
        let share = plan.summary.recompute_share;
        assert!(share <= 0.02296 + 1e-4, "recomputes {share:.5} of a step");
    }
}
