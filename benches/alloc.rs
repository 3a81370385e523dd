//! `cargo bench --bench alloc`: static memory sharing on the minimalloc / SOMAS instances
//! and on synthetic ones (one of 20,000 buffers), every algorithm against the lower bound.
//!
//! For each instance and algorithm it prints the arena, the arena over the lower bound
//! (1.000 is optimal) and the time. `combined` is `allocate` with the default effort: every
//! heuristic, then the branch and bound from the best of them. Every placement is checked
//! with `validate` before its row is printed.
//!
//! A second table places the plans of every zoo graph (`graphs/`) and Checkmate graph
//! (`../shared/data/checkmate`), `none` and `sublinear` with 20 genetic iterations, as
//! `sgc plan` does (`sgc_plan::arena::assign`, align 256, in-place pairs): the arena over
//! the aligned live peak and the allocation time (planning not counted). Every arena is
//! checked by the plan verifier. `cargo bench --bench alloc -- plans` runs only this table,
//! `-- dsa` only the first.

mod common;

use sgc::plan::alloc::{self, csv, Algorithm, AllocOptions, Buffer, Effort};
use std::path::PathBuf;
use std::time::Instant;

fn dsa_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/dsa")
}

/// SplitMix64: a tiny deterministic generator, so the instances are the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A training-step-like instance: `layers` forward layers, each saving activations until
/// its mirrored backward step, plus short-lived temporaries in both passes.
fn training_like(layers: u64, seed: u64) -> Vec<Buffer> {
    let mut rng = Rng(seed);
    let steps = 2 * layers;
    let mut out = Vec::new();
    for l in 0..layers {
        let back = steps - 1 - l;
        for _ in 0..4 {
            let size = (1 + rng.below(64)) * 4096 * (1 + rng.below(8));
            out.push(Buffer {
                lower: l,
                upper: back + 1,
                size,
            });
        }
        for step in [l, back] {
            for _ in 0..rng.below(6) {
                let len = 1 + rng.below(3);
                let size = (1 + rng.below(256)) * 1024;
                out.push(Buffer {
                    lower: step,
                    upper: (step + len).min(steps),
                    size,
                });
            }
        }
    }
    out
}

/// Uniformly random lifetimes and sizes.
fn random(n: usize, horizon: u64, seed: u64) -> Vec<Buffer> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            let lower = rng.below(horizon);
            let len = 1 + rng.below(horizon / 10);
            Buffer {
                lower,
                upper: (lower + len).min(horizon).max(lower + 1),
                size: 1 + rng.below(1 << 20),
            }
        })
        .collect()
}

struct Instance {
    name: String,
    buffers: Vec<Buffer>,
    align: u64,
}

fn instances() -> Vec<Instance> {
    let files = [
        "input.12.csv",
        "A.1048576.csv",
        "C.1048576.csv",
        "E.1048576.csv",
        "somas_resnet50.csv",
        "somas_tiny_bert.csv",
    ];
    let mut out: Vec<Instance> = files
        .iter()
        .map(|f| {
            let rows = csv::read(dsa_dir().join(f)).expect("dsa instance parses");
            Instance {
                name: f.trim_end_matches(".csv").to_string(),
                buffers: csv::buffers(&rows),
                align: 1,
            }
        })
        .collect();
    out.push(Instance {
        name: "somas_resnet50@256".into(),
        buffers: out[4].buffers.clone(),
        align: 256,
    });
    out.push(Instance {
        name: "random-2k".into(),
        buffers: random(2_000, 1_000, 7),
        align: 1,
    });
    let big = training_like(2_000, 11);
    out.push(Instance {
        name: format!("training-{}", big.len()),
        buffers: big,
        align: 256,
    });
    out.push(Instance {
        name: "random-20k".into(),
        buffers: random(20_000, 20_000, 13),
        align: 256,
    });
    out
}

fn row(inst: &Instance, label: &str, run: impl Fn() -> alloc::Placement) {
    let start = Instant::now();
    let p = run();
    let secs = start.elapsed().as_secs_f64();
    if let Err(v) = alloc::validate(&inst.buffers, &p, inst.align) {
        panic!("{} {label}: invalid placement: {}", inst.name, v[0]);
    }
    let ratio = p.arena as f64 / p.lower_bound.max(1) as f64;
    println!(
        "{:<22} {:>7} {:>14} {:<16} {:>14} {:>8.4} {:>10.1}",
        inst.name,
        inst.buffers.len(),
        p.lower_bound,
        if label == "combined" {
            format!("combined({})", p.algorithm)
        } else {
            label.to_string()
        },
        p.arena,
        ratio,
        secs * 1e3
    );
}

fn plans() {
    use sgc::plan::{PlanOptions, Strategy};
    println!(
        "\n{:<22} {:<10} {:>9} {:>14} {:>14} {:>9} {:>6} {:>9}  algorithm",
        "graph", "strategy", "lifetimes", "live peak", "arena", "arena/lp", "pairs", "ms"
    );
    for path in common::graph_files() {
        let g = sgc::ir::load_any(&path).expect("graph loads");
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        for (strategy, iters) in [(Strategy::None, 0), (Strategy::Sublinear, 20)] {
            let o = PlanOptions {
                strategy,
                genetic_iters: iters,
                arena: false,
                ..PlanOptions::default()
            };
            let mut p = sgc::plan::plan(&g, &o, &Default::default()).expect("plan");
            let ops: Vec<_> = p.steps.iter().map(|s| s.op).collect();
            let start = Instant::now();
            let a = sgc::plan::arena::assign(&g, &ops, &p.lifetimes, 256, Effort::DEFAULT)
                .expect("arena");
            let secs = start.elapsed().as_secs_f64();
            p.arena = Some(a.clone());
            if let Err(v) = sgc::plan::verify(&g, &p) {
                panic!("{name} {strategy}: {}", v[0]);
            }
            println!(
                "{:<22} {:<10} {:>9} {:>14} {:>14} {:>9.4} {:>6} {:>9.1}  {}",
                name,
                strategy.as_str(),
                p.lifetimes.len(),
                a.lower_bound,
                a.size,
                a.ratio(),
                a.in_place.len(),
                secs * 1e3,
                a.algorithm
            );
        }
    }
}

fn main() {
    let only = std::env::args()
        .skip(1)
        .find(|a| a == "plans" || a == "dsa");
    if only.as_deref() != Some("dsa") {
        plans();
    }
    if only.as_deref() == Some("plans") {
        return;
    }
    println!(
        "{:<22} {:>7} {:>14} {:<16} {:>14} {:>8} {:>10}",
        "instance", "buffers", "lower bound", "algorithm", "arena", "arena/lb", "ms"
    );
    for inst in instances() {
        let options = AllocOptions {
            align: inst.align,
            effort: Effort::DEFAULT,
            in_place: Vec::new(),
        };
        for alg in [
            Algorithm::GreedySize,
            Algorithm::BestFitSweep,
            Algorithm::Pushdown,
        ] {
            row(&inst, alg.name(), || {
                alloc::allocate_with(&inst.buffers, &options, alg).expect("valid instance")
            });
        }
        row(&inst, "combined", || {
            alloc::allocate(&inst.buffers, &options).expect("valid instance")
        });
    }
}
