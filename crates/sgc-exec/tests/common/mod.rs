//! Shared by the tests and the benchmark: the tiny zoo graphs and schedules to run them
//! with until the planner's strategies land.

#![allow(dead_code)]

use sgc_exec::{Layout, Placement, Schedule, Step};
use sgc_ir::{Graph, OpId, Phase, TensorId};

/// The tiny zoo graphs, executed in tests (the big ones are not).
pub const TINY: [&str; 3] = ["tiny_mlp", "tiny_cnn", "tiny_transformer"];

/// Loads `graphs/<name>.json` of the repository.
pub fn load(name: &str) -> Graph {
    let path = format!("{}/../../graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
    sgc_ir::load_any(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// The forward ops that (re)produce `t`: its producer and, for a view, the producers
/// along its `alias_of` chain down to the root.
fn producers_of(g: &Graph, mut t: TensorId, out: &mut Vec<OpId>) {
    loop {
        if let Some(p) = g.producer(t) {
            if g.phase(p) == Some(Phase::Forward) {
                out.push(p);
            }
        }
        match g.tensor(t).alias_of {
            Some(base) => t = base,
            None => return,
        }
    }
}

/// A schedule that recomputes, right before every backward or update op, each forward
/// op producing a tensor it reads (views with their bases): every backward read is of a
/// recomputed instance, at a new place in the arena.
pub fn recompute_before_use(g: &Graph) -> Schedule {
    let mut steps = Vec::new();
    for op in g.op_ids() {
        if g.phase(op) != Some(Phase::Forward) {
            let mut again = Vec::new();
            for &t in &g.op(op).inputs {
                producers_of(g, t, &mut again);
            }
            again.sort();
            again.dedup();
            steps.extend(again.into_iter().map(|op| Step {
                op,
                recompute: true,
            }));
        }
        steps.push(Step {
            op,
            recompute: false,
        });
    }
    Schedule { steps }
}

/// A layout without sharing: every instance at its own offset.
pub fn bump_layout(g: &Graph, s: &Schedule) -> Layout {
    let profile = sgc_ir::simulate(g, &s.ops()).expect("schedule runs");
    let mut offset = 0u64;
    let placements = profile
        .instances
        .iter()
        .map(|&instance| {
            let p = Placement { instance, offset };
            offset += instance.bytes.next_multiple_of(8);
            p
        })
        .collect();
    Layout {
        arena_bytes: offset,
        placements,
    }
}

/// Every (schedule, layout) pair the tests compare with the unplanned run.
pub fn strategies(g: &Graph) -> Vec<(&'static str, Schedule, Option<Layout>)> {
    let traced = Schedule::traced(g);
    let rec = recompute_before_use(g);
    let mut all: Vec<(&'static str, Schedule, Option<Layout>)> = sgc_plan::Strategy::ALL
        .iter()
        .map(|&s| {
            let p = plan(g, s);
            let layout = Layout::from_plan(&p).expect("the plan's arena");
            assert!(layout.is_some(), "plans carry an arena");
            (s.as_str(), Schedule::from_plan(&p), layout)
        })
        .collect();
    all.extend([
        ("traced+bump", traced.clone(), Some(bump_layout(g, &traced))),
        ("recompute+first-fit", rec.clone(), None),
        ("recompute+bump", rec.clone(), Some(bump_layout(g, &rec))),
    ]);
    all
}

/// The planner's plan of `g` with `strategy`, checked by the plan verifier.
pub fn plan(g: &Graph, strategy: sgc_plan::Strategy) -> sgc_plan::Plan {
    let options = sgc_plan::PlanOptions {
        strategy,
        ..Default::default()
    };
    let plan = sgc_plan::plan(g, &options, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    sgc_plan::verify(g, &plan).unwrap_or_else(|e| panic!("{strategy}: {e:?}"));
    plan
}
