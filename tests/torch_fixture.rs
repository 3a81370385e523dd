//! The committed PyTorch export (`tests/fixtures/torch_tiny_resnet.json`, made by
//! `python3 python/tests/fixture.py`) goes through the format path on every `cargo test`,
//! whether or not torch is installed: it loads, validates and has what the exporter
//! promises (parameters, inputs with a batch axis, BatchNorm state, forward, backward and
//! update phases, views as aliases), and its memory figures are consistent.

use sgc::ir::{format, Graph, Phase, TensorKind};
use std::path::PathBuf;

fn fixture() -> Graph {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_tiny_resnet.json");
    format::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn count_kind(g: &Graph, kind: TensorKind) -> usize {
    g.tensors().iter().filter(|t| t.kind == kind).count()
}

#[test]
fn fixture_loads_with_params_inputs_and_state() {
    let g = fixture();
    assert!(count_kind(&g, TensorKind::Param) > 0);
    assert!(
        count_kind(&g, TensorKind::State) > 0,
        "BatchNorm running statistics"
    );
    let inputs: Vec<_> = g
        .tensors()
        .iter()
        .filter(|t| t.kind == TensorKind::Input)
        .collect();
    assert_eq!(inputs.len(), 2, "image and label");
    assert!(inputs.iter().all(|t| t.batch_dim == Some(0)));
    let loss = g.loss().expect("the exporter names the loss");
    assert!(g.tensor(loss).shape.is_empty(), "the loss is a scalar");
}

#[test]
fn fixture_parameter_count_is_recorded_and_matches() {
    let g = fixture();
    let params: u64 = g
        .tensor_ids()
        .filter(|&t| g.tensor(t).kind == TensorKind::Param)
        .map(|t| g.numel(t))
        .sum();
    let recorded = g
        .meta()
        .and_then(|m| m.get("param_count"))
        .and_then(|v| v.as_u64());
    assert_eq!(recorded, Some(params));
}

#[test]
fn fixture_has_forward_backward_and_update_in_order() {
    let g = fixture();
    let phases: Vec<Phase> = g
        .op_ids()
        .map(|o| g.phase(o).expect("every exported op has a phase"))
        .collect();
    for p in [Phase::Forward, Phase::Backward, Phase::Update] {
        assert!(phases.contains(&p), "no {p:?} op");
    }
    let rank = |p: &Phase| match p {
        Phase::Forward => 0,
        Phase::Backward => 1,
        Phase::Update => 2,
    };
    assert!(phases.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])));
    for o in g.op_ids().filter(|&o| g.phase(o) == Some(Phase::Update)) {
        let op = g.op(o);
        assert!(!op.recomputable && op.outputs.is_empty(), "{}", op.name);
        assert!(
            g.is_persistent(op.inputs[0]),
            "{} writes a parameter",
            op.name
        );
    }
}

#[test]
fn fixture_views_alias_storage_and_add_no_bytes() {
    let g = fixture();
    let views: Vec<_> = g
        .tensor_ids()
        .filter(|&t| g.tensor(t).alias_of.is_some())
        .collect();
    assert!(!views.is_empty());
    for &v in &views {
        let root = g.storage_root(v);
        assert_ne!(root, v);
        assert_eq!(g.storage_bytes(v), g.storage_bytes(root));
    }
    // Persistent bytes count each parameter and buffer storage once.
    let persistent: u64 = g
        .tensor_ids()
        .filter(|&t| g.tensor(t).kind.is_persistent() && g.tensor(t).alias_of.is_none())
        .map(|t| g.tensor(t).size)
        .sum();
    assert_eq!(g.persistent_bytes(), persistent);
}

#[test]
fn fixture_unplanned_peak_is_at_least_the_lower_bound() {
    let g = fixture();
    let profile = g.memory_profile();
    let lb = g.lower_bound();
    assert!(
        profile.peak >= lb.bytes,
        "peak {} < bound {}",
        profile.peak,
        lb.bytes
    );
    assert!(
        lb.bytes > g.persistent_bytes(),
        "some op touches activations"
    );
}

#[test]
fn fixture_round_trips_through_the_saver() {
    let g = fixture();
    let again = format::from_str(&format::to_string(&g)).expect("saved fixture reloads");
    assert_eq!(g, again);
}

/// The fixture plans with every strategy into a schedule the independent verifier accepts,
/// and the default strategy saves memory on it.
#[test]
fn fixture_plans_with_every_strategy_and_verifies() {
    use sgc::plan::{plan, verify, PlanOptions, Strategy};
    let g = fixture();
    let unplanned = g.memory_profile().peak;
    for strategy in [
        Strategy::None,
        Strategy::ChenSqrt,
        Strategy::Sublinear,
        Strategy::Dtr,
    ] {
        let options = PlanOptions {
            strategy,
            genetic_iters: 5,
            ..PlanOptions::default()
        };
        let p = plan(&g, &options, &Default::default()).unwrap();
        let replayed = verify(&g, &p).unwrap_or_else(|v| panic!("{strategy:?}: {v:?}"));
        assert_eq!(replayed.peak_bytes, p.summary.planned_peak, "{strategy:?}");
        assert!(
            p.summary.planned_peak >= g.lower_bound().bytes,
            "{strategy:?}"
        );
        if strategy == Strategy::Sublinear {
            assert!(
                p.summary.planned_peak < unplanned,
                "sublinear saves nothing"
            );
        }
    }
}
