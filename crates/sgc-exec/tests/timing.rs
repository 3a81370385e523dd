//! Step timing on the CPU backend (`sgc_exec::timing`): a plan that recomputes nothing
//! runs as fast as the unplanned schedule, and the warm-up keeps one-off costs out of the
//! ratio. Timing tests share the machine's cores, so they run one at a time, and their
//! products on one GEMM thread: a two-thread product on a loaded two-core machine waits
//! for its slower half, which stretches single steps by tens of percent.

mod common;

use sgc_exec::timing::{self, TimingOptions};
use sgc_exec::{Backend, CpuBackend, ExecError, Executor, HostCopy, Kernel, Operand};
use sgc_ir::Graph;
use sgc_plan::{Plan, PlanOptions, Strategy};
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Holds the machine for one timing test: one test at a time, one GEMM thread (set before
/// the process's first product, which reads it once).
fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("MATMUL_NUM_THREADS", "1");
    guard
}

fn sublinear(graph: &Graph) -> Plan {
    let options = PlanOptions {
        strategy: Strategy::Sublinear,
        ..Default::default()
    };
    sgc_plan::plan(graph, &options, &Default::default()).expect("plan")
}

/// The CPU backend, whose first `cold_launches` launches each pay `delay` more: a
/// one-off cost (module loading, library initialisation) on one side only.
struct Cold {
    cpu: CpuBackend,
    cold_launches: usize,
    delay: Duration,
}

impl Backend for Cold {
    common::cpu_passthrough!();
    fn run_kernel(&mut self, k: &Kernel, i: &[Operand], o: &[Operand]) -> Result<(), ExecError> {
        if self.cold_launches > 0 {
            self.cold_launches -= 1;
            std::thread::sleep(self.delay);
        }
        self.cpu.run_kernel(k, i, o)
    }
    type CopyDone = ();
    fn offload(&mut self, copy: &HostCopy) -> Result<(), ExecError> {
        self.cpu.offload(copy)
    }
    fn fetch(&mut self, copy: &HostCopy) -> Result<(), ExecError> {
        self.cpu.fetch(copy)
    }
    fn wait_copy(&mut self, done: &()) -> Result<(), ExecError> {
        self.cpu.wait_copy(done)
    }
}

fn cold(cold_launches: usize) -> Cold {
    Cold {
        cpu: CpuBackend::new(),
        cold_launches,
        delay: Duration::from_millis(5),
    }
}

/// Planned and unplanned steps of graph `mlp` (planned on a backend cold for its first
/// `cold_steps` steps) compared under `options`.
fn mlp_compared(cold_steps: usize, options: &TimingOptions) -> timing::Comparison {
    let graph = common::load("mlp");
    let plan = sublinear(&graph);
    let launches = graph.num_ops() * cold_steps;
    let mut planned = Executor::from_plan(&graph, &plan, cold(launches)).expect("planned");
    let mut unplanned = common::unplanned(&graph, cold(0)).expect("unplanned");
    planned.bind_seeded(0).expect("bind");
    unplanned.bind_seeded(0).expect("bind");
    let c = timing::compare(&mut planned, &mut unplanned, options, || {}).expect("compare");

    assert!(c.losses_bitwise_equal());
    assert_eq!(c.planned.times.seconds.len(), options.steps);
    assert_eq!(c.planned.losses.len(), options.warmup + options.steps);
    c
}

/// The measured ratio, and the step times that gave it for a failure's message.
fn ratio_and_times(c: &timing::Comparison) -> (f64, String) {
    let times = format!(
        "planned steps {:?} s, unplanned {:?} s",
        c.planned.times.seconds, c.unplanned.times.seconds
    );
    (c.time_ratio(), times)
}

/// The MLP's plan recomputes nothing, so its step time reads as the unplanned one's: the
/// median of 40 alternated rounds' ratios within 25%. A debug build on a shared 2-core
/// machine holds no tighter band: CI measured 0.881 once, the planned side faster in
/// every round with arenas of the same size at other addresses. What this test tells apart
/// is a ratio near 1 from a plan that recomputes or waits; the 10% figure is a benchmark's
/// (`cargo bench --bench exec`, release: `x unpl.` of the rows whose `recomp` is 0).
#[test]
fn nothing_recomputed_reads_one() {
    let _one = exclusive();
    let graph = common::load("mlp");
    let plan = sublinear(&graph);
    assert_eq!(plan.summary.recompute_steps, 0, "the MLP's plan recomputes");
    assert_eq!(timing::predicted_ratio(&plan), 1.0);
    let options = TimingOptions {
        warmup: 2,
        steps: 40,
    };
    let (ratio, times) = ratio_and_times(&mlp_compared(0, &options));
    eprintln!("mlp planned / unplanned: {ratio:.4}x");
    assert!(
        (ratio - 1.0).abs() <= 0.25,
        "planned / unplanned {ratio:.3}x: {times}"
    );
}

/// A one-off cost on the planned side (every launch of its first 7 steps 5 ms slower, as
/// a first CUDA step pays library initialisation) stays out of the ratio when the warm-up
/// covers it; the same measurement without warm-up sees it (in 7 of its 9 rounds, so in
/// the median), so the first assertion can fail. The warmed ratio is held to 25%, the
/// same band as `nothing_recomputed_reads_one`: what this test tells apart is a ratio near 1
/// from one above 1.5 (a loaded CI machine measured 1.10 once, the two sides' arenas at
/// other addresses).
#[test]
fn warm_up_keeps_one_off_costs_out() {
    let _one = exclusive();
    let warmed = TimingOptions {
        warmup: 7,
        steps: 40,
    };
    let (ratio, times) = ratio_and_times(&mlp_compared(7, &warmed));
    assert!(
        (ratio - 1.0).abs() <= 0.25,
        "warmed up: {ratio:.3}x: {times}"
    );
    let cold = TimingOptions {
        warmup: 0,
        steps: 9,
    };
    let (ratio, times) = ratio_and_times(&mlp_compared(7, &cold));
    assert!(ratio > 1.5, "without warm-up: {ratio:.3}x: {times}");
}

/// Every op gets a time, the graph with them validates, and a plan of it predicts its
/// ratio from them.
#[test]
fn profile_times_every_op() {
    let _one = exclusive();
    let graph = common::load("tiny_cnn");
    let mut ex = common::unplanned(&graph, CpuBackend::new()).expect("executor");
    ex.bind_seeded(0).expect("bind");
    let options = TimingOptions {
        warmup: 1,
        steps: 3,
    };
    let seconds = timing::profile(&mut ex, &options, || {}).expect("profile");
    assert_eq!(seconds.len(), graph.num_ops());
    assert!(seconds.iter().any(|&s| s > 0.0));
    let how = timing::Measured {
        device: ex.report().device,
        clock: <CpuBackend as Backend>::CLOCK,
        options,
    };
    let timed = timing::timed_graph(&graph, &seconds, &how).expect("timed graph");
    for op in timed.op_ids() {
        let t = timed.op(op).time_us.expect("time_us");
        assert!(t >= timing::MIN_TIME_US, "{}: {t}", timed.op(op).name);
    }
    let plan = sublinear(&timed);
    assert_eq!(plan.summary.cost_source, "time_us");
    assert!(timing::predicted_ratio(&plan) >= 1.0);
}
