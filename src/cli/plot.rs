//! `sgc plot PLAN.json -o memory.svg`: the memory picture of a plan. The upper view draws
//! the resident bytes (persistent included) over the steps of the unplanned schedule (the
//! traced order) and of the plan, with the per-op lower bound and any budget as dashed
//! lines; the lower view is the plan's arena, every tensor lifetime a rectangle over step x
//! address, recomputed tensors in a second colour.
//!
//! The graph is the file the plan names (`graph.path`, recorded by `sgc plan`) or
//! `--graph`; a graph whose fingerprint differs from the plan's is refused.

use super::{output, CliResult};
use sgc::ir::Graph;
use sgc::plan::Plan;
use sgc::plot::{render_svg, Block, Chart, Level, Series};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A plan file written by `sgc plan -o`.
    plan: PathBuf,
    /// Where to write the SVG.
    #[arg(short = 'o', long, default_value = "memory.svg")]
    output: PathBuf,
    /// The plan's graph file (default: the path recorded in the plan).
    #[arg(long)]
    graph: Option<PathBuf>,
}

pub fn run(args: Args) -> CliResult {
    let mut inputs: Vec<&std::path::Path> = vec![&args.plan];
    inputs.extend(args.graph.as_deref());
    output::refuse_input(&args.output, &inputs)?;
    let at = args.plan.display().to_string();
    let text = sgc::ir::file::read_limited(&args.plan)
        .map_err(|e| format!("{at}: cannot read the plan: {e}"))?;
    let plan = Plan::from_json(&text).map_err(|e| format!("{at}: {e}"))?;
    let graph_path = match (&args.graph, &plan.graph.path) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => {
            return Err(
                format!("{at}: the plan does not name its graph file: pass --graph FILE").into(),
            )
        }
    };
    let graph = sgc::ir::load_any(&graph_path)?;
    plan.check_graph(&graph)
        .map_err(|e| format!("{at} with {}: {e}", graph_path.display()))?;
    sgc::plan::verify(&graph, &plan).map_err(|v| {
        let first = v.first().map(|v| v.to_string()).unwrap_or_default();
        format!(
            "{at}: the plan does not verify ({} violations; first: {first})",
            v.len()
        )
    })?;
    let chart = chart(&graph, &plan)?;
    output::write(&args.output, render_svg(&chart).as_bytes())?;
    println!(
        "{}: {} steps planned ({} unplanned), {} tensor lifetimes drawn",
        args.output.display(),
        plan.steps.len(),
        graph.num_ops(),
        plan.lifetimes.len()
    );
    Ok(())
}

fn chart(graph: &Graph, plan: &Plan) -> Result<Chart, Box<dyn std::error::Error>> {
    let unplanned = graph.memory_profile();
    let ops: Vec<_> = plan.steps.iter().map(|s| s.op).collect();
    let planned = sgc::ir::simulate(graph, &ops)?;
    let with_persistent = |r: &[u64], p: u64| r.iter().map(|b| b + p).collect::<Vec<u64>>();
    let mut levels = vec![Level {
        label: "per-op lower bound".into(),
        color: "#2a9d3a",
        bytes: plan.summary.lower_bound,
    }];
    if let Some(b) = plan.options.budget {
        levels.push(Level {
            label: "budget".into(),
            color: "#d62828",
            bytes: b,
        });
    }
    let arena = plan.arena.as_ref().map(|a| {
        let blocks = plan
            .lifetimes
            .iter()
            .zip(&a.offsets)
            .map(|(l, &offset)| Block {
                start: l.first_step,
                end: l.last_step,
                offset,
                size: l.bytes,
                recomputed: recomputed(graph, plan, l),
            })
            .collect();
        (blocks, a.size, plan.steps.len())
    });
    Ok(Chart {
        title: format!(
            "{}: {} plan",
            graph.name().unwrap_or("(unnamed graph)"),
            plan.options.strategy
        ),
        series: vec![
            Series {
                label: "unplanned".into(),
                color: "#888888",
                values: with_persistent(&unplanned.resident, unplanned.persistent_bytes),
            },
            Series {
                label: format!("planned ({})", plan.options.strategy),
                color: "#1f6fc5",
                values: with_persistent(&planned.resident, planned.persistent_bytes),
            },
        ],
        levels,
        arena,
    })
}

/// A lifetime is recomputed when a recompute step produced its root.
fn recomputed(graph: &Graph, plan: &Plan, l: &sgc::plan::Lifetime) -> bool {
    plan.steps
        .get(l.first_step)
        .is_some_and(|s| s.recompute && graph.producer(l.root) == Some(s.op))
}
