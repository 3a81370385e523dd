//! The `optimal` strategy and the bounds: on graphs small enough for the integer program,
//! bound <= optimum <= every other strategy's plan at the same peak, the optimum is a
//! verified plan within the budget, and the solver proves it. Without the `optimal` feature
//! the strategy is a clear error and the bounds still hold against the other strategies.

use sgc_ir::Graph;
use sgc_plan::{plan, BudgetOf, PlanOptions, Strategy};
#[cfg(feature = "optimal")]
use sgc_plan::{plan_with_stats, PlanError};

fn load(rel: &str) -> Graph {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    sgc_ir::load_any(&p).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn at_peak(strategy: Strategy, peak: u64) -> PlanOptions {
    PlanOptions {
        strategy,
        budget: Some(peak),
        budget_of: BudgetOf::Peak,
        evictee_min_size: 0,
        ..PlanOptions::default()
    }
}

/// Graphs and budgets (shares of the way from the per-op lower bound to the unplanned peak)
/// at which HiGHS proves the optimum, or that there is none, within seconds (release: 0.2 s
/// to 2.6 s each). At other budgets the same graphs take longer (release, with another
/// build beside it on the two cores): tiny_cnn at 0.95 15 s, tiny_mlp at 0.9 more than
/// 60 s; at 0.8 and 0.7 HiGHS proves in about 20 s that no schedule fits tiny_mlp
/// (docs/benchmarks.md, "How far from optimal").
#[cfg(feature = "optimal")]
const SMALL: &[(&str, &[f64])] = &[
    ("graphs/tiny_mlp.json", &[0.95]),
    ("graphs/tiny_cnn.json", &[0.6]),
    ("graphs/mlp.json", &[1.0, 0.6]),
    ("benches/data/checkmate/vgg16_b256_train.json", &[0.6, 0.3]),
];

#[cfg(feature = "optimal")]
#[test]
fn the_optimum_lies_between_every_bound_and_every_other_plan() {
    let mut checked = 0;
    for &(rel, shares) in SMALL {
        let g = load(rel);
        let lb = g.lower_bound().bytes;
        let unplanned = g.memory_profile().peak;
        for &q in shares {
            let budget = lb + ((unplanned - lb) as f64 * q) as u64;
            let others: Vec<(Strategy, f64)> =
                [Strategy::Sublinear, Strategy::Dtr, Strategy::ChenSqrt]
                    .into_iter()
                    .filter_map(|s| {
                        let o = PlanOptions {
                            budget: (s != Strategy::ChenSqrt).then_some(budget),
                            ..at_peak(s, budget)
                        };
                        let p = plan(&g, &o, &Default::default()).ok()?;
                        (p.summary.planned_peak <= budget).then_some((s, p.summary.recompute_share))
                    })
                    .collect();
            let result =
                plan_with_stats(&g, &at_peak(Strategy::Optimal, budget), &Default::default());
            let (opt, stats) = match result {
                Err(PlanError::Solver(why)) if others.is_empty() => {
                    assert!(why.contains("proved"), "{rel} at {q}: {why}");
                    continue;
                }
                r => r.unwrap_or_else(|e| panic!("{rel} at {q}: {e}")),
            };
            let solver = stats.optimal.expect("optimal reports its solver");
            assert!(solver.proven, "{rel} at {q}: not proven in the time limit");
            assert!(opt.summary.planned_peak <= budget, "{rel} at {q}");
            let optimum = opt.summary.recompute_share;
            assert!((solver.recompute - optimum).abs() < 1e-9, "{rel} at {q}");
            assert!(solver.bound.recompute <= optimum + 1e-12, "{rel} at {q}");
            let cut = sgc_plan::bound(&g, &opt).unwrap();
            assert!(
                cut.recompute <= optimum + 1e-9,
                "{rel} at {q}: {} bound {} above the optimum {optimum}",
                cut.method.as_str(),
                cut.recompute
            );
            // The optimum within the budget is at most any plan within it.
            for (s, share) in others {
                assert!(
                    optimum <= share + 1e-9,
                    "{rel} at {q}: {s} recomputes {share} < optimum {optimum}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} budgets had a plan");
}

/// HiGHS's parallel tree search runs a fixed number of workers, in parallel or serially
/// (`optimal::SEARCH_WORKERS`): the search, and so the plan, is the same whatever threads
/// the planner has. tiny_cnn at 0.78 of its peak branches (18 nodes; a search that took
/// its workers from the threads would differ here).
#[cfg(feature = "optimal")]
#[test]
fn the_optimal_search_does_not_depend_on_the_threads() {
    use sgc_plan::RunConfig;
    let g = load("graphs/tiny_cnn.json");
    let options = PlanOptions {
        budget: Some((g.memory_profile().peak as f64 * 0.78) as u64),
        ..at_peak(Strategy::Optimal, 0)
    };
    let on = |workers| {
        let run = RunConfig {
            workers: Some(workers),
            ..RunConfig::default()
        };
        let (plan, stats) = plan_with_stats(&g, &options, &run).expect("tiny_cnn at 0.78 plans");
        let solver = stats.optimal.expect("optimal reports its solver");
        assert!(solver.proven, "on {workers} threads: not proven");
        (plan, solver.nodes)
    };
    let (serial, parallel) = (on(1), on(2));
    assert!(
        parallel.1 > 1,
        "the search settles at the root: it tests nothing here"
    );
    assert_eq!(serial.1, parallel.1, "nodes on one thread and on two");
    assert_eq!(serial.0, parallel.0, "the plans on one thread and on two");
}

#[cfg(feature = "optimal")]
#[test]
fn optimal_without_a_budget_or_below_every_schedule_says_what_to_do() {
    let g = load("graphs/tiny_cnn.json");
    let o = PlanOptions {
        strategy: Strategy::Optimal,
        ..PlanOptions::default()
    };
    let e = plan(&g, &o, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("needs --budget"), "{e}");
    let lb = g.lower_bound().bytes;
    match plan(&g, &at_peak(Strategy::Optimal, lb), &Default::default()) {
        Ok(p) => assert!(p.summary.planned_peak <= lb),
        Err(e) => assert!(
            matches!(
                e,
                PlanError::Solver(_)
                    | PlanError::BudgetBelowLowerBound {
                        kind: sgc_plan::LowerBoundKind::LeastPeak,
                        ..
                    }
            ),
            "{e}"
        ),
    }
}

#[cfg(not(feature = "optimal"))]
#[test]
fn optimal_without_the_feature_names_it() {
    let g = load("graphs/tiny_cnn.json");
    let e = plan(
        &g,
        &at_peak(Strategy::Optimal, u64::MAX),
        &Default::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("--features optimal"), "{e}");
}

/// The bound of every real graph's default plan is proven quickly and is never above the
/// plan (`--bound`'s gap is never negative).
#[test]
fn the_bound_of_every_real_graph_is_at_most_its_plan() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../graphs/real");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 12);
    for f in files {
        let g = sgc_ir::load_any(&f).unwrap();
        let o = PlanOptions {
            strategy: Strategy::Dtr,
            ..PlanOptions::default()
        };
        let p = plan(&g, &o, &Default::default()).unwrap();
        let b = sgc_plan::bound(&g, &p).unwrap();
        assert!(
            b.recompute <= p.summary.recompute_share + 1e-12,
            "{}: bound {} above the plan's {}",
            f.display(),
            b.recompute,
            p.summary.recompute_share
        );
    }
}

mod random {
    //! On random graphs (chains, diamonds, skips, views, multi-output and non-recomputable
    //! ops, update phases: `sgc_ir::testgen`), every strategy's plan at a budget recomputes
    //! at least the cut bound at its own peak; with the solver, the optimum at that peak lies
    //! between the bounds and the plan, and is a verified plan.

    use super::*;
    use proptest::prelude::{any, prop_assert, proptest, ProptestConfig, TestCaseError};
    use sgc_ir::testgen::{random_graph, GenConfig};

    fn options(strategy: Strategy, seed: u64, budget: u64) -> PlanOptions {
        PlanOptions {
            strategy,
            seed,
            budget: Some(budget),
            budget_of: BudgetOf::Peak,
            thresh_tries: 4,
            genetic_iters: 3,
            pool_size: 6,
            evictee_min_size: 0,
            ..PlanOptions::default()
        }
    }

    fn bounded(g: &Graph, seed: u64, q: f64) -> Result<(), TestCaseError> {
        let lb = g.lower_bound().bytes;
        let unplanned = g.memory_profile().peak;
        let budget = lb + ((unplanned - lb) as f64 * q) as u64;
        for s in [Strategy::Sublinear, Strategy::Dtr, Strategy::Partition] {
            let Ok(p) = plan(g, &options(s, seed, budget), &Default::default()) else {
                continue;
            };
            let b = sgc_plan::bound(g, &p).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(
                b.recompute <= p.summary.recompute_share + 1e-9,
                "{}: {} {} above the plan's {}",
                s,
                b.method.as_str(),
                b.recompute,
                p.summary.recompute_share
            );
            optimum_between(g, seed, &p, b.recompute)?;
        }
        Ok(())
    }

    #[cfg(feature = "optimal")]
    fn optimum_between(
        g: &Graph,
        seed: u64,
        p: &sgc_plan::Plan,
        cut: f64,
    ) -> Result<(), TestCaseError> {
        let peak = p.summary.planned_peak;
        let o = PlanOptions {
            time_limit_s: Some(20),
            ..options(Strategy::Optimal, seed, peak)
        };
        let (opt, stats) = plan_with_stats(g, &o, &Default::default()).map_err(|e| {
            TestCaseError::fail(format!(
                "optimal at a peak {} meets: {e}",
                p.options.strategy
            ))
        })?;
        let s = stats.optimal.unwrap();
        prop_assert!(opt.summary.planned_peak <= peak);
        prop_assert!(opt.summary.recompute_share <= p.summary.recompute_share + 1e-9);
        if s.proven {
            prop_assert!(cut <= opt.summary.recompute_share + 1e-9);
        }
        prop_assert!(s.bound.recompute <= opt.summary.recompute_share + 1e-9);
        Ok(())
    }

    #[cfg(not(feature = "optimal"))]
    fn optimum_between(_: &Graph, _: u64, _: &sgc_plan::Plan, _: f64) -> Result<(), TestCaseError> {
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn every_plan_lies_above_its_bound(seed in any::<u64>(), q in 0.0f64..1.0) {
            let g = random_graph(seed, &GenConfig::small());
            bounded(&g, seed, q)?;
        }
    }
}

/// On graphs small enough to list every stage-form schedule (each stage recomputes any
/// subset of the earlier ops, in traced order, before its own op), the `optimal` strategy
/// answers what the list does: the least recompute among the schedules the verifier accepts
/// within the budget (within the solver's relative gap), its bound at most that, and a
/// refusal exactly when none fits. This checks the program against the verifier, not
/// against itself: its columns, rows and which of them are integer.
#[cfg(feature = "optimal")]
mod exhaustive {
    use super::*;
    use sgc_ir::testgen::{random_graph, GenConfig};
    use sgc_ir::OpId;
    use sgc_plan::optimal;

    /// The most schedules listed per graph.
    const MAX_SCHEDULES: u64 = 1 << 12;

    /// Every stage-form schedule of `g`, or `None` when there are more than the limit.
    fn schedules(g: &Graph) -> Option<Vec<Vec<OpId>>> {
        let n = g.num_ops();
        let rerunnable: Vec<bool> = g.op_ids().map(|o| g.op(o).recomputable).collect();
        let choices: Vec<Vec<usize>> = (0..n)
            .map(|t| (0..t).filter(|&i| rerunnable[i]).collect())
            .collect();
        let bits: u32 = choices.iter().map(|c| c.len() as u32).sum();
        if bits > MAX_SCHEDULES.trailing_zeros() {
            return None;
        }
        let mut out = Vec::new();
        for mask in 0u64..1 << bits {
            let mut order = Vec::new();
            let mut bit = 0;
            for (t, c) in choices.iter().enumerate() {
                for &i in c {
                    if mask >> bit & 1 == 1 {
                        order.push(OpId::new(i));
                    }
                    bit += 1;
                }
                order.push(OpId::new(t));
            }
            out.push(order);
        }
        Some(out)
    }

    /// The peak and recompute share of every listed schedule the verifier accepts.
    fn accepted(g: &Graph, listed: &[Vec<OpId>]) -> Vec<(u64, f64)> {
        let o = PlanOptions {
            arena: false,
            ..at_peak(Strategy::Optimal, u64::MAX)
        };
        listed
            .iter()
            .filter_map(|ops| sgc_plan::plan_schedule(g, &o, ops).ok())
            .map(|p| (p.summary.planned_peak, p.summary.recompute_share))
            .collect()
    }

    /// The least recompute share among `accepted` within `budget` (`None`: none fits).
    fn least(accepted: &[(u64, f64)], budget: u64) -> Option<f64> {
        accepted
            .iter()
            .filter(|&&(peak, _)| peak <= budget)
            .map(|&(_, share)| share)
            .min_by(f64::total_cmp)
    }

    #[test]
    fn the_optimal_plan_is_the_least_of_every_listed_schedule() {
        let cfg = GenConfig {
            max_layers: 3,
            update_prob: 0.2,
            ..GenConfig::small()
        };
        let mut compared = 0;
        let mut refused = 0;
        let mut recomputing = 0;
        for seed in 0..600u64 {
            let g = random_graph(seed, &cfg);
            let Some(listed) = schedules(&g) else {
                continue;
            };
            let accepted = accepted(&g, &listed);
            let lb = g.lower_bound().bytes;
            let unplanned = g.memory_profile().peak;
            for q in [0.0, 0.1, 0.2, 0.35, 0.6] {
                let budget = lb + ((unplanned - lb) as f64 * q) as u64;
                let best = least(&accepted, budget);
                let result =
                    plan_with_stats(&g, &at_peak(Strategy::Optimal, budget), &Default::default());
                match (best, result) {
                    (None, Err(e)) => {
                        // Below the per-op lower bound, or HiGHS's proof that none fits: not
                        // a time limit.
                        let why = e.to_string();
                        assert!(
                            why.contains("lower bound") || why.contains("proved"),
                            "seed {seed} at {q}: no listed schedule fits, and optimal says {why}"
                        );
                        refused += 1
                    }
                    (None, Ok((p, _))) => panic!(
                        "seed {seed} at {q}: optimal planned {:?} within {budget} B, which no \
                         listed schedule fits",
                        p.steps
                    ),
                    (Some(b), Err(e)) => {
                        panic!(
                            "seed {seed} at {q}: a schedule recomputing {b} fits, optimal says {e}"
                        )
                    }
                    (Some(b), Ok((p, stats))) => {
                        let s = stats.optimal.unwrap();
                        let got = p.summary.recompute_share;
                        assert!(s.proven, "seed {seed} at {q}: not proven");
                        assert!(p.summary.planned_peak <= budget, "seed {seed} at {q}");
                        assert!(
                            got >= b - 1e-12
                                && got <= b * (1.0 + optimal::GAP) + optimal::ABS_GAP + 1e-12,
                            "seed {seed} at {q}: optimal recomputes {got}, the least listed {b}"
                        );
                        assert!(
                            s.bound.recompute <= b + 1e-9,
                            "seed {seed} at {q}: bound {} above {b}",
                            s.bound.recompute
                        );
                        compared += 1;
                        recomputing += usize::from(b > 0.0);
                    }
                }
            }
        }
        assert!(
            compared >= 150 && recomputing >= 50,
            "only {compared} budgets compared, {recomputing} of them recomputing ({refused} refused)"
        );
    }
}
