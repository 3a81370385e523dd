//! The CPU backend's GEMM runs on every core (matrixmultiply's threading, which splits the
//! output among threads and never a sum): `sgc run` gives bit-identical losses with one
//! GEMM thread and with two.

use std::path::PathBuf;
use std::process::Command;

fn losses(threads: &str, graph: &PathBuf) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .env("MATMUL_NUM_THREADS", threads)
        .args(["run", "--steps", "2", "--json"])
        .arg(graph)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report[0]["losses"].to_string()
}

#[test]
fn gemm_threads_do_not_change_results() {
    // The real ResNet-50 export at batch 2 (64x64): GEMMs large enough to be split.
    let graph = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/real_small/resnet50.json.gz");
    let one = losses("1", &graph);
    assert!(one.starts_with('[') && one.len() > 4, "{one}");
    assert_eq!(one, losses("2", &graph));
}
