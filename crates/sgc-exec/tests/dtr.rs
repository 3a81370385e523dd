//! Run-time DTR on every device (`cpu::…`, `cuda::…`; see [`common::device`]): results
//! bitwise equal to the unplanned run on the same device at three eviction thresholds on
//! the runnable zoo graphs (and, on the CPU, the real exports); in tight pools that evict
//! and compact (device-to-device copies on CUDA, overlapping ones through the workspace);
//! every trace replayed by an independent checker (no overlapping live blocks, no pinned
//! or unevictable storage evicted, every operand resident when its op runs); a run and its
//! simulation decide alike; an allocation that cannot be served is an error naming the op
//! and the request. Bitwise holds on CUDA too: a recomputation re-runs the same kernel on
//! the same bytes, every pool offset 256-byte aligned like the unplanned arena's.

mod common;
mod dtr_audit;

use common::device::{
    self, assert_matches, every_device, on_device, read_all, trained, Device, SEED,
};
use common::{load, real, REAL_SMALL, TINY};
use sgc_exec::dtr::{simulate, DtrOptions, Simulator};
use sgc_exec::{CpuBackend, DtrExecutor, DtrReport, ExecError, HostTensor};
use sgc_ir::Graph;

fn main() {
    let mut tests = every_device!(
        dtr_runs_of_the_runnable_zoo_graphs_equal_the_unplanned_run_bitwise,
        tight_pools_without_threshold_evict_and_compact_and_stay_exact,
        sqrt_sampling_is_deterministic_and_exact,
        a_run_and_its_simulation_evict_alike,
        an_allocation_that_cannot_be_served_names_the_op_and_the_request,
        persistent_storage_that_cannot_fit_is_refused_before_the_first_step,
    );
    tests.extend(
        on_device!(CpuBackend: dtr_runs_of_the_real_exports_equal_the_unplanned_run_bitwise),
    );
    tests.extend(device::plain(&[
        (
            "the_lstm_at_batch_2_goes_from_no_eviction_to_thrashing",
            the_lstm_at_batch_2_goes_from_no_eviction_to_thrashing,
        ),
        (
            "simulation_traces_pass_the_checker_on_the_big_zoo_graphs",
            simulation_traces_pass_the_checker_on_the_big_zoo_graphs,
        ),
        (
            "eviction_never_picks_a_pinned_tensor",
            eviction_never_picks_a_pinned_tensor,
        ),
    ]));
    device::run(tests)
}

/// The unplanned run's outputs and params after `steps` steps on `D`.
fn unplanned<D: Device>(g: &Graph, steps: usize) -> Vec<(String, HostTensor)> {
    trained(g, &mut common::unplanned(g, D::open()).unwrap(), steps)
}

/// A DTR run of `steps` steps on `D`: its values and report; its trace passes the checker.
fn dtr<D: Device>(
    g: &Graph,
    options: &DtrOptions,
    steps: usize,
) -> (Vec<(String, HostTensor)>, DtrReport) {
    let mut ex = DtrExecutor::new(g, D::open(), options).unwrap();
    ex.bind_seeded(SEED).unwrap();
    ex.run(steps).unwrap_or_else(|e| panic!("{e}"));
    let bad = dtr_audit::violations(g, options.memory, ex.trace().unwrap());
    assert!(bad.is_empty(), "{:?}", &bad[..bad.len().min(10)]);
    assert!(ex.leftovers().is_empty(), "{:?}", ex.leftovers());
    (read_all(g, &mut ex), ex.report())
}

/// Three thresholds between the per-op lower bound and the unplanned peak: the peak, the
/// midpoint, and an eighth of the way up from the bound.
fn thresholds(g: &Graph) -> [u64; 3] {
    let (lb, up) = (g.lower_bound().bytes, g.memory_profile().peak);
    [up, lb + (up - lb) / 2, lb + (up - lb) / 8]
}

/// Options with a roomy pool (twice the unplanned peak, so alignment and scattering never
/// run out of room), every storage evictable, events traced.
fn options(g: &Graph, threshold: Option<u64>) -> DtrOptions {
    let mut o = DtrOptions::new(2 * g.memory_profile().peak + (1 << 20));
    o.eviction_threshold = threshold;
    o.evictee_min_size = 0;
    o.trace = true;
    o
}

/// The zoo graphs small enough to run on the CPU in a test: the tiny ones and the MLP
/// (15 MB, 0.6 GFLOP a step); the others are simulated below.
const RUNNABLE_ZOO: [&str; 4] = ["tiny_mlp", "tiny_cnn", "tiny_transformer", "mlp"];

fn dtr_runs_of_the_runnable_zoo_graphs_equal_the_unplanned_run_bitwise<D: Device>() {
    for name in RUNNABLE_ZOO {
        let g = load(name);
        let want = unplanned::<D>(&g, 2);
        let mut ths = thresholds(&g);
        if name == "mlp" {
            // Its live bytes never pass lb + (peak - lb) / 8 before an op (the peak is
            // parameters and gradients): the persistent bytes make it evict.
            ths[2] = g.persistent_bytes();
        }
        for (k, th) in ths.into_iter().enumerate() {
            let (got, r) = dtr::<D>(&g, &options(&g, Some(th)), 2);
            assert_matches(&format!("{name} at threshold {th}"), &want, &got, None);
            if k == 2 {
                assert!(
                    r.counters.evictions > 0 && r.counters.recomputes > 0,
                    "{name}: the lowest threshold evicts and recomputes: {:?}",
                    r.counters
                );
            }
        }
    }
}

/// Three thresholds for a real export at batch 2, where parameters and gradients (never
/// evictable) are most of the unplanned peak and thresholds near the lower bound make
/// run-time DTR evict everything before every op (MegEngine's rule) and thrash: the
/// unplanned peak, and the two lowest of the thresholds `lb + (peak - lb) * k / 64`,
/// walking down from `k = 63`, at which the simulation recomputes at most one step's
/// worth of ops.
fn real_thresholds(g: &Graph) -> [u64; 3] {
    let (lb, up) = (g.lower_bound().bytes, g.memory_profile().peak);
    let mut o = options(g, None);
    o.trace = false;
    o.max_recomputes = Some(g.num_ops() as u64);
    let mut ok = Vec::new();
    for k in (1..64).rev() {
        let th = lb + (up - lb) * k / 64;
        o.eviction_threshold = Some(th);
        if simulate(g, &o, 1).is_err() {
            break;
        }
        ok.push(th);
    }
    assert!(
        ok.len() >= 2,
        "fewer than two thresholds run without thrashing"
    );
    [up, ok[ok.len() - 2], ok[ok.len() - 1]]
}

fn dtr_runs_of_the_real_exports_equal_the_unplanned_run_bitwise<D: Device>() {
    for name in REAL_SMALL {
        let g = real(name);
        let want = unplanned::<D>(&g, 1);
        for (k, th) in real_thresholds(&g).into_iter().enumerate() {
            let (got, r) = dtr::<D>(&g, &options(&g, Some(th)), 1);
            assert_matches(&format!("{name} at threshold {th}"), &want, &got, None);
            if k == 2 && name != "lstm_lm" {
                assert!(r.counters.recomputes > 0, "{name}: {:?}", r.counters);
            }
        }
    }
}

/// The LSTM at batch 2 has a cliff: its activations are 12 KB, its per-step weight
/// gradients 36 MB and never evictable, so any threshold below those makes every op evict
/// every activation and recompute the recurrence from its start.
fn the_lstm_at_batch_2_goes_from_no_eviction_to_thrashing() {
    let g = real("lstm_lm");
    let [_, _, lowest] = real_thresholds(&g);
    let mut o = options(&g, Some(lowest));
    o.trace = false;
    assert_eq!(simulate(&g, &o, 1).unwrap().counters.evictions, 0);
    let (lb, up) = (g.lower_bound().bytes, g.memory_profile().peak);
    o.eviction_threshold = Some(lowest - (up - lb) / 64);
    o.max_recomputes = Some(g.num_ops() as u64);
    assert!(matches!(
        simulate(&g, &o, 1),
        Err(ExecError::Thrashing { .. })
    ));
}

/// The smallest pool (in alignment units) in which the simulation of `o` without a
/// threshold finishes, found by bisection between the lower bound and `o.memory`.
fn tightest_pool(g: &Graph, o: &DtrOptions) -> u64 {
    let fits = |m: u64| {
        simulate(
            g,
            &DtrOptions {
                memory: m,
                ..o.clone()
            },
            2,
        )
        .is_ok()
    };
    let (mut lo, mut hi) = (g.lower_bound().bytes / o.align, o.memory / o.align);
    assert!(fits(hi * o.align));
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if fits(mid * o.align) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi * o.align
}

fn tight_pools_without_threshold_evict_and_compact_and_stay_exact<D: Device>() {
    let mut compacted = false;
    for name in TINY {
        let g = load(name);
        let want = unplanned::<D>(&g, 2);
        let mut o = options(&g, None);
        let tight = tightest_pool(&g, &o);
        for memory in [tight, tight + tight / 16, tight + tight / 4] {
            o.memory = memory;
            let (got, r) = dtr::<D>(&g, &o, 2);
            assert_matches(&format!("{name} in {memory} bytes"), &want, &got, None);
            assert!(r.pool.touched_bytes <= memory);
            if memory == tight {
                assert!(
                    r.counters.evictions + r.counters.defrags > 0,
                    "{name} in {memory} bytes: {:?}",
                    r.counters
                );
            }
            compacted |= r.counters.defrags > 0;
        }
    }
    assert!(
        compacted,
        "no tight pool compacted: the defragmentation path is untested"
    );
}

fn sqrt_sampling_is_deterministic_and_exact<D: Device>() {
    let g = load("tiny_transformer");
    let want = unplanned::<D>(&g, 2);
    let mut o = options(&g, Some(thresholds(&g)[2]));
    o.sqrt_sampling = true;
    o.seed = 3;
    let (a, ra) = dtr::<D>(&g, &o, 2);
    let (b, rb) = dtr::<D>(&g, &o, 2);
    assert_matches("sqrt sampling", &want, &a, None);
    assert_matches("sqrt sampling, again", &a, &b, None);
    assert_eq!(ra.counters.evictions, rb.counters.evictions);
    assert!(ra.counters.evictions > 0);
}

fn a_run_and_its_simulation_evict_alike<D: Device>() {
    for name in TINY {
        let g = load(name);
        for th in thresholds(&g) {
            let o = options(&g, Some(th));
            let (_, run) = dtr::<D>(&g, &o, 2);
            let sim = simulate(&g, &o, 2).unwrap();
            let (a, b) = (&run.counters, &sim.counters);
            assert_eq!(
                (
                    a.launches,
                    a.recomputes,
                    a.evictions,
                    a.drops,
                    a.defrags,
                    a.moved_bytes
                ),
                (
                    b.launches,
                    b.recomputes,
                    b.evictions,
                    b.drops,
                    b.defrags,
                    b.moved_bytes
                ),
                "{name} at {th}"
            );
            assert_eq!(run.pool, sim.pool, "{name} at {th}");
            assert_eq!(a.recompute_cost, b.recompute_cost, "{name} at {th}");
        }
    }
}

fn simulation_traces_pass_the_checker_on_the_big_zoo_graphs() {
    for name in ["resnet50", "gpt2", "unet", "vgg16", "chain1000"] {
        let g = load(name);
        for th in thresholds(&g) {
            let mut o = options(&g, Some(th));
            o.evictee_min_size = sgc_exec::dtr::DEFAULT_EVICTEE_MIN_SIZE;
            let mut sim = Simulator::new(&g, &o).unwrap();
            sim.step().unwrap_or_else(|e| panic!("{name} at {th}: {e}"));
            let bad = dtr_audit::violations(&g, o.memory, sim.trace().unwrap());
            assert!(bad.is_empty(), "{name}: {:?}", &bad[..bad.len().min(10)]);
        }
    }
}

fn an_allocation_that_cannot_be_served_names_the_op_and_the_request<D: Device>() {
    let g = load("tiny_cnn");
    let lb = g.lower_bound().bytes;
    let mut o = options(&g, None);
    o.memory = lb * 2 / 3;
    let err = match DtrExecutor::new(&g, D::open(), &o) {
        Err(e) => e,
        Ok(mut ex) => {
            ex.bind_seeded(SEED).unwrap();
            ex.step().unwrap_err()
        }
    };
    let msg = err.to_string();
    assert!(matches!(err, ExecError::OutOfMemory { .. }), "{msg}");
    assert!(
        msg.contains("out of memory at op `") && msg.contains("needs"),
        "{msg}"
    );
    let sim = simulate(&g, &o, 1).unwrap_err();
    assert_eq!(sim.to_string(), msg, "the simulation fails alike");
}

fn persistent_storage_that_cannot_fit_is_refused_before_the_first_step<D: Device>() {
    let g = load("tiny_mlp");
    let mut o = options(&g, None);
    o.memory = g.persistent_bytes() / 2;
    let err = DtrExecutor::new(&g, D::open(), &o).err().expect("refused");
    assert!(err.to_string().contains("persistent storage"), "{err}");
}

/// Pinning is exercised, not vacuous: evictions happen while ops are being run or
/// recomputed (inside their enter/exit), and none of them hits an operand of an op on the
/// stack (the checker's rule), with and without sqrt sampling.
fn eviction_never_picks_a_pinned_tensor() {
    use sgc_exec::dtr::{Event, FreeKind};
    for name in TINY {
        let g = load(name);
        for sqrt in [false, true] {
            let mut o = options(&g, Some(thresholds(&g)[2]));
            o.sqrt_sampling = sqrt;
            let mut sim = Simulator::new(&g, &o).unwrap();
            sim.step().unwrap();
            let trace = sim.trace().unwrap();
            assert!(dtr_audit::violations(&g, o.memory, trace).is_empty());
            let mut depth = 0usize;
            let mut inside = 0;
            for e in trace {
                match e {
                    Event::Enter { .. } => depth += 1,
                    Event::Exit { .. } => depth -= 1,
                    Event::Free {
                        why: FreeKind::Evict,
                        ..
                    } if depth > 0 => inside += 1,
                    _ => {}
                }
            }
            assert!(inside > 0, "{name}: no eviction while an op was pinned");
        }
    }
}
