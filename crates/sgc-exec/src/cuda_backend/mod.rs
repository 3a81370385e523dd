//! The CUDA backend, under the CPU backend's kernel names.
//!
//! Built on cudarc with dynamic loading (no CUDA toolkit needed to build; the driver,
//! NVRTC and cuBLAS are opened at run time, after `loader` checked that each one loads,
//! so a machine without them gets [`crate::error::ExecError::CudaUnavailable`], never a panic).
//!
//! - `kernels/*.cu`: the kernels in CUDA C, one file per op family with CUDA kernels
//!   ([`crate::ops`]), each kernel named after the op type it runs. [`sources`]
//!   assembles them into one program, compiled by NVRTC when the backend is created, for
//!   the device's own architecture, and loaded as one module.
//! - `<family>.rs` (`elementwise`, `math`, `linalg`, `conv`, `pool`, `norm`, `loss`,
//!   `embedding`, `shape`, `reduce`, `random`, `attention`): the family's `run` and its launchers, one function per op type with the
//!   CPU backend's names. Matrix products (`matmul`,
//!   `matmul_tn`, `batched_matmul`, and convolutions through im2col) run on cuBLAS SGEMM.
//! - `device.rs`: context, stream, kernel launch (arguments checked against
//!   [`sources::signatures`]), GEMM, workspace; `runtime.rs`: [`CudaBackend`], buffers and
//!   the dispatch; `host_pool.rs`: offloads' pinned host pool and copy streams.
//!
//! Memory: every [`crate::backend::Backend::alloc`] is one device allocation (the executor makes one
//! arena and one per persistent storage); operands are byte offsets into them. Internal
//! workspaces (im2col, per-row losses) and staging buffers (a view operand materialised
//! before the kernel reads it; a grouped convolution's gathered channels; a norm
//! backward's results the op does not ask for) are outside the allocator's statistics, as
//! the CPU backend's copies are.
//!
//! Coverage: every op kind the CPU backend runs, the exporter's included, has a kernel
//! here; [`runs`] is `supports`, compiled into every build so that
//! [`crate::coverage`] answers without a device.
//!
//! Determinism: one compute stream (offloads' copies run on copy streams, ordered by
//! events, and move bytes only); no atomics; every reduction is one block of
//! [`sources::BLOCK`] threads summing fixed strided subsets, then a fixed tree (or one
//! thread summing in order), so the same launch gives the same bits. cuBLAS is
//! deterministic on one stream for the same problem and pointer alignment.
//!
//! Without the `cuda` feature `CudaBackend` is a stand-in whose constructor returns an
//! error, so every caller builds everywhere.

pub mod sources;

use crate::kernel::{FamilyKernel, Kernel, Shape};

/// Whether the CUDA backend holds `dtype`: f32 data, i64/i32 indices and bool masks
/// ([`crate::backend::BASE_DTYPES`]), and f16 and bf16 (computed in f32, `widen.rs`). Its
/// `holds`, compiled into every build like [`runs`].
pub fn holds(dtype: sgc_ir::DType) -> bool {
    crate::backend::BASE_DTYPES.contains(&dtype) || crate::widening::is_half(dtype)
}

/// Whether the CUDA kernels run `kernel` on inputs of `dtypes`, as the CPU backend does:
/// data movement (copies, reshapes, broadcasts, slices, selects, permutations) of every
/// dtype, gathers of f32 or i64 data, integer `add`/`sub`/`mul` (wrapping), comparisons of
/// any two numbers, casts; every other kernel reads float data only. Its `runs_dtypes`,
/// compiled into every build like [`runs`].
pub fn runs_dtypes(kernel: &Kernel, dtypes: &[sgc_ir::DType]) -> bool {
    use crate::kernel::Elementwise as E;
    use crate::ops::elementwise::BinOp;
    use crate::ops::Slot;
    use sgc_ir::DType;
    let family = kernel.family();
    let int_data = dtypes
        .iter()
        .enumerate()
        .any(|(i, &d)| family.input(i) == Slot::Data && !crate::shapes::is_float(d));
    let integer = |d: &DType| matches!(d, DType::I64 | DType::I32 | DType::Bool | DType::U8);
    match kernel.op() {
        FamilyKernel::Shape(
            Shape::CopyInto
            | Shape::Reshape
            | Shape::Expand
            | Shape::Slice { .. }
            | Shape::Select { .. }
            | Shape::Transpose { .. },
        ) => dtypes.iter().all(|&d| holds(d)),
        FamilyKernel::Shape(Shape::Gather { .. }) => {
            matches!(dtypes.first(), Some(DType::F32 | DType::I64))
        }
        FamilyKernel::Elementwise(
            E::AddScalar { .. } | E::CompareScalar { .. } | E::CompareTensor { .. },
        ) => true,
        FamilyKernel::Elementwise(E::Add | E::Mul) if int_data => dtypes.iter().all(integer),
        FamilyKernel::Elementwise(E::Broadcast { op }) if int_data => {
            *op != BinOp::Div && dtypes.iter().all(integer)
        }
        _ => !int_data,
    }
}

/// Whether the CUDA backend runs `kernel`: its `supports`, compiled into every build so
/// that [`crate::coverage`] answers as the device would.
pub fn runs(kernel: &Kernel) -> bool {
    match kernel.op() {
        FamilyKernel::Shape(Shape::Transpose { perm }) => perm.len() <= sources::MAX_RANK,
        // One offset per axis of the operand.
        FamilyKernel::Shape(Shape::Pad { before: o, .. } | Shape::Roll { shifts: o, .. }) => {
            o.len() <= sources::MAX_RANK
        }
        // Over axes that are not adjacent, the kept and the reduced axes are read through
        // their strides: at most `MAX_RANK` of each.
        FamilyKernel::Reduce(r) => {
            let kept = r.rank.saturating_sub(r.axes.len());
            r.adjacent() || r.axes.len().max(kept) <= sources::MAX_RANK
        }
        _ => kernel.on_cuda(),
    }
}

#[cfg(not(feature = "cuda"))]
mod stand_in;
#[cfg(not(feature = "cuda"))]
pub use stand_in::{CudaBackend, NOT_BUILT};

/// The backend's modules, built with the `cuda` feature only.
macro_rules! cuda_modules {
    ($($m:ident)*) => { $(#[cfg(feature = "cuda")] mod $m;)* };
}
cuda_modules!(attention conv device elementwise embedding launch linalg loss math norm pool random reduce runtime shape widen);
#[cfg(feature = "cuda")]
pub use runtime::CudaBackend;
