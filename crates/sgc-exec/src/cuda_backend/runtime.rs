//! [`CudaBackend`]: device buffers, the [`Backend`] implementation and the dispatch table.
//!
//! [`Backend::alloc`] makes one device allocation per call (the executor makes one arena
//! and one per persistent storage); an [`Operand`] is a byte offset into one of them,
//! checked against its bounds and dtype alignment before its address is handed to a
//! kernel. A view operand (an exported graph's alias) is materialised into a staging
//! buffer first (`shape::materialize`), and a product of a transposed stored matrix reads
//! it transposed instead, as the CPU backend does. [`run`] routes each kernel to its
//! family's module (the CPU backend's names), which calls the launcher of the op type's
//! name.

use super::device::{Device, Event, R};
use super::launch::Io;
use super::{
    attention, conv, elementwise, embedding, linalg, loss, math, norm, pool, random, reduce, shape,
};
use crate::backend::{AllocStats, Backend, BufferId, HostCopy, Operand};
use crate::error::{ExecError, KernelError};
use crate::kernel::{FamilyKernel, Kernel};

const NAME: &str = "cuda";

/// One allocation: its device address and its requested size.
pub(super) struct Buffer {
    pub(super) ptr: u64,
    pub(super) len: u64,
}

/// A CUDA device running the executor's kernels; see the [module docs](self).
pub struct CudaBackend {
    pub(super) buffers: Vec<Buffer>,
    stats: AllocStats,
    name: String,
    pub(super) dev: Device,
}

impl CudaBackend {
    /// Opens CUDA device `ordinal` (on the engine `SGC_CUDA` selects: a real device unless
    /// it says `emulate`): checks that the driver, NVRTC and cuBLAS load, that the device
    /// exists, compiles the kernels for it. Any failure is [`ExecError::CudaUnavailable`]
    /// saying why, never a panic.
    pub fn new(ordinal: usize) -> Result<Self, ExecError> {
        let dev = Device::open(ordinal)?;
        Ok(CudaBackend {
            buffers: Vec::new(),
            stats: AllocStats::default(),
            name: dev.label.clone(),
            dev,
        })
    }

    pub(super) fn kernel_err(kernel: &Kernel, error: KernelError) -> ExecError {
        ExecError::Kernel {
            backend: NAME.to_string(),
            kernel: kernel.name(),
            error: Box::new(error),
        }
    }

    pub(super) fn err(detail: impl Into<String>) -> ExecError {
        ExecError::backend(NAME, detail)
    }

    fn buffer(&self, id: BufferId) -> Result<&Buffer, ExecError> {
        self.buffers
            .get(id.0)
            .ok_or_else(|| Self::err(format!("no buffer {}", id.0)))
    }

    /// Byte range `offset..offset + len` of buffer `id`, checked to lie inside it.
    fn range(&self, id: BufferId, offset: u64, len: u64) -> Result<(usize, usize), ExecError> {
        let b = self.buffer(id)?;
        let end = offset.checked_add(len).filter(|&e| e <= b.len);
        match end {
            Some(end) => Ok((offset as usize, end as usize)),
            None => Err(Self::err(format!(
                "bytes {offset}..+{len} are outside buffer {} ({} bytes)",
                id.0, b.len
            ))),
        }
    }

    /// Device address of `op`, after checking bounds and alignment.
    pub(super) fn address(&self, op: &Operand) -> Result<u64, ExecError> {
        self.range(op.buffer, op.offset, op.bytes())?;
        if op.offset % op.dtype.size().max(1) != 0 {
            return Err(Self::err(format!(
                "operand at offset {} is misaligned for {}",
                op.offset,
                op.dtype.as_str()
            )));
        }
        Ok(self.buffers[op.buffer.0].ptr + op.offset)
    }

    fn sync_err(e: impl std::fmt::Display) -> ExecError {
        Self::err(e.to_string())
    }

    /// For `copy`: its device address, host offset and length, checked against the buffer
    /// and the pool.
    fn host_copy(&self, copy: &HostCopy) -> Result<(u64, usize, usize), ExecError> {
        self.range(copy.buffer, copy.offset, copy.bytes)?;
        let pool = self.dev.host_pool_bytes();
        if pool == 0 {
            return Err(Self::err("a copy to the host pool before the pool was made"));
        }
        let end = copy.host_offset.checked_add(copy.bytes);
        if end.is_none_or(|e| e > pool as u64) {
            return Err(Self::err(format!(
                "host bytes {}..+{} are outside the host pool ({pool} bytes)",
                copy.host_offset, copy.bytes,
            )));
        }
        let address = self.buffers[copy.buffer.0].ptr + copy.offset;
        Ok((address, copy.host_offset as usize, copy.bytes as usize))
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn supports(&self, kernel: &Kernel) -> bool {
        super::runs(kernel)
    }

    fn supports_dtypes(&self, kernel: &Kernel, dtypes: &[sgc_ir::DType]) -> bool {
        super::runs_dtypes(kernel, dtypes)
    }

    fn holds(&self, dtype: sgc_ir::DType) -> bool {
        super::holds(dtype)
    }

    fn alloc(&mut self, bytes: u64) -> Result<BufferId, ExecError> {
        let size = usize::try_from(bytes)
            .map_err(|_| Self::err(format!("cannot allocate {bytes} bytes")))?;
        let ptr = self
            .dev
            .engine()
            .alloc(size, true)
            .map_err(|e| Self::err(format!("cannot allocate {bytes} bytes: {e}")))?;
        self.buffers.push(Buffer { ptr, len: bytes });
        self.stats.allocated_bytes += bytes;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.allocated_bytes);
        self.stats.allocations += 1;
        Ok(BufferId(self.buffers.len() - 1))
    }

    fn write(&mut self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<(), ExecError> {
        let (start, _) = self.range(buffer, offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let at = self.buffers[buffer.0].ptr + start as u64;
        self.dev.engine().write(at, data).map_err(Self::sync_err)
    }

    fn read(&mut self, buffer: BufferId, offset: u64, out: &mut [u8]) -> Result<(), ExecError> {
        let (start, _) = self.range(buffer, offset, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        let at = self.buffers[buffer.0].ptr + start as u64;
        self.dev.engine().read(at, out).map_err(Self::sync_err)
    }

    /// A device-to-device copy on the stream; overlapping ranges (a compacting allocator
    /// sliding a block down by less than its size) go through the workspace, since the
    /// driver's copy does not allow overlap.
    fn copy(&mut self, buffer: BufferId, from: u64, to: u64, bytes: u64) -> Result<(), ExecError> {
        self.range(buffer, from, bytes)?;
        self.range(buffer, to, bytes)?;
        if bytes == 0 || from == to {
            return Ok(());
        }
        let n =
            usize::try_from(bytes).map_err(|_| Self::err(format!("cannot copy {bytes} bytes")))?;
        let base = self.buffers[buffer.0].ptr;
        let (src, dst) = (base + from, base + to);
        if from.abs_diff(to) < bytes {
            let tmp = self.dev.scratch(n).map_err(|e| Self::err(e.to_string()))?;
            self.dev.copy_bytes(tmp, src, n).map_err(Self::sync_err)?;
            self.dev.copy_bytes(dst, tmp, n).map_err(Self::sync_err)
        } else {
            self.dev.copy_bytes(dst, src, n).map_err(Self::sync_err)
        }
    }

    fn run_kernel(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<(), ExecError> {
        // Kernels index device memory from the shapes and read each operand as the dtype
        // its slot declares: an unchecked operand would be an out-of-bounds access on the
        // device, not a panic. (The executor checked them too.)
        crate::shapes::check(kernel, inputs, outputs)
            .map_err(|error| Self::kernel_err(kernel, error))?;
        if crate::widening::run_widened(self, kernel, inputs, outputs)? {
            return Ok(());
        }
        let stored = inputs
            .iter()
            .map(|o| self.address(o))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = outputs
            .iter()
            .map(|o| self.address(o))
            .collect::<Result<Vec<_>, _>>()?;
        let mut ins = Vec::with_capacity(inputs.len());
        for (i, (o, &at)) in inputs.iter().zip(&stored).enumerate() {
            // A parameter written in place is never a view (its copy would be written).
            if i == 0 && kernel.writes_first_input() && o.view.is_some() {
                return Err(Self::err(format!("{}: writes a view", kernel.name())));
            }
            let read = shape::materialize(&mut self.dev, o, at, i)
                .map_err(|error| Self::kernel_err(kernel, error))?;
            ins.push(read);
        }
        let io = Io {
            ins: &ins,
            outs: &outs,
            ops_in: inputs,
            ops_out: outputs,
        };
        run(kernel, &mut self.dev, io).map_err(|error| Self::kernel_err(kernel, error))
    }

    fn synchronize(&mut self) -> Result<(), ExecError> {
        self.dev.engine().synchronize().map_err(Self::sync_err)
    }

    type Mark = Event;

    const CLOCK: &'static str = "CUDA events";

    /// An event recorded on the compute stream, with timing on.
    fn mark(&mut self) -> Result<Event, ExecError> {
        self.dev.engine().mark().map_err(Self::sync_err)
    }

    fn seconds_between(&mut self, from: &Event, to: &Event) -> Result<f64, ExecError> {
        self.dev
            .engine()
            .seconds_between(from, to)
            .map_err(Self::sync_err)
    }

    fn memory(&self) -> AllocStats {
        self.stats
    }

    /// An event recorded on the copy's stream after it.
    type CopyDone = Event;

    fn alloc_host_pool(&mut self, bytes: u64) -> Result<(), ExecError> {
        if self.dev.host_pool_bytes() > 0 {
            return Err(Self::err("the host pool is made once"));
        }
        let size = usize::try_from(bytes)
            .map_err(|_| Self::err(format!("cannot allocate {bytes} host bytes")))?;
        self.dev
            .engine()
            .alloc_host_pool(size)
            .map_err(|e| Self::err(format!("cannot allocate {bytes} pinned host bytes: {e}")))
    }

    fn host_pool_bytes(&self) -> u64 {
        self.dev.host_pool_bytes() as u64
    }

    fn offload(&mut self, copy: &HostCopy) -> Result<Event, ExecError> {
        let (src, host_offset, bytes) = self.host_copy(copy)?;
        self.dev
            .engine()
            .host_copy(true, src, host_offset, bytes)
            .map_err(Self::sync_err)
    }

    fn fetch(&mut self, copy: &HostCopy) -> Result<Event, ExecError> {
        let (dst, host_offset, bytes) = self.host_copy(copy)?;
        self.dev
            .engine()
            .host_copy(false, dst, host_offset, bytes)
            .map_err(Self::sync_err)
    }

    fn wait_copy(&mut self, done: &Event) -> Result<(), ExecError> {
        self.dev.engine().wait(done).map_err(Self::sync_err)
    }
}

/// The dispatch: each family's kernels run in the module of the family's name.
fn run(k: &Kernel, d: &mut Device, io: Io) -> R {
    match k.op() {
        FamilyKernel::Linalg(k) => linalg::run(k, d, io),
        FamilyKernel::Elementwise(k) => elementwise::run(k, d, io),
        FamilyKernel::Math(k) => math::run(k, d, io),
        FamilyKernel::Conv(k) => conv::run(k, d, io),
        FamilyKernel::Pool(k) => pool::run(k, d, io),
        FamilyKernel::Norm(k) => norm::run(k, d, io),
        FamilyKernel::Loss(k) => loss::run(k, d, io),
        FamilyKernel::Embedding(k) => embedding::run(k, d, io),
        FamilyKernel::Shape(k) => shape::run(k, d, io),
        FamilyKernel::Reduce(k) => reduce::run(k, d, io),
        FamilyKernel::Random(k) => random::run(k, d, io),
        FamilyKernel::Attention(k) => attention::run(k, d, io),
    }
}
