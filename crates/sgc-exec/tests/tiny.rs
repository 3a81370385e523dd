//! Running the tiny zoo graphs: planned runs equal unplanned runs bit for bit, the
//! allocator's bytes equal the plan's, and the tiny MLP learns.

mod common;

use common::{load, strategies, TINY};
use sgc_exec::{CpuBackend, Executor, HostTensor};
use sgc_ir::Graph;

const SEED: u64 = 7;

/// Every graph output (loss and gradients) and every param after `steps` steps.
fn run(g: &Graph, ex: &mut Executor<CpuBackend>, steps: usize) -> Vec<(String, HostTensor)> {
    ex.bind_seeded(SEED).unwrap();
    ex.run(steps).unwrap();
    let mut names: Vec<String> = g
        .outputs()
        .iter()
        .map(|&t| g.tensor(t).name.clone())
        .collect();
    names.extend(
        g.tensor_ids()
            .filter(|&t| g.tensor(t).kind == sgc_ir::TensorKind::Param)
            .map(|t| g.tensor(t).name.clone()),
    );
    names
        .into_iter()
        .map(|n| (n.clone(), ex.read(&n).unwrap()))
        .collect()
}

#[test]
fn planned_runs_equal_unplanned_bitwise() {
    for name in TINY {
        let g = load(name);
        let mut base = Executor::unplanned(&g, CpuBackend::new()).unwrap();
        let expected = run(&g, &mut base, 2);
        assert!(expected
            .iter()
            .all(|(_, t)| t.as_f32().unwrap().iter().all(|v| v.is_finite())));
        for (strategy, plan) in strategies(&g) {
            let mut ex = Executor::from_plan(&g, &plan, CpuBackend::new()).unwrap();
            let got = run(&g, &mut ex, 2);
            for ((n, a), (_, b)) in expected.iter().zip(&got) {
                assert!(
                    a.bits_eq(b),
                    "{name} / {strategy}: `{n}` differs from the unplanned run"
                );
            }
        }
    }
}

#[test]
fn allocator_bytes_equal_arena_plus_persistent() {
    for name in TINY {
        let g = load(name);
        let persistent_roots = g
            .tensor_ids()
            .filter(|&t| g.storage_root(t) == t && g.is_persistent(t))
            .count() as u64;
        let mut all = strategies(&g);
        let mut no_arena = common::plan(&g, sgc_plan::Strategy::None);
        no_arena.arena = None;
        all.push(("traced, arena placed by the executor", no_arena));
        for (strategy, plan) in all {
            let mut ex = Executor::from_plan(&g, &plan, CpuBackend::new()).unwrap();
            ex.bind_seeded(SEED).unwrap();
            ex.step().unwrap();
            let r = ex.report();
            assert_eq!(
                r.allocator.peak_bytes,
                r.arena_bytes + g.persistent_bytes(),
                "{name} / {strategy}"
            );
            assert_eq!(
                r.allocator.allocations,
                1 + persistent_roots,
                "{name} / {strategy}"
            );
            assert!(
                r.arena_bytes + r.persistent_bytes >= r.model_peak_bytes,
                "{name} / {strategy}"
            );
            assert!(
                r.model_peak_bytes >= r.lower_bound_bytes,
                "{name} / {strategy}"
            );
        }
    }
}

#[test]
fn the_unplanned_arena_packs_the_traced_order_near_the_model_peak() {
    // Tiny graphs are small enough for the planner's allocator to reach the memory
    // model's peak (sizes are few and aligned); a regression in the arena shows here.
    for name in TINY {
        let g = load(name);
        let ex = Executor::unplanned(&g, CpuBackend::new()).unwrap();
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

#[test]
fn tiny_mlp_loss_decreases_identically_with_and_without_plan() {
    let g = load("tiny_mlp");
    let mut base = Executor::unplanned(&g, CpuBackend::new()).unwrap();
    base.bind_seeded(SEED).unwrap();
    let curve = base.run(40).unwrap();
    assert!(
        curve[39] < curve[0] * 0.9,
        "loss {} -> {}",
        curve[0],
        curve[39]
    );
    for (strategy, plan) in strategies(&g) {
        let mut ex = Executor::from_plan(&g, &plan, CpuBackend::new()).unwrap();
        ex.bind_seeded(SEED).unwrap();
        let planned = ex.run(40).unwrap();
        let bits = |c: &[f32]| c.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&planned), bits(&curve), "{strategy}");
    }
}

#[test]
fn recomputation_is_timed_separately() {
    let g = load("tiny_cnn");
    let (_, plan) = strategies(&g)
        .into_iter()
        .find(|s| s.0 == "recompute+arena")
        .unwrap();
    let mut ex = Executor::from_plan(&g, &plan, CpuBackend::new()).unwrap();
    ex.bind_seeded(SEED).unwrap();
    ex.step().unwrap();
    let r = ex.report();
    assert!(r.recompute_steps > 0);
    assert!(r.recompute_seconds > 0.0 && r.recompute_seconds < r.seconds);
    let runs: u64 = r.op_times.iter().map(|t| t.runs).sum();
    let views = g.ops().iter().filter(|o| o.op_type == "reshape").count() as u64;
    assert!(runs <= r.schedule_len as u64 && runs + views * 8 >= r.schedule_len as u64);
}

#[test]
fn plans_run_at_their_own_offsets_with_in_place_pairs() {
    // The bitwise tests above run every plan at its arena offsets; this one makes sure
    // those include outputs written over their inputs (the plan's in-place pairs).
    let mut pairs = 0;
    for name in TINY {
        let g = load(name);
        let p = common::plan(&g, sgc_plan::Strategy::None);
        let arena = p.arena.clone().unwrap();
        let ex = Executor::from_plan(&g, &p, CpuBackend::new()).unwrap();
        assert_eq!(ex.arena_bytes(), arena.size, "{name}");
        for &(o, i) in &arena.in_place {
            assert_eq!(arena.offsets[o], arena.offsets[i], "{name}");
        }
        pairs += arena.in_place.len();
    }
    assert!(pairs > 0, "no tiny graph runs an op in place");
}
