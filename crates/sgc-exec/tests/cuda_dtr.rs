//! Run-time DTR on CUDA (skipped with the reason where no device is usable): on the tiny
//! zoo graphs at three eviction thresholds, the loss, every gradient and every parameter
//! after two steps are bitwise those of the unplanned CUDA run (a recomputation re-runs
//! the same kernel on the same bytes, every pool offset 256-byte aligned like the
//! unplanned arena's), the trace passes the independent checker, and a tight pool that
//! compacts (device-to-device copies, overlapping ones through the workspace) stays exact.

#![cfg_attr(
    not(feature = "cuda"),
    allow(unreachable_code, unused_variables, unused_mut, clippy::drop_non_drop)
)]

mod common;
mod dtr_audit;
mod skip;

use common::{load, TINY};
use sgc_exec::dtr::{simulate, DtrOptions};
use sgc_exec::{CudaBackend, DtrExecutor, Executor, HostTensor};
use sgc_ir::{Graph, TensorKind};

const SEED: u64 = 7;

fn names(g: &Graph) -> Vec<String> {
    let mut v: Vec<String> = g
        .outputs()
        .iter()
        .map(|&t| g.tensor(t).name.clone())
        .collect();
    v.extend(
        g.tensor_ids()
            .filter(|&t| g.tensor(t).kind == TensorKind::Param)
            .map(|t| g.tensor(t).name.clone()),
    );
    v
}

fn gpu() -> CudaBackend {
    CudaBackend::new(0).unwrap_or_else(|e| panic!("{e}"))
}

fn unplanned(g: &Graph) -> Vec<(String, HostTensor)> {
    let mut ex = Executor::unplanned(g, gpu()).unwrap();
    ex.bind_seeded(SEED).unwrap();
    ex.run(2).unwrap();
    names(g)
        .into_iter()
        .map(|n| (n.clone(), ex.read(&n).unwrap()))
        .collect()
}

fn check(g: &Graph, o: &DtrOptions, want: &[(String, HostTensor)], what: &str) -> u64 {
    let mut ex = DtrExecutor::new(g, gpu(), o).unwrap();
    ex.bind_seeded(SEED).unwrap();
    ex.run(2).unwrap_or_else(|e| panic!("{what}: {e}"));
    let bad = dtr_audit::violations(g, o.memory, ex.trace().unwrap());
    assert!(bad.is_empty(), "{what}: {:?}", &bad[..bad.len().min(10)]);
    for (n, a) in want {
        let b = ex.read(n).unwrap();
        assert!(
            a.bits_eq(&b),
            "{what}: `{n}` differs from the unplanned CUDA run"
        );
    }
    ex.report().counters.defrags
}

fn dtr_runs_on_cuda_equal_the_unplanned_cuda_run_bitwise() {
    for name in TINY {
        let g = load(name);
        let want = unplanned(&g);
        let (lb, up) = (g.lower_bound().bytes, g.memory_profile().peak);
        for th in [up, lb + (up - lb) / 2, lb + (up - lb) / 8] {
            let mut o = DtrOptions::new(2 * up + (1 << 20));
            o.eviction_threshold = Some(th);
            o.evictee_min_size = 0;
            o.trace = true;
            check(&g, &o, &want, &format!("{name} at threshold {th}"));
        }
    }
}

fn tight_pools_compact_on_cuda_and_stay_exact() {
    let mut defrags = 0;
    for name in TINY {
        let g = load(name);
        let want = unplanned(&g);
        let mut o = DtrOptions::new(2 * g.memory_profile().peak + (1 << 20));
        o.evictee_min_size = 0;
        o.trace = true;
        // The smallest pool the simulation runs in (the engine decides alike on CUDA).
        let align = o.align;
        let fits = |m: u64| {
            simulate(
                &g,
                &DtrOptions {
                    memory: m,
                    ..o.clone()
                },
                2,
            )
            .is_ok()
        };
        let (mut lo, mut hi) = (g.lower_bound().bytes / align, o.memory / align);
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            if fits(mid * align) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        o.memory = hi * align;
        defrags += check(&g, &o, &want, &format!("{name} in {} bytes", o.memory));
    }
    assert!(defrags > 0, "no tight pool compacted");
}

fn main() {
    let no_device = CudaBackend::new(0)
        .err()
        .map(|e| format!("no CUDA device here: {e}"));
    let tests: [(&str, fn()); 2] = [
        (
            "dtr_runs_on_cuda_equal_the_unplanned_cuda_run_bitwise",
            dtr_runs_on_cuda_equal_the_unplanned_cuda_run_bitwise,
        ),
        (
            "tight_pools_compact_on_cuda_and_stay_exact",
            tight_pools_compact_on_cuda_and_stay_exact,
        ),
    ];
    skip::run(
        tests
            .into_iter()
            .map(|(name, f)| skip::unless(skip::test(name, f), &no_device))
            .collect(),
    )
}
