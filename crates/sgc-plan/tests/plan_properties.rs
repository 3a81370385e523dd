//! Property: random valid graphs (chains, diamonds, skip connections, multi-output ops,
//! views, non-recomputable ops, update phases; `sgc_ir::testgen`) always plan to a schedule
//! the verifier accepts, under every strategy, with and without tight DTR thresholds and
//! budgets (the partition strategy also at the least saved bytes it can keep); and a
//! corrupted plan is always rejected.

use proptest::prelude::*;
use sgc_ir::testgen::{random_graph, GenConfig};
use sgc_plan::plan::saved_bytes;
use sgc_plan::{plan, verify, BudgetOf, PlanError, PlanOptions, RunConfig, Strategy};

fn options(strategy: Strategy, seed: u64) -> PlanOptions {
    PlanOptions {
        strategy,
        seed,
        thresh_tries: 4,
        genetic_iters: 3,
        pool_size: 6,
        evictee_min_size: 0,
        ..PlanOptions::default()
    }
}

fn check(g: &sgc_ir::Graph, o: &PlanOptions) -> Result<Option<sgc_plan::Plan>, TestCaseError> {
    match plan(
        g,
        o,
        &RunConfig {
            workers: Some(1),
            progress: None,
        },
    ) {
        Ok(p) => {
            let v = verify(g, &p);
            prop_assert!(v.is_ok(), "{}: {:?}", o.strategy, v.err());
            prop_assert_eq!(v.unwrap().peak_bytes, p.summary.planned_peak);
            if let (Some(b), Some(a), BudgetOf::Device) = (o.budget, &p.arena, o.budget_of) {
                // A budget bounds device bytes: the arena plus persistent bytes.
                prop_assert!(a.size + g.persistent_bytes() <= b);
            }
            Ok(Some(p))
        }
        Err(PlanError::BudgetNotMet {
            best_peak,
            best_device,
            budget,
            ..
        }) => {
            prop_assert!(best_device.map_or(best_peak > budget, |d| d > budget));
            Ok(None)
        }
        // Below a proven lower bound: refused before planning.
        Err(PlanError::BudgetBelowLowerBound {
            budget,
            lower_bound,
            ..
        }) => {
            prop_assert!(budget < lower_bound);
            Ok(None)
        }
        // A graph with no backward op has nothing to partition.
        Err(PlanError::Partition(_)) if o.strategy == Strategy::Partition && !has_backward(g) => {
            Ok(None)
        }
        Err(e) => Err(TestCaseError::fail(format!("{}: {e}", o.strategy))),
    }
}

fn has_backward(g: &sgc_ir::Graph) -> bool {
    g.op_ids()
        .any(|o| g.phase(o) == Some(sgc_ir::Phase::Backward))
}

/// The partition strategy under a budget of saved bytes: refused below the least any
/// partition keeps, met at exactly that.
fn check_saved(g: &sgc_ir::Graph, seed: u64) -> Result<(), TestCaseError> {
    if !has_backward(g) {
        return Ok(());
    }
    let at = |budget| PlanOptions {
        budget: Some(budget),
        budget_of: BudgetOf::Saved,
        ..options(Strategy::Partition, seed)
    };
    let lowest = match plan(g, &at(0), &RunConfig::default()) {
        Err(PlanError::SavedBudgetNotMet { lowest, .. }) => lowest,
        Ok(p) => {
            let steps: Vec<_> = p.steps.iter().map(|s| (s.op, s.recompute)).collect();
            prop_assert_eq!(saved_bytes(g, &steps), 0);
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(format!("saved budget 0: {e}"))),
    };
    let p = check(g, &at(lowest))?.expect("the least kept is met");
    let steps: Vec<_> = p.steps.iter().map(|s| (s.op, s.recompute)).collect();
    prop_assert!(saved_bytes(g, &steps) <= lowest);
    prop_assert!(sgc_plan::check(g, &p).is_ok());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_plan_to_verified_schedules(seed in any::<u64>(), large in any::<bool>()) {
        let cfg = if large { GenConfig { max_layers: 60, ..GenConfig::default() } } else { GenConfig::small() };
        let g = random_graph(seed, &cfg);
        for s in Strategy::ALL {
            check(&g, &options(s, seed))?;
        }
        // Tight memory: DTR evicting at the lower bound, and a budget at the lower bound.
        let lb = g.lower_bound().bytes;
        check(&g, &PlanOptions { eviction_threshold: Some(lb), ..options(Strategy::Dtr, seed) })?;
        check(&g, &PlanOptions { sqrt_sampling: true, eviction_threshold: Some(lb), ..options(Strategy::Dtr, seed) })?;
        check(&g, &PlanOptions { budget: Some(lb), ..options(Strategy::Sublinear, seed) })?;
        check_saved(&g, seed)?;
    }

    #[test]
    fn dropping_a_step_is_always_caught(seed in any::<u64>(), pick in any::<usize>()) {
        let g = random_graph(seed, &GenConfig::small());
        let mut p = plan(&g, &options(Strategy::Sublinear, seed), &RunConfig::default()).unwrap();
        prop_assume!(!p.steps.is_empty());
        let k = pick % p.steps.len();
        p.steps.remove(k);
        prop_assert!(verify(&g, &p).is_err());
    }
}

/// A valid graph whose storage nearly fills 64 bits (a fuzzing find: the threshold search
/// overflowed) plans under every strategy, with and without a budget, without panicking.
#[test]
fn storage_near_u64_max_plans_without_overflow() {
    let text = r#"{"format": "sgc-graph", "version": 1,
     "tensors": [{"name": "x", "dtype": "u8", "shape": [4611686018427387904], "kind": "input"},
                 {"name": "a0", "dtype": "u8", "shape": [11529215046068469760]},
                 {"name": "g0", "dtype": "u8", "shape": [1]}],
     "ops": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["a0"]},
             {"name": "g", "op": "relu_grad", "inputs": ["a0"], "outputs": ["g0"]}],
     "outputs": ["g0"]}"#;
    let g = sgc_ir::format::from_str(text).unwrap();
    for s in Strategy::ALL {
        for budget in [None, Some(u64::MAX), Some(g.lower_bound().bytes)] {
            let o = PlanOptions {
                budget,
                ..options(s, 0)
            };
            match plan(&g, &o, &RunConfig::default()) {
                Ok(p) => assert!(verify(&g, &p).is_ok(), "{s}"),
                Err(PlanError::BudgetNotMet { .. }) => {}
                // No backward op: nothing to partition.
                Err(PlanError::Partition(_)) if s == Strategy::Partition => {}
                Err(e) => panic!("{s} {budget:?}: {e}"),
            }
        }
    }
}

/// A proptest find from CI (seed 4064541356663879758): recomputing `matmul3` reads a view
/// `v7` of one output of a multi-output op and another output `h1_1`; recomputing the
/// producer for `h1_1` made `v7` (checked first) stale, and the schedule read it anyway.
/// The verifier caught it (an internal error); the walk now checks the inputs again.
#[test]
fn view_of_recomputed_base_regression() {
    let g = random_graph(4064541356663879758, &GenConfig::small());
    let p = plan(
        &g,
        &options(Strategy::Sublinear, 4064541356663879758),
        &RunConfig::default(),
    )
    .unwrap();
    assert!(verify(&g, &p).is_ok());
}
