//! Coverage without a device: every op of the zoo runs on both backends, and on the 12
//! real exports of `graphs/real/` the CUDA backend runs every op the CPU backend runs
//! (`sgc_exec::coverage`, the executor's own pre-run checks with each backend's
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

#[test]
fn every_zoo_op_runs_on_cpu_and_cuda() {
    let zoo = graphs("graphs", ".json");
    assert!(zoo.len() >= 9, "{zoo:?}");
    for p in &zoo {
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
}

#[test]
fn cuda_runs_every_op_of_the_corpus_that_cpu_runs() {
    let corpus = graphs("graphs/real", ".json.gz");
    assert_eq!(corpus.len(), 12, "{corpus:?}");
    for p in &corpus {
        let g = load(p);
        let names = |t| gaps(&g, t).into_iter().map(|x| x.op).collect::<Vec<_>>();
        let (cpu, cuda) = (names(Target::Cpu), names(Target::Cuda));
        let only_cuda: Vec<&String> = cuda.iter().filter(|o| !cpu.contains(o)).collect();
        assert!(
            only_cuda.is_empty(),
            "{}: {} ops run on cpu but not on cuda: {:?}",
            p.display(),
            only_cuda.len(),
            per_type(&gaps(&g, Target::Cuda))
        );
    }
}

/// Corpus graphs with ops no backend runs yet, and those ops' types (issue 37 asks for
/// none: this list may only shrink).
const NOT_YET: &[(&str, &[&str])] = &[
    (
        "inception_v3",
        &[
            "aten.convolution.default",
            "aten.convolution_backward.default",
        ],
    ),
    (
        "unet",
        &[
            "aten.convolution.default",
            "aten._log_softmax.default",
            "aten.nll_loss2d_forward.default",
            "aten.nll_loss2d_backward.default",
            "aten._log_softmax_backward_data.default",
            "aten.convolution_backward.default",
        ],
    ),
];

#[test]
fn every_corpus_op_runs_on_cpu_and_cuda_but_the_listed_gaps() {
    for p in &graphs("graphs/real", ".json.gz") {
        let g = load(p);
        let name = p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".json.gz", "");
        let allowed = NOT_YET
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(&[][..], |(_, t)| *t);
        for target in [Target::Cpu, Target::Cuda] {
            let found = per_type(&gaps(&g, target));
            let types: Vec<&str> = found.iter().map(|(t, _)| t.as_str()).collect();
            assert_eq!(types, allowed, "{name} on {}: {found:?}", target.name());
        }
    }
}
