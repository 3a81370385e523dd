//! `cargo bench --bench planner`: for every zoo graph (`graphs/*.json`) and every Checkmate
//! graph (`benches/data/checkmate`), each strategy's planned peak next to the unplanned
//! peak and the per-op lower bound, its recompute share of one step, and its plan time.
//! Then the targets of the planner issue, each with the figures it rests on:
//! - ResNet-50: activation part of the planned peak <= 40% of unplanned, recompute <= 35%;
//! - `sublinear` with 20 generations at or below `chen-sqrt`'s peak at no higher cost;
//! - GPT-2 with 20 generations on 2 workers, planned in under 2 s.
//!
//! Last, the planner's scaling ([`scaling`]): plan time and peak RSS of four graph shapes (a
//! GPT-2 stack, an LSTM-like chain, a deep chain of small layers and a wide, shallow fan of
//! branches) at about 1k, 10k, 30k and 100k ops, the exponents fitted to them from 10k ops
//! on, and the targets (100k ops in under 30 s and 1 GiB on 2 cores; time exponent at most
//! 1.2).
//! `PLANNER_SCALING=0` skips it; `PLANNER_SCALING_ONLY=1` runs nothing else.
//!
//! `PLANNER_GRAPHS=gpt2,resnet50` restricts the run to those graphs.
//!
//! Every plan is verified (`sgc_plan::plan` runs the verifier before returning).

use sgc_ir::Graph;
mod common;

use sgc_plan::{plan, Plan, PlanOptions, RunConfig, Strategy};
use std::path::PathBuf;
use std::time::Instant;

struct Row {
    graph: String,
    label: String,
    plan: Plan,
    secs: f64,
}

fn graphs() -> Vec<(String, Graph)> {
    let files = common::graph_files();
    // `PLANNER_GRAPHS=gpt2,resnet50` restricts the run to those graphs.
    let only: Option<Vec<String>> = std::env::var("PLANNER_GRAPHS")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    files
        .into_iter()
        .filter(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            only.as_ref().is_none_or(|o| o.contains(&stem))
        })
        .map(|p| {
            let g = sgc_ir::load_any(&p).unwrap_or_else(|e| panic!("{e}"));
            (p.file_stem().unwrap().to_string_lossy().into_owned(), g)
        })
        .collect()
}

fn run(g: &Graph, strategy: Strategy, iters: usize, workers: Option<usize>) -> (Plan, f64) {
    let o = PlanOptions {
        strategy,
        genetic_iters: iters,
        ..PlanOptions::default()
    };
    let t = Instant::now();
    let p = plan(
        g,
        &o,
        &RunConfig {
            workers,
            progress: None,
        },
    )
    .unwrap_or_else(|e| panic!("{strategy}: {e}"));
    (p, t.elapsed().as_secs_f64())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Ok(spec) = std::env::var("PLANNER_SCALING_CHILD") {
        scaling_child(&spec);
        return;
    }
    let configs: [(Strategy, usize, &str); 5] = [
        (Strategy::None, 0, "none"),
        (Strategy::ChenSqrt, 0, "chen-sqrt"),
        (Strategy::Dtr, 0, "dtr"),
        (Strategy::Sublinear, 0, "sublinear/0"),
        (Strategy::Sublinear, 20, "sublinear/20"),
    ];
    println!(
        "{:<28} {:>5} {:<13} {:>12} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "graph",
        "ops",
        "strategy",
        "peak (B)",
        "/unplan",
        "act/unp",
        "/bound",
        "recompute",
        "time (s)"
    );
    let mut rows = Vec::new();
    let only_scaling = std::env::var("PLANNER_SCALING_ONLY").as_deref() == Ok("1");
    for (name, g) in graphs().into_iter().filter(|_| !only_scaling) {
        for (s, iters, label) in configs {
            let (p, secs) = run(&g, s, iters, None);
            let m = &p.summary;
            let act = |x: u64| (x - m.persistent_bytes) as f64;
            println!(
                "{:<28} {:>5} {:<13} {:>12} {:>8.3} {:>8.3} {:>8.3} {:>9.3} {:>9.3}",
                name,
                g.num_ops(),
                label,
                m.planned_peak,
                m.planned_peak as f64 / m.unplanned_peak as f64,
                act(m.planned_peak) / act(m.unplanned_peak).max(1.0),
                m.planned_peak as f64 / m.lower_bound as f64,
                m.recompute_share,
                secs
            );
            rows.push(Row {
                graph: name.clone(),
                label: label.to_string(),
                plan: p,
                secs,
            });
        }
    }
    targets(&rows);
    if std::env::var("PLANNER_SCALING").as_deref() != Ok("0") {
        scaling();
    }
}

/// The sizes of the scaling table (ops, about).
const SCALING_OPS: [usize; 4] = [1_000, 10_000, 30_000, 100_000];

/// The smallest graph the exponents are fitted on (about 10k ops; the sizes below it are
/// shown, not fitted, when at least two sizes reach it).
const FIT_FROM: usize = 9_000;

/// The planner issue's targets at 100,000 ops on 2 workers.
const TARGET_SECS: f64 = 30.0;
const TARGET_RSS: u64 = 1 << 30;
const TARGET_EXPONENT: f64 = 1.2;

/// A scaling model: its name and its graph at about `ops` ops.
struct Model {
    name: &'static str,
    build: fn(usize) -> Graph,
}

const MODELS: [Model; 4] = [
    // About 82 ops per layer.
    Model {
        name: "gpt2_deep",
        build: |ops| sgc_ir::zoo::gpt2_deep((ops / 82).max(1), 8),
    },
    // About 80 ops per time step.
    Model {
        name: "lstm_deep",
        build: |ops| sgc_ir::zoo::lstm_deep((ops / 80).max(1), 32),
    },
    // Deep and narrow: 24 ops per small transformer-like layer.
    Model {
        name: "deep_narrow",
        build: |ops| sgc_ir::zoo::deep_narrow((ops / 24).max(1), 4),
    },
    // Wide and shallow: about 10 ops per branch.
    Model {
        name: "wide_shallow",
        build: |ops| sgc_ir::zoo::wide_shallow((ops / 10).max(1), 32),
    },
];

/// One measurement of the scaling table, made in a process of its own so that its peak
/// RSS is its own.
struct Scaled {
    ops: usize,
    secs: f64,
    /// CPU time of planning, all threads (user and system).
    cpu_secs: f64,
    search_secs: f64,
    arena_secs: f64,
    /// Peak resident set of the process (graph included), bytes.
    peak_rss: u64,
    /// Resident set once the graph is built, before planning, bytes.
    graph_rss: u64,
    candidates: usize,
    evaluated: usize,
}

/// `/proc/self/status` field `key` in bytes (Linux; 0 elsewhere).
fn proc_status_bytes(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU time of this process so far (user and system, all threads), from `/proc/self/stat`
/// in clock ticks of 1/100 s (Linux's USER_HZ); 0 elsewhere.
fn cpu_secs() -> f64 {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is field 3, utime 14.
    let rest = text.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// The child's side: plans `model` at about `ops` ops with 20 generations on 2 workers and
/// prints one line of figures.
fn scaling_child(spec: &str) {
    let (name, ops) = spec
        .split_once(':')
        .expect("PLANNER_SCALING_CHILD=model:ops");
    let model = MODELS
        .iter()
        .find(|m| m.name == name)
        .expect("a scaling model");
    let g = (model.build)(ops.parse().expect("ops"));
    let graph_rss = proc_status_bytes("VmRSS");
    let o = PlanOptions {
        genetic_iters: 20,
        ..PlanOptions::default()
    };
    let run = RunConfig {
        workers: Some(2),
        progress: None,
    };
    let (t, cpu) = (Instant::now(), cpu_secs());
    let (_, stats) = sgc_plan::plan_with_stats(&g, &o, &run).unwrap_or_else(|e| panic!("{e}"));
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu;
    let s = stats.search.expect("sublinear reports its search");
    println!(
        "scaled {} {secs} {cpu} {} {} {} {graph_rss} {} {}",
        g.num_ops(),
        stats.schedule_secs,
        stats.arena_secs,
        proc_status_bytes("VmHWM"),
        s.candidates,
        s.evaluated
    );
}

/// Runs one measurement in a child process; `None` (said on stdout) when the child fails,
/// e.g. killed for memory.
fn scaled(model: &Model, ops: usize) -> Option<Scaled> {
    let exe = std::env::current_exe().expect("the bench's own path");
    let out = std::process::Command::new(exe)
        .env("PLANNER_SCALING_CHILD", format!("{}:{ops}", model.name))
        .output()
        .expect("the bench runs itself");
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("scaled ")) else {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        println!(
            "  {} at about {ops} ops failed ({}): {}",
            model.name,
            out.status,
            tail.join(" / ")
        );
        return None;
    };
    let f: Vec<f64> = line
        .split(' ')
        .map(|x| x.parse().expect("a number"))
        .collect();
    Some(Scaled {
        ops: f[0] as usize,
        secs: f[1],
        cpu_secs: f[2],
        search_secs: f[3],
        arena_secs: f[4],
        peak_rss: f[5] as u64,
        graph_rss: f[6] as u64,
        candidates: f[7] as usize,
        evaluated: f[8] as usize,
    })
}

/// The least-squares slope of `ln y` against `ln x`: `y ~ x^slope`.
fn fitted_exponent(points: &[(f64, f64)]) -> f64 {
    let logs: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x.ln(), y.ln())).collect();
    let k = logs.len() as f64;
    let (mx, my) = (
        logs.iter().map(|p| p.0).sum::<f64>() / k,
        logs.iter().map(|p| p.1).sum::<f64>() / k,
    );
    let sxy: f64 = logs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = logs.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    sxy / sxx.max(1e-12)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// How plan time and peak memory grow with the graph: a GPT-2 stack, an LSTM-like recurrent
/// chain, a deep chain of small layers and a wide fan of branches (all built in-process) at
/// about 1k, 10k, 30k and 100k ops, planned with 20 generations on 2 workers, each size in a
/// process of its own (its peak RSS, graph included); then the exponents fitted to time and
/// to peak RSS from 10k ops on, and the targets.
/// Before that, the 10k-op GPT-2 is planned on 1 and on 2 workers: the plans must be
/// identical. `PLANNER_SCALING_OPS=1000,10000` restricts the sizes.
fn scaling() {
    let sizes: Vec<usize> = std::env::var("PLANNER_SCALING_OPS").map_or_else(
        |_| SCALING_OPS.to_vec(),
        |v| v.split(',').map(|x| x.parse().expect("ops")).collect(),
    );
    println!(
        "\nsearch scaling: sublinear, 20 generations, 2 workers; each size in its own process"
    );
    let g = (MODELS[0].build)(10_000);
    let plans: Vec<Plan> = [1, 2]
        .into_iter()
        .map(|workers| run(&g, Strategy::Sublinear, 20, Some(workers)).0)
        .collect();
    assert_eq!(plans[0], plans[1], "plans differ between 1 and 2 workers");
    println!(
        "  gpt2_deep at {} ops: 1 and 2 workers give identical plans",
        g.num_ops()
    );
    let mut md = String::from(
        "| graph | ops | plan time | of it search | of it arena | CPU time | peak RSS | of it the graph | candidates | schedules built |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut fits = String::new();
    for model in &MODELS {
        let mut rows = Vec::new();
        for &ops in &sizes {
            let Some(r) = scaled(model, ops) else {
                md.push_str(&format!(
                    "| {} | about {ops} | failed | | | | | | | |\n",
                    model.name
                ));
                continue;
            };
            println!(
                "  {:<10} {:>7} ops  {:>8.2} s (search {:.2} s, arena {:.2} s; CPU {:.2} s)  peak RSS {:>7.1} MiB (graph {:.1} MiB)  {} candidates, {} schedules built",
                model.name,
                r.ops,
                r.secs,
                r.search_secs,
                r.arena_secs,
                r.cpu_secs,
                mib(r.peak_rss),
                mib(r.graph_rss),
                r.candidates,
                r.evaluated
            );
            md.push_str(&format!(
                "| {} | {} | {:.2} s | {:.2} s | {:.2} s | {:.2} s | {:.0} MiB | {:.0} MiB | {} | {} |\n",
                model.name,
                r.ops,
                r.secs,
                r.search_secs,
                r.arena_secs,
                r.cpu_secs,
                mib(r.peak_rss),
                mib(r.graph_rss),
                r.candidates,
                r.evaluated
            ));
            rows.push(r);
        }
        // From about 10k ops on: below that, fixed costs (the graph's context, the first
        // population) weigh and flatten the fit.
        let fitted: Vec<&Scaled> = if rows.iter().filter(|r| r.ops >= FIT_FROM).count() >= 2 {
            rows.iter().filter(|r| r.ops >= FIT_FROM).collect()
        } else {
            rows.iter().collect()
        };
        if fitted.len() < 2 {
            continue;
        }
        let fit = |y: &dyn Fn(&Scaled) -> f64| {
            fitted_exponent(
                &fitted
                    .iter()
                    .map(|r| (r.ops as f64, y(r)))
                    .collect::<Vec<_>>(),
            )
        };
        let time = fit(&|r| r.secs);
        let search = fit(&|r| r.search_secs);
        let cpu = fit(&|r| r.cpu_secs);
        let rss = fit(&|r| r.peak_rss as f64);
        let line = format!(
            "{}: plan time grows as ops^{time:.2} (target <= {TARGET_EXPONENT}: {}; the search alone as ops^{search:.2}, CPU time as ops^{cpu:.2}), peak RSS as ops^{rss:.2}",
            model.name,
            verdict(time <= TARGET_EXPONENT)
        );
        println!("  {line}");
        fits.push_str(&format!("- {line}\n"));
        if let Some(big) = rows.iter().find(|r| r.ops >= 90_000) {
            let line = format!(
                "{} at {} ops: {:.1} s (target < {TARGET_SECS} s: {}), peak RSS {:.0} MiB (target < {} MiB: {})",
                model.name,
                big.ops,
                big.secs,
                verdict(big.secs < TARGET_SECS),
                mib(big.peak_rss),
                mib(TARGET_RSS),
                verdict(big.peak_rss < TARGET_RSS)
            );
            println!("  {line}");
            fits.push_str(&format!("- {line}\n"));
        }
    }
    md.push('\n');
    md.push_str(&fits);
    if let Ok(out) = std::env::var("PLANNER_MARKDOWN") {
        std::fs::write(&out, md).unwrap_or_else(|e| panic!("{out}: {e}"));
    }
}

/// The zoo or Checkmate graph with this file stem.
fn graph_named(name: &str) -> Graph {
    let path = common::graph_files()
        .into_iter()
        .find(|p| p.file_stem().is_some_and(|s| s == name))
        .unwrap_or_else(|| panic!("{name}: no such graph"));
    sgc_ir::load_any(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn find<'a>(rows: &'a [Row], graph: &str, label: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.graph == graph && r.label == label)
}

fn targets(rows: &[Row]) {
    println!("\ntargets");
    if let Some(r) = find(rows, "resnet50", "sublinear/20") {
        let m = &r.plan.summary;
        let act = (m.planned_peak - m.persistent_bytes) as f64
            / (m.unplanned_peak - m.persistent_bytes) as f64;
        let ok = act <= 0.40 && m.recompute_share <= 0.35;
        println!(
            "  resnet50 sublinear/20: activation peak {:.1}% of unplanned (<= 40%), recompute {:.1}% of a step (<= 35%): {}",
            100.0 * act,
            100.0 * m.recompute_share,
            verdict(ok)
        );
    }
    let mut all = true;
    for chen in rows.iter().filter(|r| r.label == "chen-sqrt") {
        let Some(sub) = find(rows, &chen.graph, "sublinear/20") else {
            continue;
        };
        let (c, s) = (&chen.plan.summary, &sub.plan.summary);
        // At Chen's own peak (as a budget on the memory model's peak, the figure Chen's
        // plan states), the search must recompute no more than Chen.
        let g = graph_named(&chen.graph);
        let o = PlanOptions {
            genetic_iters: 20,
            budget: Some(c.planned_peak),
            budget_of: sgc::plan::BudgetOf::Peak,
            ..PlanOptions::default()
        };
        let at = plan(&g, &o, &RunConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let b = &at.summary;
        let ok =
            s.planned_peak <= c.planned_peak && b.recompute_cost <= c.recompute_cost * (1.0 + 1e-9);
        all &= ok;
        println!(
            "  {:<28} sublinear/20 peak {:.3} (chen-sqrt {:.3}); at chen-sqrt's peak recompute {:.3} (chen-sqrt {:.3}): {}",
            chen.graph,
            s.planned_peak as f64 / s.unplanned_peak as f64,
            c.planned_peak as f64 / c.unplanned_peak as f64,
            b.recompute_share,
            c.recompute_share,
            verdict(ok)
        );
    }
    println!(
        "  sublinear/20 never peaks above chen-sqrt, and at its peak never recomputes more: {}",
        verdict(all)
    );
    if let Some(r) = rows
        .iter()
        .find(|r| r.graph == "gpt2" && r.label == "sublinear/20")
    {
        let g =
            sgc_ir::load_any(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/gpt2.json"))
                .expect("gpt2 loads");
        let (p2, secs) = run(&g, Strategy::Sublinear, 20, Some(2));
        assert_eq!(p2, r.plan, "plans differ between worker counts");
        println!(
            "  gpt2 sublinear/20 on 2 workers: {:.3} s (< 2 s; all cores: {:.3} s): {}",
            secs,
            r.secs,
            verdict(secs < 2.0)
        );
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "holds"
    } else {
        "MISSED"
    }
}
