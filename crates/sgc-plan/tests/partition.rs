//! The `partition` strategy under budgets of bytes kept for the backward
//! (`--budget-of saved`), what `torch.compile`'s `activation_memory_budget` bounds: every
//! budget from the least any partition keeps to what the unplanned step keeps is met, the
//! plan verifies and passes `check` (which replays the saved bytes against the budget), no
//! op runs more than twice, and recompute never rises as the budget grows.

use sgc_ir::{Graph, OpId};
use sgc_plan::plan::saved_bytes;
use sgc_plan::{check, plan, BudgetOf, Plan, PlanError, PlanOptions, RunConfig, Strategy};
use std::path::PathBuf;

fn load(rel: &str) -> Graph {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    sgc_ir::load_any(&p).unwrap_or_else(|e| panic!("{e}"))
}

fn options(budget: Option<u64>) -> PlanOptions {
    PlanOptions {
        strategy: Strategy::Partition,
        budget,
        budget_of: BudgetOf::Saved,
        arena: false,
        ..PlanOptions::default()
    }
}

fn steps(p: &Plan) -> Vec<(OpId, bool)> {
    p.steps.iter().map(|s| (s.op, s.recompute)).collect()
}

/// The least bytes any partition keeps, as the refusal of a zero budget states it.
fn least(g: &Graph) -> u64 {
    match plan(g, &options(Some(0)), &RunConfig::default()) {
        Err(PlanError::SavedBudgetNotMet { lowest, budget }) => {
            assert_eq!(budget, 0);
            lowest
        }
        other => panic!("a zero budget gave {:?}", other.map(|p| p.summary)),
    }
}

#[test]
fn every_saved_budget_is_met_and_recompute_never_rises() {
    for rel in [
        "graphs/real/resnet18.json.gz",
        "graphs/real/gpt2.json.gz",
        "graphs/tiny_cnn.json",
        "graphs/tiny_transformer.json",
    ] {
        let g = load(rel);
        let none = plan(
            &g,
            &PlanOptions {
                strategy: Strategy::None,
                arena: false,
                ..PlanOptions::default()
            },
            &RunConfig::default(),
        )
        .unwrap();
        let most = saved_bytes(&g, &steps(&none));
        let lo = least(&g);
        assert!(lo < most, "{rel}: least kept {lo} >= unplanned {most}");
        let mut last = f64::INFINITY;
        const POINTS: u64 = 24;
        for k in 0..=POINTS {
            let budget = lo + (most - lo) * k / POINTS;
            let p = plan(&g, &options(Some(budget)), &RunConfig::default())
                .unwrap_or_else(|e| panic!("{rel} at {budget}: {e}"));
            check(&g, &p).unwrap_or_else(|e| panic!("{rel} at {budget}: {e}"));
            let kept = saved_bytes(&g, &steps(&p));
            assert!(kept <= budget, "{rel}: keeps {kept} > budget {budget}");
            assert!(
                p.summary.max_op_runs <= 2,
                "{rel}: {}",
                p.summary.max_op_runs
            );
            let cost = p.summary.recompute_cost;
            assert!(
                cost <= last * (1.0 + 1e-12),
                "{rel}: budget {budget} recomputes {cost} > {last} at a smaller budget"
            );
            last = cost;
            if k == POINTS {
                assert_eq!(
                    p.summary.recompute_steps, 0,
                    "{rel}: at the unplanned bytes"
                );
            }
        }
        // The plan file says what the budget bounds, and reads back to the same check.
        let p = plan(&g, &options(Some(lo)), &RunConfig::default()).unwrap();
        let text = p.to_json();
        assert!(text.contains("\"budget_of\": \"saved\""), "{rel}");
        check(&g, &Plan::from_json(&text).unwrap()).unwrap();
    }
}

#[test]
fn a_saved_budget_below_the_least_names_the_least() {
    let g = load("graphs/tiny_cnn.json");
    let lo = least(&g);
    let err = plan(&g, &options(Some(lo - 1)), &RunConfig::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("the least kept is") && text.contains(&lo.to_string()),
        "{text}"
    );
    assert!(plan(&g, &options(Some(lo)), &RunConfig::default()).is_ok());
}

#[test]
fn a_saved_budget_needs_the_partition_strategy() {
    let g = load("graphs/tiny_cnn.json");
    let o = PlanOptions {
        strategy: Strategy::Sublinear,
        ..options(Some(1 << 30))
    };
    let err = plan(&g, &o, &RunConfig::default()).unwrap_err();
    assert!(matches!(err, PlanError::InvalidOption(_)), "{err}");
    assert!(err.to_string().contains("--strategy partition"), "{err}");
}

#[test]
fn partition_plans_do_not_depend_on_worker_count() {
    let g = load("graphs/real/resnet18.json.gz");
    for budget in [None, Some(200 << 20)] {
        let o = PlanOptions {
            budget_of: if budget.is_some() {
                BudgetOf::Saved
            } else {
                BudgetOf::Device
            },
            ..options(budget)
        };
        let run = |workers| {
            let run = RunConfig {
                workers,
                progress: None,
            };
            plan(&g, &o, &run).unwrap().to_json()
        };
        assert!(run(Some(1)) == run(None), "{budget:?}");
    }
}

#[test]
fn device_budgets_select_among_partitions_too() {
    // Without `--budget-of saved` the budget bounds device bytes as for every strategy.
    let g = load("graphs/real/resnet18.json.gz");
    let lowest = plan(
        &g,
        &PlanOptions {
            arena: true,
            budget_of: BudgetOf::Device,
            ..options(None)
        },
        &RunConfig::default(),
    )
    .unwrap();
    let device = lowest.arena.as_ref().unwrap().size + g.persistent_bytes();
    let o = PlanOptions {
        arena: true,
        budget_of: BudgetOf::Device,
        ..options(Some(device))
    };
    let p = plan(&g, &o, &RunConfig::default()).unwrap();
    check(&g, &p).unwrap();
    assert!(p.arena.as_ref().unwrap().size + g.persistent_bytes() <= device);
    assert!(p.summary.recompute_cost <= lowest.summary.recompute_cost * (1.0 + 1e-12));
}
