//! A lower bound on the recompute of any plan within a peak: how far from optimal a plan can
//! be, for graphs of any size.
//!
//! **The cut bound.** Every plan sgc makes runs each op for the first time in the traced
//! order (recomputations come in between). Take the moment op `t` first runs. Every storage
//! made before it (a graph input, or the output of an op before `t`) that an op after `t`
//! still reads, or that is a graph output, is at that moment either resident or made again
//! later; making it again runs its producer once more, after the moment (a graph output
//! too may be dropped and made again before the step ends). The storages op `t` touches,
//! graph inputs and storages whose producer may not run again after `t` (it is not
//! recomputable, or a recomputation after `t` would read state already written in place)
//! must be resident. So if the peak is `P`, the storages that are not resident at
//! that moment weigh at least `resident_if_all_kept - P` bytes, and each byte of a storage
//! made by op `p` costs at least `cost(p) / bytes made by p` to make again (a producer runs
//! once for all its outputs). Taking the cheapest bytes first (a fractional knapsack) gives
//! a lower bound on the recompute of any plan within `P` at that moment; the bound is the
//! largest over all moments. It costs one pass over the traced order, with a sort of the
//! live storages where the peak is exceeded.
//!
//! The bound is about plans in *stage form* (first runs in the traced order), which is what
//! every strategy of sgc makes; the `optimal` strategy's solver proves a bound over the same
//! set ([`crate::optimal`]), often much closer.

use crate::context::{Context, NO_HAZARD};
use sgc_ir::OpId;

/// A proven lower bound on the recompute of any stage-form plan within a peak.
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    /// Recompute cost, as a share of one step's cost.
    pub recompute: f64,
    /// How it was proven.
    pub method: BoundMethod,
    /// The op at whose first run the cut bound is reached (`None`: the bound is 0, or it
    /// is the solver's).
    pub at_op: Option<OpId>,
}

/// How a bound was proven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundMethod {
    /// The cut bound of this module.
    Cut,
    /// The linear relaxation of the `optimal` strategy's integer program, solved to
    /// optimality.
    Relaxation,
    /// The dual bound of the `optimal` strategy's branch and bound.
    Solver,
}

impl BoundMethod {
    /// Its name in reports.
    pub fn as_str(&self) -> &'static str {
        match self {
            BoundMethod::Cut => "cut bound",
            BoundMethod::Relaxation => "linear relaxation of the integer program",
            BoundMethod::Solver => "HiGHS's dual bound",
        }
    }
}

/// One storage alive at a moment: bytes, its producer (`None`: a graph input), the last
/// op that touches it.
#[derive(Clone, Copy)]
struct Live {
    root: usize,
    bytes: u64,
    producer: Option<usize>,
    last: usize,
    kept: bool,
}

pub(crate) fn cut(ctx: &Context<'_>, peak: u64) -> Bound {
    let g = ctx.g;
    let n = ctx.n;
    let step: f64 = ctx.cost.iter().sum();
    let made_bytes: Vec<u64> = (0..n)
        .map(|i| ctx.out_roots[i].iter().map(|r| ctx.bytes[r.index()]).sum())
        .collect();
    // Storages by the op that makes them (graph inputs at the start).
    let mut born: Vec<Vec<Live>> = vec![Vec::new(); n + 1];
    for r in g.tensor_ids() {
        let acc = &ctx.accesses[r.index()];
        if ctx.root[r.index()] != r || g.is_persistent(r) || acc.is_empty() {
            continue;
        }
        let producer = g.producer(r).map(|p| p.index());
        let live = Live {
            root: r.index(),
            bytes: ctx.bytes[r.index()],
            producer,
            last: *acc.last().unwrap() as usize,
            kept: ctx.kept[r.index()],
        };
        born[producer.map_or(0, |p| p + 1)].push(live);
    }
    let may_rerun_after = |p: usize, t: usize| {
        ctx.rerunnable[p] && (ctx.dirty_at[p] == NO_HAZARD || ctx.dirty_at[p] as usize > t)
    };
    let mut alive: Vec<Live> = Vec::new();
    let mut best = Bound {
        recompute: 0.0,
        method: BoundMethod::Cut,
        at_op: None,
    };
    let mut touched = vec![false; g.num_tensors()];
    for (t, newly) in born.iter().enumerate().take(n) {
        alive.extend(newly.iter().copied());
        alive.retain(|l| l.kept || l.last >= t);
        // The storages op `t` touches are resident; the others alive may be dropped if
        // their producer may run again after `t`.
        let mut total = ctx.persistent_bytes;
        for r in ctx.in_roots[t].iter().chain(&ctx.out_roots[t]) {
            if !std::mem::replace(&mut touched[r.index()], true) {
                total += ctx.bytes[r.index()];
            }
        }
        let mut optional: Vec<(f64, u64, f64)> = Vec::new();
        for l in alive.iter().filter(|l| !touched[l.root]) {
            total += l.bytes;
            if let Some(p) = l.producer.filter(|&p| may_rerun_after(p, t)) {
                let per_byte = ctx.cost[p] / made_bytes[p].max(1) as f64;
                optional.push((per_byte, l.bytes, ctx.cost[p]));
            }
        }
        for r in ctx.in_roots[t].iter().chain(&ctx.out_roots[t]) {
            touched[r.index()] = false;
        }
        let Some(excess) = total.checked_sub(peak).filter(|&e| e > 0) else {
            continue;
        };
        optional.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut left = excess;
        let mut cost = 0.0;
        for &(per_byte, bytes, whole) in &optional {
            let take = bytes.min(left);
            cost += (per_byte * take as f64).min(whole);
            left -= take;
            if left == 0 {
                break;
            }
        }
        // With too few droppable bytes no stage-form plan fits this peak; the cost of
        // dropping all of them is still a lower bound on one that does.
        let share = if step > 0.0 { cost / step } else { 0.0 };
        if share > best.recompute {
            best = Bound {
                recompute: share,
                method: BoundMethod::Cut,
                at_op: Some(OpId::new(t)),
            };
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{BudgetOf, PlanOptions, Strategy};

    /// The peak a share `q` of the way from `g`'s per-op lower bound to its unplanned peak.
    fn of_the_way(g: &sgc_ir::Graph, q: f64) -> u64 {
        let lb = g.lower_bound().bytes;
        lb + ((g.memory_profile().peak - lb) as f64 * q) as u64
    }

    /// The bound is never above a plan's own recompute, at the plan's own peak, and it is
    /// positive below the unplanned peak where something must be recomputed.
    #[test]
    fn no_plan_recomputes_less_than_the_cut_bound_at_its_peak() {
        for rel in [
            "graphs/tiny_cnn.json",
            "graphs/mlp.json",
            "graphs/tiny_transformer.json",
            "graphs/resnet50.json",
            "benches/data/checkmate/vgg16_b256_train.json",
            "benches/data/checkmate/random_layered_n100.json",
        ] {
            let g = crate::testing::load(rel);
            let ctx = Context::new(&g);
            let unplanned = g.memory_profile().peak;
            let (mut positive, mut recomputing) = (0, 0);
            for strategy in [Strategy::Sublinear, Strategy::Dtr] {
                for q in [0.9, 0.7, 0.5, 0.3] {
                    let budget = of_the_way(&g, q);
                    let options = PlanOptions {
                        strategy,
                        budget: Some(budget),
                        budget_of: BudgetOf::Peak,
                        evictee_min_size: 0,
                        arena: false,
                        ..PlanOptions::default()
                    };
                    let Ok(plan) = crate::plan(&g, &options, &Default::default()) else {
                        continue;
                    };
                    let b = cut(&ctx, plan.summary.planned_peak);
                    assert!(
                        b.recompute <= plan.summary.recompute_share + 1e-12,
                        "{rel}, {strategy} at {q}: bound {} above the plan's {}",
                        b.recompute,
                        plan.summary.recompute_share
                    );
                    positive += usize::from(b.recompute > 0.0);
                    recomputing += usize::from(plan.summary.recompute_share > 0.0);
                }
            }
            assert_eq!(cut(&ctx, unplanned).recompute, 0.0, "{rel}");
            assert!(
                recomputing == 0 || positive > 0,
                "{rel}: the bound was 0 at every budget"
            );
        }
    }

    /// The integer program's linear relaxation holds each stage to this module's argument
    /// (`optimal::model`, its residency rows), so its optimum is never below the cut bound
    /// at the same peak.
    #[cfg(feature = "optimal")]
    #[test]
    fn the_relaxation_is_never_below_the_cut_bound() {
        let mut checked = 0;
        for rel in [
            "graphs/tiny_cnn.json",
            "graphs/mlp.json",
            "benches/data/checkmate/vgg16_b256_train.json",
            "benches/data/checkmate/random_layered_n100.json",
        ] {
            let g = crate::testing::load(rel);
            let ctx = Context::new(&g);
            for q in [0.9, 0.7, 0.5, 0.3] {
                let peak = of_the_way(&g, q);
                let c = cut(&ctx, peak).recompute;
                let Some(r) = crate::optimal::relaxation(&ctx, peak, 30) else {
                    continue;
                };
                // The relaxation's value comes back lowered by the solver's tolerance.
                assert!(
                    r + 1e-5 >= c,
                    "{rel} at {q}: relaxation {r} below the cut bound {c}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 8, "only {checked} relaxations solved");
    }
}
