//! The real corpus at its small size (tests/fixtures/real_small: ResNet-18/50, DenseNet-121,
//! MobileNetV3-Large, EfficientNet-B0, the LSTM LM, the transformer LM, ViT-B/16, the
//! U-Net) on the CUDA backend: one step unplanned and one under the sublinear plan, each
//! loss and gradient within 1e-5 of its largest magnitude of the CPU backend's step, and
//! the planned step bit for bit the unplanned one. The CPU backend's products sum in f32
//! here, as cuBLAS's do ([`Products::F32`]): at these sizes (batch 2, 64x64 images) batch
//! norm runs over as few as two values per channel in the last stages, where its input
//! gradient is zero analytically and rounding noise in practice, so f32 and f64 sums alone
//! move some gradients by more than their largest magnitude. On a GPU, or in CI on the emulated
//! device (`SGC_CUDA=emulate`); skipped (counted as ignored) where neither is there.

mod common;

use common::device::{self, assert_matches, on_device, read_all, Device, SEED};
use common::{real, REAL_SMALL, REAL_SMALL_MORE};
use sgc_exec::runner::{Runner, Schedule};
use sgc_exec::{Backend, CpuBackend, CudaBackend, Executor, HostTensor, Products};
use sgc_ir::Graph;

fn main() {
    device::run(on_device!(CudaBackend: the_small_corpus_matches_the_cpu_backend))
}

/// Loss and every gradient after one step from seeded values.
fn step<B: Backend, S: Schedule<B>>(g: &Graph, ex: &mut Runner<B, S>) -> Vec<(String, HostTensor)> {
    ex.bind_seeded(SEED).unwrap();
    ex.run(1).unwrap_or_else(|e| panic!("{e}"));
    read_all(g, ex)
        .into_iter()
        .filter(|(n, _)| g.outputs().iter().any(|&t| g.tensor(t).name == *n))
        .collect()
}

fn the_small_corpus_matches_the_cpu_backend<D: Device>() {
    println!("running on {}", D::open().name());
    for name in REAL_SMALL.iter().chain(&REAL_SMALL_MORE) {
        let g = real(name);
        let cpu = CpuBackend::with_products(Products::F32);
        let want = step(&g, &mut common::unplanned(&g, cpu).unwrap());
        let unplanned = step(&g, &mut common::unplanned(&g, D::open()).unwrap());
        let (worst, at) = worst_relative(&want, &unplanned);
        assert!(
            worst <= 1e-5,
            "{name} / unplanned: `{at}` is {worst:.2e} of its largest magnitude from the CPU backend's"
        );
        let plan = common::plan(&g, sgc_plan::Strategy::Sublinear);
        let mut ex = Executor::from_plan(&g, &plan, D::open()).unwrap_or_else(|e| panic!("{e}"));
        let planned = step(&g, &mut ex);
        assert_matches(
            &format!("{name} / sublinear vs unplanned"),
            &unplanned,
            &planned,
            None,
        );
        println!("{name}: unplanned within {worst:.1e} of the CPU backend (at `{at}`), sublinear bitwise");
    }
}

/// The largest difference of any tensor, over that tensor's largest magnitude, and where.
fn worst_relative(want: &[(String, HostTensor)], got: &[(String, HostTensor)]) -> (f32, String) {
    let mut worst = (0.0f32, String::new());
    for ((n, a), (_, b)) in want.iter().zip(got) {
        let (a, b) = (a.as_f32().unwrap(), b.as_f32().unwrap());
        let scale = a.iter().fold(f32::MIN_POSITIVE, |m, v| m.max(v.abs()));
        let d = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
            / scale;
        if d > worst.0 || d.is_nan() {
            worst = (d, n.clone());
        }
    }
    worst
}
