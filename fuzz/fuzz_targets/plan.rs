//! Bytes -> a random training step (`sgc_ir::testgen::random_train_graph`: the first 7
//! bytes set its layer count, batch, width and skip, tie and dead branch probabilities, a
//! hash of the rest seeds it), planned with every strategy under every budget of
//! `crates/sgc-exec/tests/support/plan_check.rs`: each plan verifies, its peak is the
//! replay's, it keeps its budget, it peaks at or above the least-peak lower bound (without
//! offloads), and its CPU run is bitwise the unplanned run; a budget refused is above the
//! best plan found, or below the bound it names. The proptest
//! `crates/sgc-exec/tests/plan_fuzz.rs` runs the same check in CI.
#![no_main]

#[path = "../../crates/sgc-exec/tests/support/plan_check.rs"]
mod plan_check;

use libfuzzer_sys::fuzz_target;
use sgc_ir::testgen::{random_train_graph, TrainGenConfig};

/// Generator parameters from the bytes (missing ones read as zero) and the seed (FNV-1a
/// of the bytes after them).
fn config(data: &[u8]) -> (u64, TrainGenConfig) {
    let byte = |i: usize| u64::from(data.get(i).copied().unwrap_or(0));
    let prob = |i: usize| byte(i) as f64 / 255.0;
    let max_layers = 1 + byte(0) as usize % 24;
    let cfg = TrainGenConfig {
        min_layers: 1 + byte(1) as usize % max_layers,
        max_layers,
        max_batch: 1 + byte(2) % 6,
        max_width: 1 + byte(3) % 8,
        skip_prob: prob(4),
        tie_prob: prob(5),
        dead_prob: prob(6) / 2.0,
    };
    let rest = data.get(7..).unwrap_or(&[]);
    let seed = rest.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (seed, cfg)
}

fuzz_target!(|data: &[u8]| {
    let (seed, cfg) = config(data);
    let g = random_train_graph(seed, &cfg);
    if let Err(e) = plan_check::check_step(&g) {
        panic!("seed {seed}, {cfg:?}: {e}");
    }
});
