//! Running the tiny zoo graphs on every device (`cpu::…`, `cuda::…`; see
//! [`common::device`]): every plan's run matches the CPU's unplanned run (bit for bit on
//! the CPU, within a tolerance on CUDA), a run repeats bit for bit, the allocator's bytes
//! equal the plan's, and the tiny MLP learns.

mod common;

use common::device::{self, assert_matches, every_device, trained, Device, SEED};
use common::{load, strategies, TINY};
use sgc_exec::{CpuBackend, ExecError, Executor};
use sgc_ir::Graph;

fn main() {
    device::run(every_device!(
        planned_runs_match_the_cpu_reference,
        runs_repeat_bitwise_and_allocate_what_the_plan_promised,
        the_unplanned_arena_packs_the_traced_order_near_the_model_peak,
        tiny_mlp_learns_alike_with_and_without_plan,
        recomputation_is_timed_separately,
        plans_run_at_their_own_offsets_with_in_place_pairs,
    ))
}

/// The unplanned run's outputs and params after two steps on the CPU: the reference.
fn cpu_reference(g: &Graph) -> Vec<(String, sgc_exec::HostTensor)> {
    trained(g, &mut common::unplanned(g, CpuBackend::new()).unwrap(), 2)
}

fn planned_runs_match_the_cpu_reference<D: Device>() {
    println!("running on {}", D::open().name());
    for name in TINY {
        let g = load(name);
        let want = cpu_reference(&g);
        assert!(want
            .iter()
            .all(|(_, t)| t.as_f32().unwrap().iter().all(|v| v.is_finite())));
        let mut base = common::unplanned(&g, D::open()).unwrap();
        let got = trained(&g, &mut base, 2);
        assert_matches(&format!("{name} / unplanned"), &want, &got, D::TOLERANCE);
        for (strategy, plan) in strategies(&g) {
            let mut ex = Executor::from_plan(&g, &plan, D::open()).unwrap();
            let got = trained(&g, &mut ex, 2);
            assert_matches(&format!("{name} / {strategy}"), &want, &got, D::TOLERANCE);
        }
    }
}

fn runs_repeat_bitwise_and_allocate_what_the_plan_promised<D: Device>() {
    for name in TINY {
        let g = load(name);
        let persistent_roots = g
            .tensor_ids()
            .filter(|&t| g.storage_root(t) == t && g.is_persistent(t))
            .count() as u64;
        let mut all = strategies(&g);
        let mut no_arena = common::plan(&g, sgc_plan::Strategy::None);
        no_arena.arena = None;
        let refused = Executor::from_plan(&g, &no_arena, D::open()).err();
        assert!(
            matches!(refused, Some(ExecError::NoArena)),
            "{name}: a plan without an arena ran: {refused:?}"
        );
        let ops: Vec<_> = no_arena.steps.iter().map(|s| s.op).collect();
        let (lifetimes, align) = (&no_arena.lifetimes, no_arena.options.align);
        let effort = sgc_plan::alloc::Effort::FAST;
        no_arena.arena = Some(sgc_plan::arena::assign(&g, &ops, lifetimes, align, effort).unwrap());
        all.push(("traced, arena placed after planning", no_arena));
        for (strategy, plan) in all {
            let what = format!("{name} / {strategy}");
            let mut first = Executor::from_plan(&g, &plan, D::open()).unwrap();
            let mut second = Executor::from_plan(&g, &plan, D::open()).unwrap();
            let (a, b) = (trained(&g, &mut first, 2), trained(&g, &mut second, 2));
            assert_matches(&format!("{what}, run twice"), &a, &b, None);
            let r = first.report();
            assert_eq!(
                r.allocator.peak_bytes,
                r.arena_bytes + g.persistent_bytes(),
                "{what}"
            );
            assert_eq!(r.allocator.allocations, 1 + persistent_roots, "{what}");
            assert!(
                r.arena_bytes + r.persistent_bytes >= r.model_peak_bytes,
                "{what}"
            );
            assert!(r.model_peak_bytes >= r.lower_bound_bytes, "{what}");
        }
    }
}

fn the_unplanned_arena_packs_the_traced_order_near_the_model_peak<D: Device>() {
    // Tiny graphs are small enough for the planner's allocator to reach the memory
    // model's peak (sizes are few and aligned); a regression in the arena shows here.
    for name in TINY {
        let g = load(name);
        let ex = common::unplanned(&g, D::open()).unwrap();
        let r = ex.report();
        assert!(
            (r.planned_bytes as f64) <= 1.25 * r.model_peak_bytes as f64,
            "{name}: arena {} + persistent {} vs model peak {}",
            r.arena_bytes,
            r.persistent_bytes,
            r.model_peak_bytes
        );
    }
}

/// The loss after each of `steps` steps from seeded values.
fn curve<D: Device>(mut ex: Executor<D>, steps: usize) -> Vec<f32> {
    ex.bind_seeded(SEED).unwrap();
    ex.run(steps).unwrap()
}

fn tiny_mlp_learns_alike_with_and_without_plan<D: Device>() {
    let g = load("tiny_mlp");
    let reference = curve(common::unplanned(&g, CpuBackend::new()).unwrap(), 40);
    let base = curve(common::unplanned(&g, D::open()).unwrap(), 40);
    assert!(base[39] < base[0] * 0.9, "loss {} -> {}", base[0], base[39]);
    let mut runs = vec![("unplanned", base)];
    for (strategy, plan) in strategies(&g) {
        runs.push((
            strategy,
            curve(Executor::from_plan(&g, &plan, D::open()).unwrap(), 40),
        ));
    }
    for (strategy, c) in runs {
        for (step, (c, r)) in c.iter().zip(&reference).enumerate() {
            let close = match D::TOLERANCE {
                None => c.to_bits() == r.to_bits(),
                Some(tol) => (c - r).abs() <= tol * r.abs().max(1.0),
            };
            assert!(
                close,
                "{strategy}, step {step}: {c} vs {r} on the CPU unplanned"
            );
        }
    }
}

fn recomputation_is_timed_separately<D: Device>() {
    let g = load("tiny_cnn");
    let (_, plan) = strategies(&g)
        .into_iter()
        .find(|s| s.0 == "recompute+arena")
        .unwrap();
    let mut ex = Executor::from_plan(&g, &plan, D::open()).unwrap();
    ex.bind_seeded(SEED).unwrap();
    ex.step().unwrap();
    let r = ex.report();
    assert!(r.recompute_steps > 0);
    assert!(r.recompute_seconds > 0.0 && r.recompute_seconds < r.seconds);
    let runs: u64 = r.op_times.iter().map(|t| t.runs).sum();
    let views = g.ops().iter().filter(|o| o.op_type == "reshape").count() as u64;
    assert!(runs <= r.schedule_len as u64 && runs + views * 8 >= r.schedule_len as u64);
}

fn plans_run_at_their_own_offsets_with_in_place_pairs<D: Device>() {
    // The runs above use every plan's arena offsets; this one makes sure those include
    // outputs written over their inputs (the plan's in-place pairs).
    let mut pairs = 0;
    for name in TINY {
        let g = load(name);
        let p = common::plan(&g, sgc_plan::Strategy::None);
        let arena = p.arena.clone().unwrap();
        let ex = Executor::from_plan(&g, &p, D::open()).unwrap();
        assert_eq!(ex.arena_bytes(), arena.size, "{name}");
        for &(o, i) in &arena.in_place {
            assert_eq!(arena.offsets[o], arena.offsets[i], "{name}");
        }
        pairs += arena.in_place.len();
    }
    assert!(pairs > 0, "no tiny graph runs an op in place");
}
