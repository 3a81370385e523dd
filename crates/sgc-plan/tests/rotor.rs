//! The `rotor` strategy: on the zoo's chains, at budgets from the per-op lower bound to the
//! unplanned peak, its plan verifies, fits the budget, never recomputes more as the budget
//! grows, and (with the `optimal` feature) recomputes exactly as little as the proven
//! optimum of Checkmate's program; a graph with skip connections is refused by name.

use sgc_ir::Graph;
use sgc_plan::{plan, verify, BudgetOf, NotAChain, PlanError, PlanOptions, Strategy};

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
        ..PlanOptions::default()
    }
}

/// A budget a share `q` of the way from the per-op lower bound to the unplanned peak.
fn budget_at(g: &Graph, q: f64) -> u64 {
    let lb = g.lower_bound().bytes;
    lb + ((g.memory_profile().peak - lb) as f64 * q) as u64
}

/// The zoo's chains (tiny_cnn: convolution, norm, pooling and a classifier, no skip).
const CHAINS: &[&str] = &[
    "graphs/tiny_mlp.json",
    "graphs/mlp.json",
    "graphs/tiny_cnn.json",
];

#[test]
fn rotor_plans_verify_and_fit_and_recompute_less_with_more_memory() {
    for rel in CHAINS {
        let g = load(rel);
        let mut last: Option<f64> = None;
        for q in [0.0, 0.1, 0.3, 0.5, 0.8, 1.0] {
            let budget = budget_at(&g, q);
            let p =
                match plan(&g, &at_peak(Strategy::Rotor, budget), &Default::default()) {
                    Ok(p) => p,
                    Err(
                        PlanError::BudgetNotMet { .. } | PlanError::BudgetBelowLowerBound { .. },
                    ) if last.is_none() => continue,
                    Err(e) => panic!("{rel} at {q}: {e}"),
                };
            let checked = verify(&g, &p).unwrap_or_else(|v| panic!("{rel} at {q}: {v:?}"));
            assert!(checked.peak_bytes <= budget, "{rel} at {q}");
            assert!(p.summary.planned_peak <= budget, "{rel} at {q}");
            let r = p.summary.recompute_share;
            assert!(
                last.is_none_or(|l| r <= l + 1e-12),
                "{rel} at {q}: {r} after {last:?}"
            );
            last = Some(r);
        }
        assert_eq!(
            last,
            Some(0.0),
            "{rel}: at the unplanned peak nothing is recomputed"
        );
    }
}

/// A backward op that reads the activations of two stages apart (a gradient skip): the
/// forward is a chain of three relus, the backward is not its mirror.
const NOT_A_CHAIN: &str = r#"{"format": "sgc-graph", "version": 1,
  "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "kind": "input"},
              {"name": "a", "dtype": "f32", "shape": [4]},
              {"name": "b", "dtype": "f32", "shape": [4]},
              {"name": "c", "dtype": "f32", "shape": [4]},
              {"name": "d", "dtype": "f32", "shape": [4]},
              {"name": "g", "dtype": "f32", "shape": [4]}],
  "ops": [{"name": "ra", "op": "relu", "phase": "forward", "inputs": ["x"], "outputs": ["a"]},
          {"name": "rb", "op": "relu", "phase": "forward", "inputs": ["a"], "outputs": ["b"]},
          {"name": "rc", "op": "relu", "phase": "forward", "inputs": ["b"], "outputs": ["c"]},
          {"name": "rd", "op": "relu", "phase": "forward", "inputs": ["c"], "outputs": ["d"]},
          {"name": "skip", "op": "relu_grad", "phase": "backward", "inputs": ["d", "a"], "outputs": ["g"]}],
  "outputs": ["g"]}"#;

#[test]
fn a_backward_that_does_not_mirror_the_forward_is_not_a_chain() {
    let g = sgc_ir::format::from_str(NOT_A_CHAIN).unwrap();
    let budget = g.memory_profile().peak;
    match plan(&g, &at_peak(Strategy::Rotor, budget), &Default::default()) {
        Err(e @ PlanError::NotAChain(NotAChain::ReadsTwoStages { .. })) => {
            let why = e.to_string();
            assert!(why.contains("chains only"), "{why}");
            assert!(why.contains("`skip` reads"), "{why}");
        }
        other => panic!("{:?}", other.map(|p| p.summary.recompute_share)),
    }
}

/// The zoo's graphs with skip connections are chains of blocks: a residual block, an
/// attention block or a U-Net's whole encoder-decoder span is one stage.
#[test]
fn graphs_with_skip_connections_are_chains_of_blocks() {
    for rel in ["graphs/resnet50.json", "graphs/tiny_transformer.json"] {
        let g = load(rel);
        let mut planned = 0;
        for q in [0.5, 0.8, 1.0] {
            let budget = budget_at(&g, q);
            match plan(&g, &at_peak(Strategy::Rotor, budget), &Default::default()) {
                Ok(p) => {
                    assert!(p.summary.planned_peak <= budget, "{rel} at {q}");
                    planned += 1;
                }
                // Whole blocks are recomputed or kept: low budgets need finer stages.
                Err(PlanError::BudgetNotMet { .. } | PlanError::BudgetBelowLowerBound { .. }) => {
                    assert!(planned == 0, "{rel} at {q}")
                }
                Err(e) => panic!("{rel} at {q}: {e}"),
            }
        }
        assert!(planned > 0, "{rel}");
    }
}

#[test]
fn rotor_needs_a_budget() {
    let g = load("graphs/tiny_mlp.json");
    let o = PlanOptions {
        strategy: Strategy::Rotor,
        ..PlanOptions::default()
    };
    assert!(matches!(
        plan(&g, &o, &Default::default()),
        Err(PlanError::InvalidOption(_))
    ));
}

/// Where HiGHS proves Checkmate's optimum (within seconds at these budgets) and that
/// optimum recomputes forward ops only, Rotor's plan recomputes exactly as much, both as
/// the plan summary computes it. Checkmate's schedules also include recomputing a backward
/// op (a gradient freed and made again), which Rotor's never do: there Rotor recomputes no
/// less, or finds no plan (tiny_mlp at 0.95, where Checkmate frees and remakes
/// `fc1.grad_bias` and no forward recomputation lowers the peak).
#[cfg(feature = "optimal")]
#[test]
fn rotor_matches_the_proven_optimum_on_chains() {
    let mut equal = 0;
    for &(rel, shares) in &[
        ("graphs/tiny_mlp.json", &[1.0, 0.95][..]),
        ("graphs/mlp.json", &[1.0][..]),
        ("graphs/tiny_cnn.json", &[0.6][..]),
        (
            "benches/data/checkmate/vgg16_b256_train.json",
            &[0.9, 0.6, 0.3][..],
        ),
    ] {
        let g = load(rel);
        for &q in shares {
            let budget = budget_at(&g, q);
            let o = PlanOptions {
                time_limit_s: Some(30),
                ..at_peak(Strategy::Optimal, budget)
            };
            let (opt, stats) = sgc_plan::plan_with_stats(&g, &o, &Default::default())
                .unwrap_or_else(|e| panic!("{rel} at {q}: optimal: {e}"));
            assert!(
                stats.optimal.as_ref().is_some_and(|s| s.proven),
                "{rel} at {q}"
            );
            let forward_only = opt
                .steps
                .iter()
                .all(|s| !s.recompute || g.phase(s.op) == Some(sgc_ir::Phase::Forward));
            let o = opt.summary.recompute_share;
            let r =
                match plan(&g, &at_peak(Strategy::Rotor, budget), &Default::default()) {
                    Ok(p) => p.summary.recompute_share,
                    Err(
                        PlanError::BudgetNotMet { .. } | PlanError::BudgetBelowLowerBound { .. },
                    ) if !forward_only => continue,
                    Err(e) => panic!("{rel} at {q}: {e}"),
                };
            if forward_only {
                assert!(
                    (r - o).abs() <= 1e-6,
                    "{rel} at {q}: rotor {r}, optimal {o}"
                );
                equal += 1;
            } else {
                assert!(r >= o - 1e-6, "{rel} at {q}: rotor {r} below optimal {o}");
            }
        }
    }
    assert!(equal >= 6, "only {equal} budgets compared");
}
