//! Plans with offloads run on every device (`cpu::…`, `cuda::…`): storages copied to the
//! host pool after their last forward use and back before their first backward read give
//! the unplanned run's loss, gradients and parameters (bit for bit on the CPU), on the
//! traced order and on a recomputing (sublinear) schedule, and the device bytes allocated
//! are the plan's arena plus persistent bytes, the host pool apart. On the CPU, a backend
//! that poisons the device bytes an offload frees shows that runs read what the copy back
//! restored, and that without it they would not.

mod common;

use common::device::{self, assert_matches, every_device, on_device, trained, Device, SEED};
use common::{load, offloaded, real, TINY};
use sgc_exec::{Backend, CpuBackend, ExecError, Executor, HostCopy};
use sgc_exec::{HostTensor, Kernel, Operand};
use sgc_ir::{Graph, OpId};
use sgc_plan::{Plan, Strategy};
use std::cell::Cell;
use std::rc::Rc;

fn main() {
    let mut tests = every_device!(
        offloaded_runs_match_the_cpu_reference,
        offloads_allocate_the_plans_arena_and_one_host_pool,
    );
    tests.extend(on_device!(CpuBackend: runs_read_what_the_fetch_restored));
    tests.extend(on_device!(CpuBackend: a_real_export_with_offloads_runs_bitwise));
    device::run(tests)
}

/// The unplanned run's outputs and params after two steps on the CPU.
fn cpu_reference(g: &Graph) -> Vec<(String, HostTensor)> {
    let mut ex = common::unplanned(g, CpuBackend::new()).unwrap();
    trained(g, &mut ex, 2)
}

/// Offload plans of `g`: the traced order, the schedule of its sublinear plan, and the
/// traced order with each copy back queued at its reader's boundary.
fn offload_plans(g: &Graph) -> Vec<(&'static str, Plan)> {
    let traced: Vec<OpId> = g.op_ids().collect();
    let sub = common::plan(g, Strategy::Sublinear);
    let recomputing: Vec<OpId> = sub.steps.iter().map(|s| s.op).collect();
    vec![
        (
            "traced + offloads",
            offloaded(g, Strategy::None, &traced, 8),
        ),
        (
            "sublinear + offloads",
            offloaded(g, Strategy::Sublinear, &recomputing, 8),
        ),
        (
            "traced + offloads fetched right before their readers",
            common::offloaded_late(g, Strategy::None, &traced, 8),
        ),
    ]
    .into_iter()
    .chain(planner_offloads(g).map(|p| (PLANNER, p)))
    .collect()
}

/// The label of the plans whose offloads the planner chose.
const PLANNER: &str = "offloads the planner chose";

/// The plan the planner makes with a host link, at the lowest-peak recompute plan's device
/// bytes, when it offloads: the search's own offloads (a link fast enough for the tiny
/// graphs' sub-microsecond ops, with no per-copy latency). tiny_mlp's recomputes nothing
/// and gains nothing by offloading.
fn planner_offloads(g: &Graph) -> Option<Plan> {
    let link = sgc_plan::streams::HostLink::new(1e6, 1e6, 0.0).unwrap();
    let options = |budget| sgc_plan::PlanOptions {
        strategy: Strategy::Sublinear,
        budget,
        genetic_iters: 2,
        device_profile: sgc_ir::DeviceProfile::by_name("h100"),
        host_link: budget.map(|_| link),
        ..Default::default()
    };
    let run = sgc_plan::RunConfig {
        workers: Some(2),
        progress: None,
    };
    let lowest = sgc_plan::plan(g, &options(None), &run).unwrap();
    let device = lowest.arena.as_ref().unwrap().size + g.persistent_bytes();
    let p = sgc_plan::plan(g, &options(Some(device)), &run).unwrap();
    (!p.offloads.is_empty()).then_some(p)
}

fn offloaded_runs_match_the_cpu_reference<D: Device>() {
    let mut chosen = Vec::new();
    for name in TINY {
        let g = load(name);
        let want = cpu_reference(&g);
        for (what, plan) in offload_plans(&g) {
            if what == PLANNER {
                chosen.push(name);
            }
            let mut ex = Executor::from_plan(&g, &plan, D::open()).unwrap();
            let got = trained(&g, &mut ex, 2);
            assert_matches(&format!("{name} / {what}"), &want, &got, D::TOLERANCE);
        }
    }
    assert_eq!(
        chosen,
        ["tiny_cnn", "tiny_transformer"],
        "the graphs the planner offloads on"
    );
}

fn offloads_allocate_the_plans_arena_and_one_host_pool<D: Device>() {
    let mut smaller = 0;
    for name in TINY {
        let g = load(name);
        let traced: Vec<OpId> = g.op_ids().collect();
        let without = common::plan_of(&g, &traced);
        for (what, plan) in offload_plans(&g) {
            let what = format!("{name} / {what}");
            let mut ex = Executor::from_plan(&g, &plan, D::open()).unwrap();
            trained(&g, &mut ex, 1);
            let r = ex.report();
            let host = plan.host.as_ref().unwrap();
            assert_eq!(r.allocator.peak_bytes, r.planned_bytes, "{what}");
            assert_eq!(
                r.planned_bytes,
                r.arena_bytes + g.persistent_bytes(),
                "{what}"
            );
            assert_eq!(r.host_pool_bytes, host.size, "{what}");
            assert!(host.size >= host.peak && host.peak > 0, "{what}");
            assert_eq!(r.offloads, plan.offloads.len(), "{what}");
            assert_eq!(r.model_peak_bytes, plan.summary.planned_peak, "{what}");
            if plan.options.strategy == Strategy::None {
                let (with, base) = (
                    plan.arena.unwrap().size,
                    without.arena.as_ref().unwrap().size,
                );
                assert!(
                    with <= base || plan.summary.planned_peak >= without.summary.planned_peak,
                    "{what}: arena {with} > {base}"
                );
                if plan.summary.planned_peak < without.summary.planned_peak {
                    assert!(
                        with < base,
                        "{what}: the peak fell, the arena did not ({with} vs {base})"
                    );
                    smaller += 1;
                }
            }
        }
    }
    assert!(smaller > 0, "no offload plan lowered a tiny graph's peak");
}

/// A real export (ResNet-18, batch 2) with offloads on the traced order and on its
/// sublinear schedule: the loss and every gradient bit for bit as unplanned.
fn a_real_export_with_offloads_runs_bitwise<D: Device>() {
    let g = real("resnet18");
    let want = cpu_reference(&g);
    for (what, plan) in offload_plans(&g) {
        let mut ex = Executor::from_plan(&g, &plan, D::open()).unwrap();
        let got = trained(&g, &mut ex, 2);
        assert_matches(&format!("resnet18 / {what}"), &want, &got, None);
    }
}

/// The CPU backend, writing poison (all bits set: NaN as f32) over the device bytes an
/// offload frees once the copy to host is waited for; with `skip_fetch`, its copies back
/// write poison too instead of the host's bytes. `poisoned` counts the bytes poisoned.
struct Poisoning {
    cpu: CpuBackend,
    skip_fetch: bool,
    poisoned: Rc<Cell<u64>>,
}

impl Poisoning {
    fn new(skip_fetch: bool, poisoned: &Rc<Cell<u64>>) -> Self {
        Poisoning {
            cpu: CpuBackend::new(),
            skip_fetch,
            poisoned: poisoned.clone(),
        }
    }

    fn poison(&mut self, c: &HostCopy) -> Result<(), ExecError> {
        self.poisoned.set(self.poisoned.get() + c.bytes);
        self.cpu
            .write(c.buffer, c.offset, &vec![0xff; c.bytes as usize])
    }
}

impl Backend for Poisoning {
    common::cpu_passthrough!();
    fn run_kernel(&mut self, k: &Kernel, i: &[Operand], o: &[Operand]) -> Result<(), ExecError> {
        self.cpu.run_kernel(k, i, o)
    }
    /// The copy, and whether it goes to the host.
    type CopyDone = (HostCopy, bool);
    fn offload(&mut self, copy: &HostCopy) -> Result<(HostCopy, bool), ExecError> {
        self.cpu.offload(copy)?;
        Ok((*copy, true))
    }
    fn fetch(&mut self, copy: &HostCopy) -> Result<(HostCopy, bool), ExecError> {
        match self.skip_fetch {
            true => self.poison(copy)?,
            false => self.cpu.fetch(copy)?,
        }
        Ok((*copy, false))
    }
    fn wait_copy(&mut self, (copy, to_host): &(HostCopy, bool)) -> Result<(), ExecError> {
        match to_host {
            true => self.poison(copy),
            false => Ok(()),
        }
    }
}

/// Poisoned device bytes after each copy to host leave the run bitwise the unplanned one
/// (what steps read comes back from the host); with the copies back skipped, it is not.
fn runs_read_what_the_fetch_restored<D: Device>() {
    for name in TINY {
        let g = load(name);
        let want = cpu_reference(&g);
        for (what, plan) in offload_plans(&g) {
            let what = format!("{name} / {what}");
            let poisoned = Rc::new(Cell::new(0));
            let mut ex = Executor::from_plan(&g, &plan, Poisoning::new(false, &poisoned)).unwrap();
            let got = trained(&g, &mut ex, 2);
            assert_matches(&format!("{what}, poisoned"), &want, &got, None);
            let per_step = plan.summary.offload.as_ref().unwrap().bytes;
            assert_eq!(
                poisoned.get(),
                2 * per_step,
                "{what}: bytes poisoned in two steps"
            );
            let mut skipped =
                Executor::from_plan(&g, &plan, Poisoning::new(true, &poisoned)).unwrap();
            skipped.bind_seeded(SEED).unwrap();
            let differs = match skipped.run(2) {
                Err(_) => true,
                Ok(_) => {
                    let got = common::device::read_all(&g, &mut skipped);
                    want.iter().zip(&got).any(|((_, a), (_, b))| !a.bits_eq(b))
                }
            };
            assert!(
                differs,
                "{what}: a run without its copies back gave the same results"
            );
        }
    }
}
