//! Coverage without a device: every op of the zoo and of the 12 real exports of
//! `graphs/real/` runs on both backends (`sgc_exec::coverage`, the executor's own pre-run checks with each backend's
//! `supports`; what `sgc inspect FILE --device cuda` prints).

use sgc_exec::coverage::{gaps, per_type, Target};
use std::path::PathBuf;

fn graphs(dir: &str, suffix: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

fn load(p: &PathBuf) -> sgc_ir::Graph {
    sgc_ir::load_any(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every op of the graph at `p` runs on both backends.
fn runs_everywhere(p: &PathBuf) {
    let g = load(p);
    for target in [Target::Cpu, Target::Cuda] {
        let missing = gaps(&g, target);
        assert!(
            missing.is_empty(),
            "{} on {}: {:?}",
            p.display(),
            target.name(),
            per_type(&missing)
        );
    }
}

#[test]
fn every_zoo_op_runs_on_cpu_and_cuda() {
    let zoo = graphs("graphs", ".json");
    assert!(zoo.len() >= 9, "{zoo:?}");
    zoo.iter().for_each(runs_everywhere);
}

#[test]
fn every_corpus_op_runs_on_cpu_and_cuda() {
    let corpus = graphs("graphs/real", ".json.gz");
    assert_eq!(corpus.len(), 12, "{corpus:?}");
    corpus.iter().for_each(runs_everywhere);
}
