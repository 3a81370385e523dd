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

use super::device::{Device, R};
use super::host_pool::HostPool;
use super::launch::Io;
use super::{
    attention, conv, elementwise, embedding, linalg, loader, loss, norm, pool, random, reduce,
    shape,
};
use crate::backend::{AllocStats, Backend, BufferId, HostCopy, Operand};
use crate::error::{ExecError, KernelError};
use crate::kernel::{FamilyKernel, Kernel};
use cudarc::driver::result::memcpy_dtod_async;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice};

const NAME: &str = "cuda";

/// One allocation: the device memory, its address and its requested size.
struct Buffer {
    mem: CudaSlice<u8>,
    ptr: u64,
    len: u64,
}

/// A CUDA device running the executor's kernels; see the [module docs](self).
pub struct CudaBackend {
    buffers: Vec<Buffer>,
    stats: AllocStats,
    name: String,
    /// Offloads' pinned host pool and copy streams ([`Backend::alloc_host_pool`]).
    host: Option<HostPool>,
    dev: Device,
}

impl CudaBackend {
    /// Opens CUDA device `ordinal`: checks that the driver, NVRTC and cuBLAS load, that the
    /// device exists, compiles the kernels for it. Any failure is
    /// [`ExecError::CudaUnavailable`] saying why, never a panic.
    pub fn new(ordinal: usize) -> Result<Self, ExecError> {
        loader::check_libraries()?;
        // cudarc panics on a symbol missing from an old driver; report it as an error too.
        let opened = std::panic::catch_unwind(|| Device::open(ordinal)).map_err(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            ExecError::CudaUnavailable(format!("CUDA initialisation failed: {msg}"))
        })??;
        let device = opened
            .ctx
            .name()
            .unwrap_or_else(|_| "unknown device".to_string());
        Ok(CudaBackend {
            buffers: Vec::new(),
            stats: AllocStats::default(),
            name: format!("{NAME}:{ordinal} ({device})"),
            host: None,
            dev: opened,
        })
    }

    fn kernel_err(kernel: &Kernel, error: KernelError) -> ExecError {
        ExecError::Kernel {
            backend: NAME.to_string(),
            kernel: kernel.name(),
            error: Box::new(error),
        }
    }

    fn err(detail: impl Into<String>) -> ExecError {
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
    fn address(&self, op: &Operand) -> Result<u64, ExecError> {
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

    /// The pool and, for `copy`, its device address and host offset and length, checked
    /// against the buffer and the pool.
    fn host_copy(&self, copy: &HostCopy) -> Result<(&HostPool, u64, usize, usize), ExecError> {
        self.range(copy.buffer, copy.offset, copy.bytes)?;
        let pool = self
            .host
            .as_ref()
            .ok_or_else(|| Self::err("a copy to the host pool before the pool was made"))?;
        let end = copy.host_offset.checked_add(copy.bytes);
        if end.is_none_or(|e| e > pool.len() as u64) {
            return Err(Self::err(format!(
                "host bytes {}..+{} are outside the host pool ({} bytes)",
                copy.host_offset,
                copy.bytes,
                pool.len()
            )));
        }
        let address = self.buffers[copy.buffer.0].ptr + copy.offset;
        Ok((
            pool,
            address,
            copy.host_offset as usize,
            copy.bytes as usize,
        ))
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

    fn alloc(&mut self, bytes: u64) -> Result<BufferId, ExecError> {
        let size = usize::try_from(bytes)
            .map_err(|_| Self::err(format!("cannot allocate {bytes} bytes")))?;
        self.dev.ctx.bind_to_thread().map_err(Self::sync_err)?;
        let mem = self
            .dev
            .stream
            .alloc_zeros::<u8>(size.max(1))
            .map_err(|e| Self::err(format!("cannot allocate {bytes} bytes: {e}")))?;
        let ptr = self.dev.address(&mem);
        self.buffers.push(Buffer {
            mem,
            ptr,
            len: bytes,
        });
        self.stats.allocated_bytes += bytes;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.allocated_bytes);
        self.stats.allocations += 1;
        Ok(BufferId(self.buffers.len() - 1))
    }

    fn write(&mut self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<(), ExecError> {
        let (start, end) = self.range(buffer, offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        self.dev.ctx.bind_to_thread().map_err(Self::sync_err)?;
        let mut dst = self.buffers[buffer.0].mem.slice_mut(start..end);
        self.dev
            .stream
            .memcpy_htod(data, &mut dst)
            .map_err(Self::sync_err)?;
        self.dev.stream.synchronize().map_err(Self::sync_err)
    }

    fn read(&mut self, buffer: BufferId, offset: u64, out: &mut [u8]) -> Result<(), ExecError> {
        let (start, end) = self.range(buffer, offset, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        self.dev.ctx.bind_to_thread().map_err(Self::sync_err)?;
        let src = self.buffers[buffer.0].mem.slice(start..end);
        self.dev
            .stream
            .memcpy_dtoh(&src, out)
            .map_err(Self::sync_err)?;
        self.dev.stream.synchronize().map_err(Self::sync_err)
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
        self.dev.ctx.bind_to_thread().map_err(Self::sync_err)?;
        let base = self.buffers[buffer.0].ptr;
        let stream = self.dev.stream.cu_stream();
        let staged = if from.abs_diff(to) < bytes {
            Some(self.dev.scratch(n).map_err(|e| Self::err(e.to_string()))?)
        } else {
            None
        };
        // SAFETY: both ranges were checked to lie inside the buffer's allocation, which
        // lives as long as the backend; the workspace holds at least `n` bytes; every copy
        // is queued on the one stream, in order.
        unsafe {
            match staged {
                Some(tmp) => {
                    memcpy_dtod_async(tmp, base + from, n, stream).map_err(Self::sync_err)?;
                    memcpy_dtod_async(base + to, tmp, n, stream).map_err(Self::sync_err)?;
                }
                None => {
                    memcpy_dtod_async(base + to, base + from, n, stream).map_err(Self::sync_err)?
                }
            }
        }
        Ok(())
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
        let stored = inputs
            .iter()
            .map(|o| self.address(o))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = outputs
            .iter()
            .map(|o| self.address(o))
            .collect::<Result<Vec<_>, _>>()?;
        self.dev.ctx.bind_to_thread().map_err(Self::sync_err)?;
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
        self.dev.stream.synchronize().map_err(Self::sync_err)
    }

    type Mark = CudaEvent;

    const CLOCK: &'static str = "CUDA events";

    /// An event recorded on the stream, with timing on (cudarc's default disables it).
    fn mark(&mut self) -> Result<CudaEvent, ExecError> {
        self.dev
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(Self::sync_err)
    }

    fn seconds_between(&mut self, from: &CudaEvent, to: &CudaEvent) -> Result<f64, ExecError> {
        let ms = from.elapsed_ms(to).map_err(Self::sync_err)?;
        Ok(f64::from(ms) / 1e3)
    }

    fn memory(&self) -> AllocStats {
        self.stats
    }

    /// An event recorded on the copy's stream after it.
    type CopyDone = CudaEvent;

    fn alloc_host_pool(&mut self, bytes: u64) -> Result<(), ExecError> {
        if self.host.is_some() {
            return Err(Self::err("the host pool is made once"));
        }
        let size = usize::try_from(bytes)
            .map_err(|_| Self::err(format!("cannot allocate {bytes} host bytes")))?;
        self.dev.ctx.bind_to_thread().map_err(Self::sync_err)?;
        let pool = HostPool::new(&self.dev.ctx, size)
            .map_err(|e| Self::err(format!("cannot allocate {bytes} pinned host bytes: {e}")))?;
        self.host = Some(pool);
        Ok(())
    }

    fn host_pool_bytes(&self) -> u64 {
        self.host.as_ref().map_or(0, |h| h.len() as u64)
    }

    fn offload(&mut self, copy: &HostCopy) -> Result<CudaEvent, ExecError> {
        let (pool, src, host_offset, bytes) = self.host_copy(copy)?;
        let stream = &self.dev.stream;
        pool.copy(stream, true, src, host_offset, bytes)
            .map_err(Self::sync_err)
    }

    fn fetch(&mut self, copy: &HostCopy) -> Result<CudaEvent, ExecError> {
        let (pool, dst, host_offset, bytes) = self.host_copy(copy)?;
        let stream = &self.dev.stream;
        pool.copy(stream, false, dst, host_offset, bytes)
            .map_err(Self::sync_err)
    }

    fn wait_copy(&mut self, done: &CudaEvent) -> Result<(), ExecError> {
        self.dev.stream.wait(done).map_err(Self::sync_err)
    }
}

/// The dispatch: each family's kernels run in the module of the family's name.
fn run(k: &Kernel, d: &mut Device, io: Io) -> R {
    match k.op() {
        FamilyKernel::Linalg(k) => linalg::run(k, d, io),
        FamilyKernel::Elementwise(k) => elementwise::run(k, d, io),
        FamilyKernel::Math(_) => Err(crate::error::KernelError::Operands(
            "the math functions run on the CPU backend only (their KINDS rows say so)".to_string(),
        )),
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
