//! `examples/train_real.rs` on the CPU: a small real export (ResNet-18 at batch 2, 64x64)
//! planned under a budget through the library and trained for a few steps; the backend
//! allocates what the plan promised and the loss falls.

#[path = "../examples/train_real.rs"]
#[allow(dead_code)]
mod train_real;

use train_real::{train, Args};

fn fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/real_small/resnet18.json.gz")
}

#[test]
fn trains_a_real_export_under_a_budget() {
    let args = Args::parse(
        [
            fixture().to_str().unwrap(),
            "--steps",
            "3",
            "--device",
            "cpu",
        ]
        .iter()
        .map(|s| s.to_string()),
    )
    .unwrap();
    assert_eq!(args.budget, None);
    let t = train(&args).unwrap();
    assert_eq!(t.losses.len(), 3);
    assert!(t.losses.iter().all(|l| l.is_finite()), "{:?}", t.losses);
    // The host-side SGD between steps trains: the same batch's loss falls.
    assert!(t.losses[2] < t.losses[0], "{:?}", t.losses);
    assert_eq!(t.allocated, t.promised);
    assert_eq!(t.step_seconds.len(), 3);
    assert!(t.step_seconds.iter().all(|&s| s > 0.0));
    // Three quarters of the unplanned bytes takes recomputation.
    assert!(t.recomputed_ops > 0);
}

#[test]
fn cuda_without_the_feature_is_an_error() {
    if cfg!(feature = "cuda") {
        return;
    }
    let args = Args::parse(
        [
            fixture().to_str().unwrap(),
            "--steps",
            "1",
            "--device",
            "cuda",
        ]
        .iter()
        .map(|s| s.to_string()),
    )
    .unwrap();
    let err = train(&args)
        .err()
        .expect("no CUDA in this build")
        .to_string();
    assert!(err.contains("CUDA"), "{err}");
}
