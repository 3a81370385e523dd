//! The model zoo against its checked-in files and its published figures.

use sgc::ir::{format, zoo, Graph, Phase, TensorKind};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Every zoo model, built once for all tests of this file.
fn built() -> &'static [(&'static str, Graph)] {
    static MODELS: OnceLock<Vec<(&'static str, Graph)>> = OnceLock::new();
    MODELS.get_or_init(|| {
        zoo::models()
            .iter()
            .map(|m| (m.name, (m.build)()))
            .collect()
    })
}

fn graphs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs")
}

fn param_count(g: &Graph) -> u64 {
    g.tensor_ids()
        .filter(|&t| g.tensor(t).kind == TensorKind::Param)
        .map(|t| g.numel(t))
        .sum()
}

const STALE: &str = "graphs/ is stale: run `cargo run -- zoo --out graphs/`";

#[test]
fn checked_in_files_equal_what_the_zoo_builds() {
    for (name, g) in built() {
        let path = graphs_dir().join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; {STALE}", path.display()));
        assert!(text == format::to_string(g), "{name}.json differs; {STALE}");
    }
    let names: Vec<&str> = built().iter().map(|(n, _)| *n).collect();
    for entry in std::fs::read_dir(graphs_dir()).expect("graphs/ exists") {
        let entry = entry.expect("readable entry");
        // Subfolders hold graphs from elsewhere (graphs/real: traced by python/sgc_trace).
        if entry.file_type().expect("file type").is_dir() {
            continue;
        }
        let file = entry.file_name();
        let file = file.to_string_lossy();
        let stem = file.strip_suffix(".json").unwrap_or(&file);
        assert!(
            names.contains(&stem),
            "graphs/{file} is not a zoo model; {STALE}"
        );
    }
}

#[test]
fn parameter_counts_match_the_published_figures() {
    let published = [
        ("resnet50", 25_557_032u64),
        ("vgg16", 138_357_544),
        ("gpt2", 124_439_808),
    ];
    for (model, expected) in published {
        let (_, g) = built()
            .iter()
            .find(|(n, _)| *n == model)
            .unwrap_or_else(|| panic!("zoo has no {model}"));
        let count = param_count(g);
        let error = (count as f64 - expected as f64).abs() / expected as f64;
        assert!(
            error <= 0.01,
            "{model}: {count} params, published {expected} ({:.2}% off)",
            error * 100.0
        );
    }
}

#[test]
fn every_zoo_graph_round_trips() {
    for (name, g) in built() {
        let text = format::to_string(g);
        let loaded = format::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&loaded, g, "{name}: load(save(g)) != g");
        assert_eq!(
            format::to_string(&loaded),
            text,
            "{name}: save is not stable"
        );
    }
}

#[test]
fn tiny_graphs_peak_at_or_above_their_lower_bound() {
    for (name, g) in built().iter().filter(|(n, _)| n.starts_with("tiny_")) {
        let peak = g.memory_profile().peak;
        let bound = g.lower_bound().bytes;
        assert!(peak >= bound, "{name}: peak {peak} < lower bound {bound}");
        assert!(
            bound > g.persistent_bytes(),
            "{name}: bound has no activations"
        );
    }
}

#[test]
fn every_zoo_graph_is_a_full_training_step() {
    for (name, g) in built() {
        let meta = g.meta().unwrap_or_else(|| panic!("{name}: no meta"));
        assert_eq!(meta.get("model").and_then(|v| v.as_str()), Some(*name));
        assert_eq!(meta.get("source").and_then(|v| v.as_str()), Some("sgc zoo"));
        assert!(meta.get("batch_size").and_then(|v| v.as_u64()).is_some());
        for t in g.tensors().iter().filter(|t| t.kind == TensorKind::Input) {
            assert_eq!(
                t.batch_dim,
                Some(0),
                "{name}: input `{}` lacks batch_dim",
                t.name
            );
        }
        let params = g
            .tensors()
            .iter()
            .filter(|t| t.kind == TensorKind::Param)
            .count();
        let updates = g
            .op_ids()
            .filter(|&o| g.phase(o) == Some(Phase::Update))
            .count();
        assert_eq!(updates, params, "{name}: one sgd_update per param");
        assert_eq!(
            g.outputs().len(),
            params + 1,
            "{name}: outputs = loss + gradients"
        );
        assert!(g
            .op_ids()
            .all(|o| g.op(o).phase.is_some() && g.op(o).flops.is_some()));
    }
}
