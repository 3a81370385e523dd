//! The device abstraction: a [`Backend`] owns buffers (device allocations) and runs
//! [`Kernel`]s on [`Operand`]s, views of those buffers at byte offsets.
//!
//! # Contract every backend keeps
//!
//! - [`Backend::alloc`] makes one zero-filled allocation and counts it in
//!   [`Backend::memory`]; the executor makes exactly one for the arena and one per
//!   persistent storage, so `memory().peak_bytes` is what the plan promised.
//! - [`Backend::launch`] reads every byte of `inputs` and writes **every** byte of
//!   `outputs` (an arena region is reused and holds stale data: kernels that accumulate,
//!   such as `embedding_grad` or `max_pool2d_grad`, clear their output first). The
//!   exceptions are `sgd_update` and `copy_` ([`Kernel::writes_first_input`]), which have
//!   no outputs and write their first input (the parameter) in place.
//! - Outputs never overlap each other or any input (the layout guarantees it; backends
//!   check it and return an error, never corrupt memory), with one exception: a kernel
//!   that [runs in place](Kernel::runs_in_place) may write an output that *is* one of its
//!   inputs (same buffer, offset, dtype and shape: a plan's in-place pair). Inputs may
//!   overlap each other (the same tensor twice, a view and its base).
//! - Kernels are deterministic: a fixed reduction order, so running an op twice
//!   (recomputation) gives bitwise the same bytes.
//! - Data is f32 (and, on a backend whose [`Backend::holds`] says so, f16 and bf16);
//!   index operands (`embedding` ids, `cross_entropy` labels) are i64 or i32, masks bool,
//!   all little-endian.
//! - Offloads ([`HostCopy`]): [`Backend::alloc_host_pool`] makes one host allocation
//!   (page-locked on CUDA), counted in [`Backend::host_pool_bytes`] and not in
//!   [`Backend::memory`]. [`Backend::offload`] and [`Backend::fetch`] queue a copy between
//!   a buffer and the pool that starts once every kernel launched before it has finished
//!   and may run beside kernels launched after it (on CUDA, on a copy stream);
//!   [`Backend::wait_copy`] makes every kernel launched after it start after that copy
//!   ended. Until then the caller launches nothing that writes the copy's source or
//!   touches its destination.
//!
//! The CPU backend (`cpu_backend/`) is the reference; the CUDA backend (`cuda_backend/`)
//! implements the same kernels under the same names.

use crate::error::ExecError;
use crate::kernel::{FamilyKernel, Kernel, Linalg};
use sgc_ir::DType;

pub use crate::operand::{BufferId, Operand, View, ViewStep};

/// The dtypes every backend holds: f32 data, i64 and i32 indices, bool masks.
pub const BASE_DTYPES: &[DType] = &[DType::F32, DType::I64, DType::I32, DType::Bool];

/// What a backend's allocator has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AllocStats {
    /// Bytes allocated now.
    pub allocated_bytes: u64,
    /// The most bytes allocated at once.
    pub peak_bytes: u64,
    /// Allocations made.
    pub allocations: u64,
}

/// One copy between a buffer and the host pool ([`Backend::offload`] copies `bytes`
/// bytes of `buffer` at `offset` to the pool at `host_offset`; [`Backend::fetch`] copies
/// them back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCopy {
    pub buffer: BufferId,
    /// Byte offset in the buffer.
    pub offset: u64,
    /// Byte offset in the host pool.
    pub host_offset: u64,
    pub bytes: u64,
}

/// A compute device: see the [module docs](self) for the contract.
pub trait Backend {
    /// Device name for reports, e.g. `cpu` or `cuda:0 (NVIDIA H100)`.
    fn name(&self) -> String;

    /// Whether this backend has a kernel for `kernel`; the executor asks for every op
    /// before the first step and refuses the graph by op name otherwise.
    fn supports(&self, kernel: &Kernel) -> bool;

    /// Whether it runs `kernel` on inputs of `dtypes` (integer data in the kernels that
    /// take it); asked with [`Backend::supports`]. By default yes.
    fn supports_dtypes(&self, _kernel: &Kernel, _dtypes: &[DType]) -> bool {
        true
    }

    /// Whether tensors of `dtype` can be operands of this backend's kernels; the executor
    /// asks for every operand before the first step. By default [`BASE_DTYPES`].
    fn holds(&self, dtype: DType) -> bool {
        BASE_DTYPES.contains(&dtype)
    }

    /// Makes one zero-filled allocation of `bytes` bytes.
    fn alloc(&mut self, bytes: u64) -> Result<BufferId, ExecError>;

    /// Copies `data` into `buffer` starting at byte `offset`.
    fn write(&mut self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<(), ExecError>;

    /// Copies `out.len()` bytes of `buffer` starting at byte `offset` into `out`
    /// (waiting for queued kernels first).
    fn read(&mut self, buffer: BufferId, offset: u64, out: &mut [u8]) -> Result<(), ExecError>;

    /// Copies `bytes` bytes of `buffer` from byte `from` to byte `to`; the two ranges may
    /// overlap (a compacting allocator slides blocks down). The default goes through the
    /// host; backends override it with a device copy.
    fn copy(&mut self, buffer: BufferId, from: u64, to: u64, bytes: u64) -> Result<(), ExecError> {
        let len = usize::try_from(bytes)
            .map_err(|_| ExecError::backend(&self.name(), format!("cannot copy {bytes} bytes")))?;
        let mut staged = vec![0u8; len];
        self.read(buffer, from, &mut staged)?;
        self.write(buffer, to, &staged)
    }

    /// Runs `kernel`, reading `inputs` and writing `outputs` (operands in the op's order),
    /// after checking that the operands do not overlap ([`check_disjoint`]); a product of a
    /// transposed stored matrix runs on the stored matrix (`fold_transpose`).
    fn launch(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<(), ExecError> {
        check_disjoint(&self.name(), kernel, inputs, outputs)?;
        match fold_transpose(kernel, inputs) {
            Some((k, ins)) => self.run_kernel(&k, &ins, outputs),
            None => self.run_kernel(kernel, inputs, outputs),
        }
    }

    /// [`Backend::launch`]'s work, on operands already checked not to overlap, with
    /// transposes folded.
    fn run_kernel(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<(), ExecError>;

    /// Waits until every queued kernel has finished.
    fn synchronize(&mut self) -> Result<(), ExecError>;

    /// A point in the device's queue ([`Backend::mark`]).
    type Mark;

    /// How [`Backend::seconds_between`] measures, for reports (`wall clock`, `CUDA events`).
    const CLOCK: &'static str = "wall clock";

    /// Marks the point the device's queue has reached (every kernel launched so far), for
    /// timing without waiting: an instant on the CPU, whose kernels run as they are
    /// launched; an event recorded on the stream on CUDA.
    fn mark(&mut self) -> Result<Self::Mark, ExecError>;

    /// Device seconds from mark `from` to mark `to` (waits until `to` is reached).
    fn seconds_between(&mut self, from: &Self::Mark, to: &Self::Mark) -> Result<f64, ExecError>;

    /// The allocator's counters.
    fn memory(&self) -> AllocStats;

    /// A copy queued by [`Backend::offload`] or [`Backend::fetch`], for
    /// [`Backend::wait_copy`].
    type CopyDone;

    /// Makes the host pool that offloaded storages are copied into: one allocation of
    /// `bytes` host bytes (page-locked where the device has such memory), made once,
    /// before any copy.
    fn alloc_host_pool(&mut self, bytes: u64) -> Result<(), ExecError>;

    /// Bytes of the host pool (0 before [`Backend::alloc_host_pool`]).
    fn host_pool_bytes(&self) -> u64;

    /// Queues the copy of `copy.bytes` bytes of the buffer to the host pool, to start once
    /// every kernel launched so far has finished (see the [module docs](self)).
    fn offload(&mut self, copy: &HostCopy) -> Result<Self::CopyDone, ExecError>;

    /// Queues the copy of `copy.bytes` bytes of the host pool back into the buffer, to
    /// start once every kernel launched so far has finished.
    fn fetch(&mut self, copy: &HostCopy) -> Result<Self::CopyDone, ExecError>;

    /// Kernels launched after this call start after the copy `done` has ended.
    fn wait_copy(&mut self, done: &Self::CopyDone) -> Result<(), ExecError>;
}

/// Checks that `outputs` overlap neither each other nor any input (except an input they
/// exactly are, for a kernel that [runs in place](Kernel::runs_in_place)), and for a
/// kernel that [writes its first input](Kernel::writes_first_input) that the parameter
/// does not overlap the gradient. Backends call it at the top of `launch`.
pub fn check_disjoint(
    backend: &str,
    kernel: &Kernel,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<(), ExecError> {
    let written: Vec<&Operand> = match kernel {
        k if k.writes_first_input() => inputs.iter().take(1).collect(),
        _ => outputs.iter().collect(),
    };
    let all: Vec<&Operand> = inputs.iter().chain(outputs).collect();
    let in_place = kernel.runs_in_place();
    for w in &written {
        let clashes = all
            .iter()
            .filter(|o| !std::ptr::eq(**o, *w) && o.overlaps(w))
            .filter(|o| !(in_place && ***o == **w && inputs.iter().any(|i| std::ptr::eq(i, **o))))
            .count();
        if clashes > 0 {
            return Err(ExecError::backend(
                backend,
                format!(
                    "{}: a written operand overlaps another operand",
                    kernel.name()
                ),
            ));
        }
    }
    Ok(())
}

/// A product whose right operand is the transpose of a stored matrix (`mm(x, t(w))`, the
/// exporter's linear layer) reads the stored matrix with `transpose_b` rather than
/// materialising the transpose: the kernel and operands to launch instead, if so. The
/// product is the same sum in the same order.
pub(crate) fn fold_transpose(
    kernel: &Kernel,
    inputs: &[Operand],
) -> Option<(Kernel, Vec<Operand>)> {
    let slot = match kernel.op() {
        FamilyKernel::Linalg(Linalg::MatMul { transpose_b: false }) => 1,
        FamilyKernel::Linalg(Linalg::AddMm { transpose_b: false }) => 2,
        _ => return None,
    };
    let view = inputs.get(slot)?.view.as_ref()?;
    if view.base.len() != 2 || view.steps != [ViewStep::Permute(vec![1, 0])] {
        return None;
    }
    let mut ins = inputs.to_vec();
    ins[slot] = Operand::new(
        ins[slot].buffer,
        ins[slot].offset,
        ins[slot].dtype,
        view.base.clone(),
    );
    let k = match kernel.op() {
        FamilyKernel::Linalg(Linalg::MatMul { .. }) => Linalg::MatMul { transpose_b: true },
        _ => Linalg::AddMm { transpose_b: true },
    };
    let k = kernel.with_op(k);
    Some((k, ins))
}
