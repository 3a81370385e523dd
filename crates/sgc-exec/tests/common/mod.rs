//! Shared by the tests: the tiny zoo graphs and the small real exports, and plans to run
//! them with beside the planner's: hand-made schedules (recompute before every use) and
//! arenas (no sharing), each a verified `sgc_plan::Plan`, the one thing the executor runs.
//! [`device`]: one test body on every device, and reading a run's results.

#![allow(dead_code)]

pub mod device;

use sgc_exec::{Backend, ExecError, Executor};
use sgc_ir::{Graph, OpId, Phase, TensorId};
use sgc_plan::Plan;

/// The unplanned executor: the plan of strategy `none` made by the planner (the executor
/// runs plans and makes none; the facade's `sgc::runner::unplanned` is the same call).
pub fn unplanned<B: Backend>(g: &Graph, backend: B) -> Result<Executor<B>, ExecError> {
    let options = sgc_plan::PlanOptions {
        strategy: sgc_plan::Strategy::None,
        ..Default::default()
    };
    let plan = sgc_plan::plan(g, &options, &Default::default()).expect("the `none` plan");
    Executor::from_plan(g, &plan, backend)
}

/// The loss and every other output of `g` after one step of `ex` from seeded values (seed 3).
pub fn seeded_step<B: Backend>(
    g: &Graph,
    ex: &mut Executor<B>,
) -> Vec<(String, sgc_exec::HostTensor)> {
    ex.bind_seeded(3).unwrap();
    ex.run(1).unwrap();
    g.outputs()
        .iter()
        .map(|&t| g.tensor(t).name.clone())
        .map(|n| (n.clone(), ex.read(&n).unwrap()))
        .collect()
}

/// The tiny zoo graphs, executed in tests (the big ones are not).
pub const TINY: [&str; 3] = ["tiny_mlp", "tiny_cnn", "tiny_transformer"];

/// The real PyTorch exports at batch 2 in `tests/fixtures/real_small` (see tests/real.rs).
pub const REAL_SMALL: [&str; 6] = [
    "resnet18",
    "resnet50",
    "densenet121",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "lstm_lm",
];

/// More small exports (batch 2: 32 tokens, 64x64 images, 32x32 for the U-Net), run by
/// `real.rs` only: `dtr.rs`'s thresholds between no eviction and thrashing do not exist
/// for them at this batch (parameters dominate the peak).
pub const REAL_SMALL_MORE: [&str; 3] = ["transformer_lm", "vit_b_16", "unet"];

/// Loads `graphs/<name>.json` of the repository.
pub fn load(name: &str) -> Graph {
    let path = format!("{}/../../graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
    sgc_ir::load_any(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Loads the real export `name` of [`REAL_SMALL`].
pub fn real(name: &str) -> Graph {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/real_small")
        .join(format!("{name}.json.gz"));
    sgc_ir::load_any(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
pub fn recompute_before_use(g: &Graph) -> Vec<OpId> {
    let mut ops = Vec::new();
    for op in g.op_ids() {
        if g.phase(op) != Some(Phase::Forward) {
            let mut again = Vec::new();
            for &t in &g.op(op).inputs {
                producers_of(g, t, &mut again);
            }
            again.sort();
            again.dedup();
            ops.extend(again);
        }
        ops.push(op);
    }
    ops
}

/// The plan of an explicit op order, arena placed by the planner's allocator (labelled
/// `dtr`, the strategy whose plans may recompute an op any number of times).
pub fn plan_of(g: &Graph, ops: &[OpId]) -> Plan {
    let options = sgc_plan::PlanOptions {
        strategy: sgc_plan::Strategy::Dtr,
        ..Default::default()
    };
    sgc_plan::plan_schedule(g, &options, ops).unwrap_or_else(|e| panic!("{e}"))
}

/// `plan` with an arena without sharing: every storage instance at its own offset (the
/// plan verifier accepts it: nothing overlaps).
pub fn bump_arena(mut plan: Plan) -> Plan {
    let arena = plan.arena.as_mut().expect("an arena");
    let mut offset = 0u64;
    for (o, l) in arena.offsets.iter_mut().zip(&plan.lifetimes) {
        *o = offset;
        offset += l.bytes.next_multiple_of(arena.align);
    }
    arena.size = offset;
    arena.in_place.clear();
    plan
}

/// Every plan the tests compare with the unplanned run: the planner's strategies, and
/// hand-made schedules and arenas.
pub fn strategies(g: &Graph) -> Vec<(&'static str, Plan)> {
    let traced: Vec<OpId> = g.op_ids().collect();
    let rec = recompute_before_use(g);
    let mut all: Vec<(&'static str, Plan)> = sgc_plan::Strategy::ALL
        .iter()
        .map(|&s| {
            let p = plan(g, s);
            assert!(p.arena.is_some(), "plans carry an arena");
            (s.as_str(), p)
        })
        .collect();
    all.extend([
        ("traced+bump", bump_arena(plan_of(g, &traced))),
        ("recompute+arena", plan_of(g, &rec)),
        ("recompute+bump", bump_arena(plan_of(g, &rec))),
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

/// The plan of schedule `ops` (labelled `strategy`) with up to `max` offloads
/// (`sgc_ir::testgen::spaced_offloads`), copies priced on the h100 host link, arena placed
/// by the planner, checked by the plan verifier.
pub fn offloaded(g: &Graph, strategy: sgc_plan::Strategy, ops: &[OpId], max: usize) -> Plan {
    let offloads = sgc_ir::testgen::spaced_offloads(g, ops, max);
    offloaded_with(g, strategy, ops, &offloads)
}

/// As [`offloaded`], each copy back queued right before its reader (`fetch_after ==
/// needed_at - 1`: the executor queues it and waits for it at the same boundary).
#[allow(dead_code)]
pub fn offloaded_late(g: &Graph, strategy: sgc_plan::Strategy, ops: &[OpId], max: usize) -> Plan {
    let mut offloads = sgc_ir::testgen::spaced_offloads(g, ops, max);
    offloads
        .iter_mut()
        .for_each(|o| o.fetch_after = o.needed_at - 1);
    offloaded_with(g, strategy, ops, &offloads)
}

/// The plan of schedule `ops` with `offloads`, verified.
fn offloaded_with(
    g: &Graph,
    strategy: sgc_plan::Strategy,
    ops: &[OpId],
    offloads: &[sgc_ir::Offload],
) -> Plan {
    let options = sgc_plan::PlanOptions {
        strategy,
        device_profile: sgc_ir::DeviceProfile::by_name("h100"),
        host_link: sgc_plan::streams::HostLink::named("h100"),
        ..Default::default()
    };
    assert!(!offloads.is_empty(), "{:?}: nothing to offload", g.name());
    let plan = sgc_plan::plan_schedule_offloaded(g, &options, ops, offloads)
        .unwrap_or_else(|e| panic!("{e}"));
    sgc_plan::check(g, &plan).unwrap_or_else(|e| panic!("{strategy} with offloads: {e}"));
    plan
}

/// The `Backend` items of a test backend wrapping a `CpuBackend` in its field `cpu` that
/// pass through unchanged: all but `run_kernel` and the copies (`CopyDone`, `offload`,
/// `fetch`, `wait_copy`), which the test backend changes.
#[allow(unused_macros)]
macro_rules! cpu_passthrough {
    () => {
        fn name(&self) -> String {
            self.cpu.name()
        }
        fn supports(&self, kernel: &sgc_exec::Kernel) -> bool {
            self.cpu.supports(kernel)
        }
        fn alloc(&mut self, bytes: u64) -> Result<sgc_exec::BufferId, sgc_exec::ExecError> {
            self.cpu.alloc(bytes)
        }
        fn write(
            &mut self,
            b: sgc_exec::BufferId,
            offset: u64,
            data: &[u8],
        ) -> Result<(), sgc_exec::ExecError> {
            self.cpu.write(b, offset, data)
        }
        fn read(
            &mut self,
            b: sgc_exec::BufferId,
            offset: u64,
            out: &mut [u8],
        ) -> Result<(), sgc_exec::ExecError> {
            self.cpu.read(b, offset, out)
        }
        fn synchronize(&mut self) -> Result<(), sgc_exec::ExecError> {
            self.cpu.synchronize()
        }
        type Mark = <sgc_exec::CpuBackend as sgc_exec::Backend>::Mark;
        fn mark(&mut self) -> Result<Self::Mark, sgc_exec::ExecError> {
            self.cpu.mark()
        }
        fn seconds_between(
            &mut self,
            a: &Self::Mark,
            b: &Self::Mark,
        ) -> Result<f64, sgc_exec::ExecError> {
            self.cpu.seconds_between(a, b)
        }
        fn memory(&self) -> sgc_exec::AllocStats {
            self.cpu.memory()
        }
        fn alloc_host_pool(&mut self, bytes: u64) -> Result<(), sgc_exec::ExecError> {
            self.cpu.alloc_host_pool(bytes)
        }
        fn host_pool_bytes(&self) -> u64 {
            self.cpu.host_pool_bytes()
        }
    };
}
#[allow(unused_imports)]
pub(crate) use cpu_passthrough;
