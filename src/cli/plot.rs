//! `sgc plot PLAN.json -o memory.svg`: the memory picture of a plan. The upper view draws
//! the resident bytes (persistent included) over the steps of the unplanned schedule (the
//! traced order) and of the plan, with the per-op lower bound and any budget as dashed
//! lines; the lower view is the plan's arena, every tensor lifetime a rectangle over step x
//! address, recomputed tensors in a second colour, offloaded ones in a third. A plan with
//! offloads gets a third view: its copies to host and back on their own lanes beside the
//! compute stream, each placed where the planner's three-stream replay
//! (`sgc::plan::offload::timeline`) runs it, its times mapped onto the step axis (a time
//! within a step is that fraction of the step).
//!
//! The graph is the file the plan names (`graph.path`, recorded by `sgc plan`) or
//! `--graph`; a graph whose fingerprint differs from the plan's is refused.

use super::{output, CliResult};
use sgc::ir::{Graph, OpId};
use sgc::plan::streams::{Direction, Span};
use sgc::plan::Plan;
use sgc::plot::{render_svg, Block, BlockKind, Chart, Lanes, Level, Series};
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
        "{}: {} steps planned ({} unplanned), {} tensor lifetimes drawn{}",
        args.output.display(),
        plan.steps.len(),
        graph.num_ops(),
        plan.lifetimes.len(),
        match plan.offloads.len() {
            0 => String::new(),
            n => format!(", {n} offloads' copies on their lanes"),
        }
    );
    Ok(())
}

fn chart(graph: &Graph, plan: &Plan) -> Result<Chart, Box<dyn std::error::Error>> {
    let unplanned = graph.memory_profile();
    let ops: Vec<_> = plan.steps.iter().map(|s| s.op).collect();
    let planned = sgc::ir::simulate_offloaded(graph, &ops, &plan.offloads)?;
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
                kind: kind(graph, plan, l),
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
        lanes: lanes(graph, plan, &ops)?,
    })
}

/// A lifetime is offloaded when it is a device instance an offload ends or starts, and
/// recomputed when a recompute step produced its root.
fn kind(graph: &Graph, plan: &Plan, l: &sgc::plan::Lifetime) -> BlockKind {
    let split = |o: &sgc::ir::Offload| {
        o.root == l.root && (l.last_step == o.free_after || l.first_step == o.fetch_after + 1)
    };
    if plan.offloads.iter().any(split) {
        BlockKind::Offloaded
    } else if plan
        .steps
        .get(l.first_step)
        .is_some_and(|s| s.recompute && graph.producer(l.root) == Some(s.op))
    {
        BlockKind::Recomputed
    } else {
        BlockKind::Kept
    }
}

/// The copy lanes of a plan with offloads, from the replay of its steps and copies.
fn lanes(
    graph: &Graph,
    plan: &Plan,
    ops: &[OpId],
) -> Result<Option<Lanes>, Box<dyn std::error::Error>> {
    if plan.offloads.is_empty() {
        return Ok(None);
    }
    let link = plan.options.host_link.as_ref().ok_or(
        "the plan has offloads but no host link in its options: plan it again (sgc plan --host-link)",
    )?;
    let device = plan.options.device_profile.as_ref();
    let timeline = sgc::plan::offload::timeline(graph, ops, &plan.offloads, device, link)?;
    let (copies, _) = sgc::plan::offload::transfers(graph, &plan.offloads, ops.len());
    let at = |span: &Span| {
        (
            step_position(&timeline.steps, span.start),
            step_position(&timeline.steps, span.end),
        )
    };
    let spans = |dir: Direction| {
        copies
            .iter()
            .zip(&timeline.copies)
            .filter(|(c, _)| c.dir == dir)
            .map(|(_, span)| at(span))
            .collect()
    };
    Ok(Some(Lanes {
        steps: ops.len(),
        to_host: spans(Direction::ToHost),
        to_device: spans(Direction::ToDevice),
        stalls: (0..ops.len())
            .filter(|&i| timeline.stall_before(i) > 0.0)
            .collect(),
        note: format!(
            "{} offloads; the copies add {:.1} µs to {:.1} µs of compute ({:.1} µs on the link)",
            plan.offloads.len(),
            timeline.exposed_us(),
            timeline.compute_us,
            copies
                .iter()
                .map(|c| link.copy_us(c.dir, c.bytes))
                .sum::<f64>()
        ),
    }))
}

/// A time of the replay on the step axis: step `i` spans `i..i + 1`, a time within it
/// that fraction of it; a time while the compute stream waits is the next step's start.
fn step_position(steps: &[Span], t: f64) -> f64 {
    let i = steps.partition_point(|s| s.end <= t);
    match steps.get(i) {
        None => steps.len() as f64,
        Some(s) if t <= s.start || s.end <= s.start => i as f64,
        Some(s) => i as f64 + (t - s.start) / (s.end - s.start),
    }
}
