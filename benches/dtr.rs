//! Run-time DTR, two measurements:
//!
//! 1. **Bookkeeping overhead** on the CPU backend: per graph, the engine's time outside
//!    kernels, copies and input writes (pool, eviction scoring, recomputation walks, offset
//!    patching), per kernel launch and as a share of kernel time; without a threshold (no
//!    eviction: the engine's floor) and under a threshold that makes it evict and
//!    recompute; the step's wall time beside the plain executor's unplanned step, measured
//!    in the same process after warm-up steps.
//! 2. **The sweep of MegEngine's DTR guide**: the zoo ResNet-50 at batch 200 on an 11 GB
//!    device (op times: roofline on an RTX 2080 Ti-class card, 13.4 TFLOP/s f32,
//!    616 GB/s), thresholds 2 to 10 GB, simulated (`sgc dtr-sweep`), beside the static plan
//!    at the bytes DTR touched and at the threshold, with the verdict per threshold.
//!
//! `cargo bench --bench dtr [STEPS]` (release). `DTR_MARKDOWN=FILE` also writes the tables
//! as markdown (`just dtr` puts them in docs/benchmarks.md); `DTR_SVG=FILE` writes the sweep's plot.

use sgc::exec::dtr::{simulate, DtrExecutor, DtrOptions};
use sgc::exec::CpuBackend;
use sgc::ir::Graph;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Instant;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load(rel: &str) -> Graph {
    let p = root().join(rel);
    sgc::ir::load_any(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Seconds per step of the plain executor's unplanned run.
fn unplanned_step(g: &Graph, steps: usize) -> f64 {
    let mut ex = sgc::runner::unplanned(g, CpuBackend::new()).expect("build");
    ex.bind_seeded(0).expect("bind");
    ex.run(2).expect("warm-up");
    let start = Instant::now();
    ex.run(steps).expect("run");
    start.elapsed().as_secs_f64() / steps as f64
}

/// One DTR measurement: per step (evictions, recomputes, kernel s, bookkeeping s, wall s)
/// and kernel launches per step.
struct Measured {
    evictions: f64,
    recomputes: f64,
    kernel: f64,
    bookkeeping: f64,
    wall: f64,
    launches: f64,
}

fn dtr_step(g: &Graph, o: &DtrOptions, steps: usize) -> Measured {
    let mut ex = DtrExecutor::new(g, CpuBackend::new(), o).expect("build");
    ex.bind_seeded(0).expect("bind");
    ex.run(2).expect("warm-up");
    let before = ex.report();
    ex.run(steps).expect("run");
    let after = ex.report();
    let (a, b) = (&after.counters, &before.counters);
    let n = steps as f64;
    Measured {
        evictions: (a.evictions - b.evictions) as f64 / n,
        recomputes: (a.recomputes - b.recomputes) as f64 / n,
        kernel: (a.compute + a.recompute - b.compute - b.recompute) / n,
        bookkeeping: (after.bookkeeping_seconds - before.bookkeeping_seconds) / n,
        wall: (after.wall_seconds - before.wall_seconds) / n,
        launches: (a.launches + a.recomputes - b.launches - b.recomputes) as f64 / n,
    }
}

/// The pool the traced order touches when nothing is evicted (what `sgc run --dtr` takes
/// by default).
fn default_memory(g: &Graph) -> u64 {
    simulate(g, &DtrOptions::new(u64::MAX / 4), 1)
        .expect("simulate")
        .pool
        .touched_bytes
}

/// A threshold under which DTR evicts and recomputes without thrashing: walking down from
/// the unplanned peak towards the lower bound in 64ths, the lowest at which one simulated
/// step recomputes at most a quarter of the ops.
fn pressured(g: &Graph, base: &DtrOptions) -> u64 {
    let (lb, up) = (g.lower_bound().bytes, g.memory_profile().peak);
    let mut best = up;
    for k in (1..64).rev() {
        let th = lb + (up - lb) * k / 64;
        let o = DtrOptions {
            eviction_threshold: Some(th),
            max_recomputes: Some(g.num_ops() as u64 / 4),
            ..base.clone()
        };
        match simulate(g, &o, 1) {
            Ok(_) => best = th,
            Err(_) => break,
        }
    }
    best
}

/// Bytes in decimal units (`4.26 kB`, `205.94 MB`).
fn decimal(bytes: u64) -> String {
    let b = bytes as f64;
    match [("GB", 1e9), ("MB", 1e6), ("kB", 1e3)]
        .into_iter()
        .find(|&(_, s)| b >= s)
    {
        Some((unit, s)) => format!("{:.2} {unit}", b / s),
        None => format!("{bytes} B"),
    }
}

fn overhead(steps: usize, md: &mut String) {
    let graphs = [
        ("tiny_mlp", "graphs/tiny_mlp.json"),
        ("tiny_cnn", "graphs/tiny_cnn.json"),
        ("tiny_transformer", "graphs/tiny_transformer.json"),
        (
            "resnet18 (real, batch 2)",
            "tests/fixtures/real_small/resnet18.json.gz",
        ),
        (
            "resnet50 (real, batch 2)",
            "tests/fixtures/real_small/resnet50.json.gz",
        ),
    ];
    let head = "| graph | ops | threshold | evictions / step | recomputes / step | kernel ms / step | bookkeeping per launch | bookkeeping / kernel time | step wall / unplanned |";
    let _ = writeln!(md, "{head}\n|---|---:|---|---:|---:|---:|---:|---:|---:|");
    println!("{head}");
    for (label, path) in graphs {
        let g = load(path);
        let base_wall = unplanned_step(&g, steps);
        let mut o = DtrOptions::new(0);
        o.evictee_min_size = 0;
        o.memory = 2 * default_memory(&g);
        let th = pressured(&g, &o);
        for (what, threshold) in [("none", None), ("evicting", Some(th))] {
            let m = dtr_step(
                &g,
                &DtrOptions {
                    eviction_threshold: threshold,
                    ..o.clone()
                },
                steps,
            );
            let row = format!(
                "| {label} | {} | {} | {:.1} | {:.1} | {:.3} | {:.2} us | {:.1}% | {:.2}x |",
                g.num_ops(),
                match threshold {
                    None => what.to_string(),
                    Some(t) => format!("{what} ({})", decimal(t)),
                },
                m.evictions,
                m.recomputes,
                m.kernel * 1e3,
                m.bookkeeping / m.launches.max(1.0) * 1e6,
                100.0 * m.bookkeeping / m.kernel.max(f64::MIN_POSITIVE),
                m.wall / base_wall
            );
            println!("{row}");
            let _ = writeln!(md, "{row}");
        }
    }
}

fn sweep(md: &mut String) {
    let g = sgc::ir::rescale::rescale(&load("graphs/resnet50.json"), 200).expect("rescale");
    let options = sgc::sweep::SweepOptions {
        memory: 11_000_000_000,
        thresholds: sgc::sweep::parse_thresholds("2GB..10GB").expect("range"),
        evictee_min_size: sgc::exec::dtr::DEFAULT_EVICTEE_MIN_SIZE,
        sqrt_sampling: false,
        seed: 0,
        device_profile: Some("13.4/26.9/616".parse().expect("profile")),
        static_plans: true,
        genetic_iters: 20,
        workers: None,
    };
    let start = Instant::now();
    let s = sgc::sweep::sweep(&g, &options, |_, _| {}).expect("sweep");
    let table = sgc::sweep::markdown(&s);
    println!("\n{table}");
    let _ = write!(md, "{table}");
    let verdicts = sgc::sweep::verdicts(&s);
    let fits = verdicts.len();
    let held = verdicts.iter().filter(|v| v.1.is_ok()).count();
    let line = format!(
        "\nDTR fits at {fits} of {} thresholds; at {held} of them the static plan fits the bytes DTR touched at lower or equal recompute.",
        s.rows.len()
    );
    println!("{line}");
    let _ = writeln!(md, "{line}");
    for (t, v) in &verdicts {
        if let Err(why) = v {
            let l = format!("- threshold {:.0} GB: {why}", *t as f64 / 1e9);
            println!("{l}");
            let _ = writeln!(md, "{l}");
        }
    }
    println!(
        "(sweep and static plans: {:.1} s)",
        start.elapsed().as_secs_f64()
    );
    if let Ok(path) = std::env::var("DTR_SVG") {
        std::fs::write(&path, sgc::sweep::svg(&s)).expect("write the plot");
        println!("plot written to {path}");
    }
}

fn main() {
    let steps: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Bookkeeping of run-time DTR on the CPU backend ({steps} steps after 2 warm-up steps; `cargo bench --bench dtr`):\n"
    );
    overhead(steps, &mut md);
    let _ = writeln!(
        md,
        "\nThe sweep of MegEngine's guide (`sgc dtr-sweep` on the zoo ResNet-50 rescaled to batch 200, `--memory 11GB --thresholds 2GB..10GB --device-profile 13.4/26.9/616`):\n"
    );
    sweep(&mut md);
    if let Ok(path) = std::env::var("DTR_MARKDOWN") {
        std::fs::write(&path, md).expect("write the markdown");
        println!("markdown written to {path}");
    }
}
