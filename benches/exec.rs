//! CPU step time of the tiny zoo graphs, planned (every strategy) vs unplanned, and the
//! measured share of time spent recomputing next to the plan's predicted share.
//!
//! `cargo bench --bench exec [STEPS]` (release). Times are wall-clock over STEPS steps
//! after 5 warm-up steps; every planned figure is a ratio to the unplanned run measured
//! in the same process.

use sgc::exec::{CpuBackend, Executor};
use sgc::ir::Graph;
use sgc::plan::{Plan, PlanOptions, Strategy};
use std::time::Instant;

fn load(name: &str) -> Graph {
    let path = format!("{}/graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
    sgc::ir::load_any(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// (seconds per step, measured recompute share, bytes allocated).
fn measure(mut ex: Executor<CpuBackend>, steps: usize) -> (f64, f64, u64) {
    ex.bind_seeded(0).expect("bind");
    ex.run(5).expect("warm-up");
    let warm = ex.report();
    let start = Instant::now();
    ex.run(steps).expect("run");
    let wall = start.elapsed().as_secs_f64();
    let r = ex.report();
    let kernel = r.seconds - warm.seconds;
    let recompute = r.recompute_seconds - warm.recompute_seconds;
    (
        wall / steps as f64,
        recompute / kernel.max(f64::MIN_POSITIVE),
        r.allocator.peak_bytes,
    )
}

fn plan(g: &Graph, strategy: Strategy) -> Plan {
    let options = PlanOptions {
        strategy,
        ..Default::default()
    };
    sgc::plan::plan(g, &options, &Default::default()).expect("plan")
}

fn main() {
    let steps: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    println!("{steps} steps per run; planned time and bytes as ratios to the unplanned run");
    println!(
        "{:<17} {:<10} {:>11} {:>9} {:>8} {:>11} {:>11} {:>9}",
        "graph", "strategy", "us/step", "x unpl.", "recomp", "measured %", "predicted %", "x bytes"
    );
    for name in ["tiny_mlp", "tiny_cnn", "tiny_transformer"] {
        let g = load(name);
        let (base_t, _, base_b) = measure(
            sgc::runner::unplanned(&g, CpuBackend::new()).expect("build"),
            steps,
        );
        println!(
            "{name:<17} {:<10} {:>11.1} {:>9.3} {:>8} {:>11} {:>11} {:>9.3}",
            "unplanned",
            base_t * 1e6,
            1.0,
            0,
            "-",
            "-",
            1.0
        );
        for s in Strategy::ALL {
            let p = plan(&g, s);
            let recomputed = p.steps.iter().filter(|st| st.recompute).count();
            let ex = Executor::from_plan(&g, &p, CpuBackend::new()).expect("build");
            let (t, share, b) = measure(ex, steps);
            println!(
                "{name:<17} {:<10} {:>11.1} {:>9.3} {:>8} {:>11.1} {:>11.1} {:>9.3}",
                s.as_str(),
                t * 1e6,
                t / base_t,
                recomputed,
                100.0 * share,
                100.0 * p.summary.recompute_share,
                b as f64 / base_b as f64
            );
        }
    }
}
