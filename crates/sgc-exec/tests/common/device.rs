//! One test body, every device (candle's `test_device!`): a test written once, generic
//! over [`Device`], runs as `cpu::<name>` and `cuda::<name>`. Where a device is not usable
//! (no CUDA device, no driver, or a build without the `cuda` feature, where `CudaBackend`
//! is a stand-in that always fails) its tests are skipped with the reason printed
//! (`skipped <name>: <why>`, what scripts/gpu-check.sh looks for) and counted as ignored,
//! never as passed. The test binaries using it are `harness = false` (libtest-mimic).
//!
//! ```ignore
//! fn main() {
//!     let mut tests = every_device!(planned_runs_match, tiny_mlp_learns);
//!     tests.extend(on_device!(CpuBackend: only_on_the_cpu));
//!     tests.extend(device::plain(&[("no_device_needed", no_device_needed)]));
//!     device::run(tests)
//! }
//! ```

use libtest_mimic::{Arguments, Trial};
use sgc_exec::runner::{Runner, Schedule};
use sgc_exec::{Backend, CpuBackend, CudaBackend, HostTensor};
use sgc_ir::{Graph, TensorKind};

/// A backend that tests run on.
pub trait Device: Backend + Sized + 'static {
    /// The prefix of its tests' names.
    const NAME: &'static str;
    /// How far its runs may be from the CPU reference, relative to each tensor's largest
    /// magnitude; `None`: bit for bit. On CUDA a layout moves tensors to other offsets and
    /// cuBLAS may pick another kernel (another summation order) for operands of another
    /// alignment.
    const TOLERANCE: Option<f32>;
    /// The backend (its tests are skipped where [`Device::unavailable`] says why).
    fn open() -> Self;
    /// Why this machine cannot run it, if it cannot.
    fn unavailable() -> Option<String>;
}

impl Device for CpuBackend {
    const NAME: &'static str = "cpu";
    const TOLERANCE: Option<f32> = None;
    fn open() -> Self {
        CpuBackend::new()
    }
    fn unavailable() -> Option<String> {
        None
    }
}

impl Device for CudaBackend {
    const NAME: &'static str = "cuda";
    const TOLERANCE: Option<f32> = Some(1e-3);
    fn open() -> Self {
        CudaBackend::new(0).unwrap_or_else(|e| panic!("{e}"))
    }
    /// With `SGC_CUDA` set (`emulate`: CI's emulated device), never: a device asked for
    /// by name that does not open fails the test instead of skipping it.
    fn unavailable() -> Option<String> {
        if std::env::var_os("SGC_CUDA").is_some() {
            return None;
        }
        CudaBackend::new(0)
            .err()
            .map(|e| format!("no CUDA device here: {e}"))
    }
}

/// The tests `(name, body)` on device `D`, named `<D::NAME>::<name>`, skipped where `D`
/// is not usable.
pub fn trials<D: Device>(tests: &[(&str, fn())]) -> Vec<Trial> {
    let why = D::unavailable();
    tests
        .iter()
        .map(|&(name, f)| {
            let trial = test(format!("{}::{name}", D::NAME), f);
            match &why {
                Some(why) => {
                    println!("skipped {}: {why}", trial.name());
                    trial.with_ignored_flag(true)
                }
                None => trial,
            }
        })
        .collect()
}

/// Tests that need no device (simulations), under their own names.
pub fn plain(tests: &[(&str, fn())]) -> Vec<Trial> {
    tests.iter().map(|&(n, f)| test(n.to_string(), f)).collect()
}

fn test(name: String, f: fn()) -> Trial {
    Trial::test(name, move || {
        f();
        Ok(())
    })
}

/// Runs the trials with the arguments `cargo test` passed and exits.
pub fn run(trials: Vec<Trial>) -> ! {
    libtest_mimic::run(&Arguments::from_args(), trials).exit()
}

/// The trials of the generic tests `f::<D>` on device `D`: `on_device!(CpuBackend: f, g)`.
#[allow(unused_macros)] // not every binary that includes `common` runs device tests
macro_rules! on_device {
    ($d:ty: $($f:ident),* $(,)?) => {
        $crate::common::device::trials::<$d>(&[$((stringify!($f), $f::<$d> as fn())),*])
    };
}

/// The trials of the generic tests `f::<D>` on every device.
#[allow(unused_macros)]
macro_rules! every_device {
    ($($f:ident),* $(,)?) => {{
        let mut trials = $crate::common::device::on_device!(sgc_exec::CpuBackend: $($f),*);
        trials.extend($crate::common::device::on_device!(sgc_exec::CudaBackend: $($f),*));
        trials
    }};
}

#[allow(unused_imports)]
pub(crate) use {every_device, on_device};

/// The seed of every test's inputs and parameters.
pub const SEED: u64 = 7;

/// The graph outputs (loss and gradients) and the params of `g`, by name.
pub fn outputs_and_params(g: &Graph) -> Vec<String> {
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

/// Every graph output and param read from `ex`.
pub fn read_all<B: Backend, S: Schedule<B>>(
    g: &Graph,
    ex: &mut Runner<B, S>,
) -> Vec<(String, HostTensor)> {
    outputs_and_params(g)
        .into_iter()
        .map(|n| (n.clone(), ex.read(&n).unwrap_or_else(|e| panic!("{e}"))))
        .collect()
}

/// Every graph output and param after `steps` steps of `ex` from seeded values.
pub fn trained<B: Backend, S: Schedule<B>>(
    g: &Graph,
    ex: &mut Runner<B, S>,
    steps: usize,
) -> Vec<(String, HostTensor)> {
    ex.bind_seeded(SEED).unwrap();
    ex.run(steps).unwrap_or_else(|e| panic!("{e}"));
    read_all(g, ex)
}

/// `got` equals `want` tensor by tensor: bit for bit without a tolerance; with one,
/// within `tolerance` times each tensor's largest magnitude (at least 1e-3), and finite.
pub fn assert_matches(
    what: &str,
    want: &[(String, HostTensor)],
    got: &[(String, HostTensor)],
    tolerance: Option<f32>,
) {
    assert_eq!(want.len(), got.len(), "{what}");
    for ((n, a), (_, b)) in want.iter().zip(got) {
        let Some(tol) = tolerance else {
            assert!(a.bits_eq(b), "{what}: `{n}` differs from the reference");
            continue;
        };
        let (a, b) = (a.as_f32().unwrap(), b.as_f32().unwrap());
        let scale = a.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst <= tol * scale && b.iter().all(|v| v.is_finite()),
            "{what}: `{n}` differs by {worst} (scale {scale})"
        );
    }
}
