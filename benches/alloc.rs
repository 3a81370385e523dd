//! `cargo bench --bench alloc`: static memory sharing, every figure against the lower bound
//! measured in the same run. Four tables (`-- dsa`, `-- scaling`, `-- plans`, `-- real` run
//! those named):
//!
//! - **dsa**: every instance of `benches/data/dsa` (minimalloc's challenging instances
//!   A, C, E with their capacity in the file name, the SOMAS lists, the README example),
//!   the SOMAS list at 256-byte alignment and synthetic lists; for each, the heuristics'
//!   arenas over the bound, then `allocate` with the default effort: arena, arena over the
//!   bound, whether it fits the capacity, why the search stopped, its work and the time.
//!   Set `SGC_DSA_EXTRA=DIR` to add every `*.csv` of DIR (for instance the rest of
//!   minimalloc's challenging suite, B to K, from its repository's
//!   `benchmarks/challenging/`; they are not copied here).
//! - **scaling**: what `sgc alloc` does (parse the CSV text, allocate with the default
//!   effort, validate, write the offsets) on generated training-step lists (seeded; each
//!   layer's activations live from its forward step to its mirrored backward step, plus
//!   short-lived temporaries) of about 10k, 100k and 1M buffers, each size in a process of
//!   its own: time, CPU time, peak resident memory (Linux; the CSV text included, as the
//!   command holds its file) and the exponent of the least-squares fit time ~ n^k.
//! - **plans**: the plans of every zoo graph (`graphs/`) and Checkmate graph
//!   (`benches/data/checkmate`), `none` and `sublinear` with 20 genetic iterations,
//!   placed as `sgc plan` does (`sgc_plan::arena::assign`, align 256, in-place pairs,
//!   `Effort::PLAN`): the arena over the aligned live peak and the allocation time.
//!
//! - **real**: the plans of every real traced graph (`graphs/real/`, `sublinear` with 20
//!   genetic iterations), placed as `sgc plan` does (`arena::assign`, align 256) at the
//!   plan's default effort (`--arena-effort plan`) and at the default effort of `sgc alloc`
//!   (`--arena-effort default`): the arena over the aligned live peak (and greedy by
//!   size's alone, without in-place pairs), the time, and whether it is within 1.01 of that
//!   bound (the target for real lists; a miss is marked).
//!
//! Every placement is checked by the independent validator (plans by the plan verifier)
//! before its row is printed. `ALLOC_MARKDOWN=FILE` also writes the dsa, scaling and real
//! tables there as markdown (`just alloc-table` puts them in docs/benchmarks.md).

mod common;

use sgc::plan::alloc::{self, csv, Algorithm, AllocOptions, Buffer, Effort, Placement};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn dsa_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/data/dsa")
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
/// its mirrored backward step, plus short-lived temporaries in both passes (about nine
/// buffers a layer).
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
    /// The capacity in the file name (`X.<capacity>.csv`), if any.
    capacity: Option<u64>,
}

fn read_instance(path: &Path) -> Instance {
    let rows = csv::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    let capacity = name.split('.').nth(1).and_then(|c| c.parse().ok());
    Instance {
        name,
        buffers: csv::buffers(&rows),
        align: 1,
        capacity,
    }
}

/// The `*.csv` files of `dir`, sorted.
fn csv_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    files
}

fn instances() -> Vec<Instance> {
    let mut out: Vec<Instance> = csv_files(&dsa_dir())
        .iter()
        .map(|p| read_instance(p))
        .collect();
    if let Ok(extra) = std::env::var("SGC_DSA_EXTRA") {
        for path in csv_files(Path::new(&extra)) {
            let inst = read_instance(&path);
            if !out.iter().any(|i| i.name == inst.name) {
                out.push(inst);
            }
        }
    }
    let somas = out.iter().find(|i| i.name == "somas_resnet50");
    let somas = somas
        .map(|i| i.buffers.clone())
        .expect("somas_resnet50.csv");
    let synthetic = |name: String, buffers, align| Instance {
        name,
        buffers,
        align,
        capacity: None,
    };
    out.push(synthetic("somas_resnet50@256".into(), somas, 256));
    out.push(synthetic("random-2k".into(), random(2_000, 1_000, 7), 1));
    let big = training_like(2_000, 11);
    out.push(synthetic(format!("training-{}", big.len()), big, 256));
    out.push(synthetic(
        "random-20k".into(),
        random(20_000, 20_000, 13),
        256,
    ));
    out
}

/// Checks a placement with the independent validator.
fn checked(name: &str, buffers: &[Buffer], align: u64, p: Placement) -> Placement {
    if let Err(v) = alloc::validate(buffers, &p, align) {
        panic!("{name}: invalid placement: {}", v[0]);
    }
    p
}

/// Arena over the lower bound of one heuristic alone, or `skipped`.
fn heuristic_ratio(inst: &Instance, options: &AllocOptions, alg: Algorithm) -> String {
    match alloc::allocate_with(&inst.buffers, options, alg) {
        Ok(p) => {
            let p = checked(&inst.name, &inst.buffers, inst.align, p);
            format!("{:.4}", ratio(p.arena, p.lower_bound))
        }
        Err(_) => "skipped".into(),
    }
}

fn ratio(arena: u64, bound: u64) -> f64 {
    arena as f64 / bound.max(1) as f64
}

fn dsa(md: &mut String) {
    let header = "| instance | buffers | lower bound | capacity | greedy-size | greedy-reorder \
                  | best-fit-sweep | pushdown | arena | arena / lower bound | fits | search \
                  | work (M) | time (s) |";
    let mut table =
        format!("{header}\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|\n");
    println!("{header}");
    for inst in instances() {
        let options = AllocOptions {
            align: inst.align,
            effort: Effort::DEFAULT,
            in_place: Vec::new(),
        };
        let heuristics = [
            Algorithm::GreedySize,
            Algorithm::GreedyReorder,
            Algorithm::BestFitSweep,
            Algorithm::Pushdown,
        ]
        .map(|alg| heuristic_ratio(&inst, &options, alg));
        let start = Instant::now();
        let p = alloc::allocate(&inst.buffers, &options).expect("valid instance");
        let secs = start.elapsed().as_secs_f64();
        let p = checked(&inst.name, &inst.buffers, inst.align, p);
        let fits = match inst.capacity {
            Some(c) if p.arena <= c => "yes",
            Some(_) => "**no**",
            None => "-",
        };
        let row = format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.4} | {} | {:?} | {:.0} | {:.3} |",
            inst.name,
            inst.buffers.len(),
            p.lower_bound,
            inst.capacity.map_or("-".into(), |c| c.to_string()),
            heuristics[0],
            heuristics[1],
            heuristics[2],
            heuristics[3],
            p.arena,
            ratio(p.arena, p.lower_bound),
            fits,
            p.search.stop,
            p.search.work as f64 / 1e6,
            secs
        );
        println!("{row}");
        table += &row;
        table.push('\n');
    }
    *md += &table;
}

/// The peak resident set (MiB) of this process, where the system tells it.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU time (user plus system, all threads) of this process so far, in seconds (Linux,
/// at the usual 100 ticks a second).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// What `sgc alloc FILE -o OUT` does after reading the file, on the CSV text.
fn alloc_pipeline(text: &str) -> (usize, Placement, String) {
    let rows = csv::parse(text).expect("generated CSV parses");
    let buffers = csv::buffers(&rows);
    let p = alloc::allocate(&buffers, &AllocOptions::default()).expect("valid instance");
    let p = checked("scaling", &buffers, 1, p);
    let out = csv::write(&rows, &p.offsets);
    (buffers.len(), p, out)
}

/// One size of the scaling table, in a process of its own (so its peak memory is its
/// own): prints one markdown row, then the buffers, seconds and CPU seconds.
fn scaling_one(layers: u64) {
    let buffers = training_like(layers, 5);
    let mut text = String::from("id,lower,upper,size\n");
    for (k, b) in buffers.iter().enumerate() {
        let _ = writeln!(text, "b{k},{},{},{}", b.lower, b.upper, b.size);
    }
    drop(buffers);
    let (start, cpu_start) = (Instant::now(), cpu_seconds());
    let (n, p, out) = alloc_pipeline(&text);
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds()
        .zip(cpu_start)
        .map_or(f64::NAN, |(b, a)| b - a);
    assert!(out.len() > text.len());
    let rss = peak_rss_mib().map_or("-".into(), |m| format!("{m:.0}"));
    let skipped: Vec<&str> = p.skipped.iter().map(|s| s.algorithm.as_str()).collect();
    let skipped = match skipped.is_empty() {
        true => "-".to_string(),
        false => skipped.join(", "),
    };
    println!(
        "| {n} | {} | {:.4} | {skipped} | {:?} | {secs:.2} | {cpu:.2} | {rss} |",
        p.lower_bound,
        ratio(p.arena, p.lower_bound),
        p.search.stop,
    );
    println!("{n} {secs} {cpu}");
}

fn scaling(md: &mut String) {
    let header = "| buffers | lower bound | arena / lower bound | heuristics skipped | search \
                  | time (s) | CPU (s) | peak RSS (MiB) |";
    let mut table = format!("{header}\n|---:|---:|---:|---|---|---:|---:|---:|\n");
    println!("\n{header}");
    let (mut wall, mut cpu, mut greedy_ran) = (Vec::new(), Vec::new(), Vec::new());
    let exe = std::env::current_exe().expect("the bench binary");
    for layers in [1_111u64, 11_111, 111_111] {
        let run = std::process::Command::new(&exe)
            .args(["scaling-one", &layers.to_string()])
            .output()
            .expect("runs itself");
        let text = String::from_utf8_lossy(&run.stdout);
        let mut lines = text.lines();
        let (Some(row), Some(nums)) = (lines.next(), lines.next()) else {
            panic!(
                "scaling-one {layers} failed: {}",
                String::from_utf8_lossy(&run.stderr)
            );
        };
        println!("{row}");
        greedy_ran.push(!row.contains("greedy-size"));
        table += row;
        table.push('\n');
        let v: Vec<f64> = nums.split(' ').map(|x| x.parse().unwrap()).collect();
        wall.push((v[0].ln(), v[1].ln()));
        cpu.push((v[0].ln(), v[2].max(0.01).ln()));
    }
    let local = |p: &[(f64, f64)]| (p[2].1 - p[1].1) / (p[2].0 - p[1].0);
    let mut fit = format!(
        "\nFitted exponent (least squares over the three sizes): time ~ n^{:.2}, CPU time ~ \
         n^{:.2}; between the two largest sizes n^{:.2} and n^{:.2}.",
        slope(&wall),
        slope(&cpu),
        local(&wall),
        local(&cpu)
    );
    if greedy_ran == [true, false, false] {
        fit += " Greedy by size (its O(n^2) scan) runs at the smallest size only, which keeps \
                the fit below the exponent between the larger sizes.";
    }
    fit += "\n";
    println!("{fit}");
    *md += &table;
    *md += &fit;
}

/// Least-squares slope of `y` on `x`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), &(x, y)| (a + x / n, b + y / n));
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), &(x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    num / den
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
            let a =
                sgc::plan::arena::assign(&g, &ops, &p.lifetimes, 256, Effort::PLAN).expect("arena");
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
    let args: Vec<String> = std::env::args().collect();
    if let Some(k) = args.iter().position(|a| a == "scaling-one") {
        let layers = args.get(k + 1).and_then(|l| l.parse().ok());
        scaling_one(layers.expect("scaling-one LAYERS"));
        return;
    }
    let tables = ["dsa", "scaling", "plans", "real"];
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| tables.contains(&a.as_str()))
        .collect();
    let run = |table: &str| asked.is_empty() || asked.iter().any(|a| a == table);
    let mut md = String::new();
    if run("dsa") {
        dsa(&mut md);
    }
    if run("scaling") {
        md += "\n";
        scaling(&mut md);
    }
    if run("plans") {
        plans();
    }
    if run("real") {
        md += "\n";
        real(&mut md);
    }
    if let Ok(out) = std::env::var("ALLOC_MARKDOWN") {
        std::fs::write(&out, md).unwrap_or_else(|e| panic!("{out}: {e}"));
    }
}

/// The real corpus's plans placed at the plan's effort and at `sgc alloc`'s (see the
/// module doc).
fn real(md: &mut String) {
    use sgc::plan::{PlanOptions, Strategy};
    let header = "| real plan (sublinear/20) | lifetimes | aligned live peak | greedy-size alone \
                  | arena / bound, `--arena-effort plan` | time (s) | arena / bound, \
                  `--arena-effort default` | search | time (s) | within 1.01 |";
    let mut table = format!("{header}\n|---|---:|---:|---:|---:|---:|---:|---|---:|---|\n");
    println!("\n{header}");
    let mut misses = 0;
    let files = common::real_graph_files();
    for path in &files {
        let g = sgc::ir::load_any(path).expect("graph loads");
        let name = common::real_name(path);
        let o = PlanOptions {
            strategy: Strategy::Sublinear,
            genetic_iters: 20,
            arena: false,
            ..PlanOptions::default()
        };
        let mut p = sgc::plan::plan(&g, &o, &Default::default()).expect("plan");
        let ops: Vec<_> = p.steps.iter().map(|s| s.op).collect();
        let mut placed = Vec::new();
        for effort in [Effort::PLAN, Effort::DEFAULT] {
            let start = Instant::now();
            let a = sgc::plan::arena::assign(&g, &ops, &p.lifetimes, 256, effort).expect("arena");
            let secs = start.elapsed().as_secs_f64();
            p.arena = Some(a.clone());
            if let Err(v) = sgc::plan::verify(&g, &p) {
                panic!("{name}: {}", v[0]);
            }
            placed.push((a, secs));
        }
        // Greedy by size (best fit) alone, the heuristic the others are measured against.
        let options = AllocOptions {
            align: 256,
            effort: Effort::PLAN,
            in_place: Vec::new(),
        };
        let bufs = sgc::plan::arena::buffers(&p.lifetimes);
        let greedy = alloc::allocate_with(&bufs, &options, Algorithm::GreedySize)
            .map(|g| checked(&name, &bufs, 256, g))
            .map_or("skipped".to_string(), |g| {
                format!("{:.4}", ratio(g.arena, g.lower_bound))
            });
        let (plan_a, plan_s) = &placed[0];
        let (def_a, def_s) = &placed[1];
        let within = def_a.ratio() <= 1.01;
        misses += usize::from(!within);
        let row = format!(
            "| {name} | {} | {} | {greedy} | {:.4} | {:.3} | {:.4} | {} | {:.3} | {} |",
            p.lifetimes.len(),
            def_a.lower_bound,
            plan_a.ratio(),
            plan_s,
            def_a.ratio(),
            def_a.algorithm,
            def_s,
            if within { "yes" } else { "**no**" }
        );
        println!("{row}");
        table += &row;
        table.push('\n');
    }
    let summary = format!(
        "\n{} of {} real plans' arenas within 1.01 of their aligned live peak at \
         `--arena-effort default` (what `sgc alloc` spends).\n",
        files.len() - misses,
        files.len()
    );
    println!("{summary}");
    *md += &table;
    *md += &summary;
}
