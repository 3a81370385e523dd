//! `cargo bench --features optimal --bench optimal`: how far from optimal sgc's default plans
//! are, on the Checkmate graphs (`benches/data/checkmate`) at budgets of 0.9 down to 0.4 of
//! the unplanned peak (the memory model's, `--budget-of peak`, as Checkmate counts).
//!
//! Per (graph, budget): the `optimal` strategy's recompute, whether HiGHS proved it (relative
//! gap within `sgc_plan::optimal::GAP`, 1e-3) within its time limit, the bound it proves
//! (HiGHS's dual bound, or the cut bound at the budget where that is higher, marked "cut"),
//! and its time (the starts included: the time limit is the strategy's); the default
//! strategy (`sublinear`, 20 generations) at the same budget, its excess over the optimum,
//! and what `sgc plan --bound` proves at its peak (the cut bound, or the integer program's
//! linear relaxation where it solves within 5 s and is higher). Budgets below the
//! per-op lower bound are skipped; a budget no plan meets says so.
//!
//! `OPTIMAL_GRAPHS=vgg16_b256_train,...` restricts the graphs; `OPTIMAL_TIME_LIMIT=S` sets
//! the solver's limit (default 60 s).

use sgc_plan::{bound, plan, plan_with_stats, BudgetOf, PlanOptions, Strategy};
use std::path::PathBuf;
use std::time::Instant;

const BUDGETS: [f64; 6] = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4];

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/data/checkmate");
    let only: Option<Vec<String>> = std::env::var("OPTIMAL_GRAPHS")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let limit: u64 = std::env::var("OPTIMAL_TIME_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("benches/data/checkmate")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    println!("| graph | budget | optimal | proven | bound | optimal s | sublinear | sublinear - optimal | --bound at sublinear's peak |");
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|");
    for f in files {
        let name = f.file_stem().unwrap().to_string_lossy().to_string();
        if only.as_ref().is_some_and(|o| !o.contains(&name)) {
            continue;
        }
        let g = sgc_ir::load_any(&f).unwrap();
        let unplanned = g.memory_profile().peak;
        let lb = g.lower_bound().bytes;
        for q in BUDGETS {
            let budget = (unplanned as f64 * q) as u64;
            if budget < lb {
                println!("| {name} | {q} | below the per-op lower bound | | | | | | |");
                continue;
            }
            row(&g, &name, q, budget, limit);
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.3}%", 100.0 * x)
}

fn row(g: &sgc_ir::Graph, name: &str, q: f64, budget: u64, limit: u64) {
    let options = |strategy| PlanOptions {
        strategy,
        budget: Some(budget),
        budget_of: BudgetOf::Peak,
        genetic_iters: 20,
        time_limit_s: Some(limit),
        ..PlanOptions::default()
    };
    let start = Instant::now();
    let opt = plan_with_stats(g, &options(Strategy::Optimal), &Default::default());
    let secs = start.elapsed().as_secs_f64();
    let sub = plan(g, &options(Strategy::Sublinear), &Default::default());
    let (o_share, proven, dual) = match &opt {
        Ok((p, s)) => {
            let s = s.optimal.as_ref().unwrap();
            (
                Some(p.summary.recompute_share),
                if s.proven { "yes" } else { "time limit" },
                match s.bound.method {
                    sgc_plan::BoundMethod::Cut => format!("{} (cut)", pct(s.bound.recompute)),
                    _ => pct(s.bound.recompute),
                },
            )
        }
        Err(e) => (
            None,
            if e.to_string().contains("proved") {
                "infeasible"
            } else {
                "no plan found"
            },
            "-".into(),
        ),
    };
    let (s_share, cut) = match &sub {
        Ok(p) => (
            Some(p.summary.recompute_share),
            bound(g, p).map_or("-".into(), |b| pct(b.recompute)),
        ),
        Err(_) => (None, "-".into()),
    };
    let show = |x: Option<f64>| x.map_or("none fits".to_string(), pct);
    let excess = match (s_share, o_share) {
        (Some(s), Some(o)) => format!("{:+.4}", s - o),
        _ => "-".into(),
    };
    println!(
        "| {name} | {q} | {} | {proven} | {dual} | {secs:.1} | {} | {excess} | {cut} |",
        show(o_share),
        show(s_share)
    );
}
