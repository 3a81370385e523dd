//! The real device: a cudarc context and stream, the kernels compiled by NVRTC for the
//! device's architecture ([`super::loader`]) and loaded as one module, cuBLAS on the same
//! stream, and the offloads' pinned host pool ([`super::host_pool`]).

use super::host_pool::HostPool;
use super::{loader, sources, Arg, DimsArg, Engine, Event, EventOf, Sgemm, BLOCK, R};
use crate::error::{ExecError, KernelError};
use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::result::{memcpy_dtod_async, memcpy_dtoh_async, memcpy_htod_async};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr,
    DeviceRepr, LaunchConfig, PushKernelArg,
};
use std::collections::HashMap;
use std::sync::Arc;

// SAFETY: plain `repr(C)` integers, the layout of the C struct it is passed as.
unsafe impl DeviceRepr for DimsArg {}

/// A CUDA event (a timing mark, or a copy's end).
pub(super) type GpuEvent = CudaEvent;

/// One CUDA device with the compiled kernels.
pub(super) struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    funcs: HashMap<&'static str, CudaFunction>,
    /// Every live allocation by its address.
    memory: HashMap<u64, CudaSlice<u8>>,
    host: Option<HostPool>,
    _module: Arc<CudaModule>,
}

fn driver(what: &str, e: impl std::fmt::Display) -> ExecError {
    ExecError::CudaUnavailable(format!("{what}: {e}"))
}

fn op(t: bool) -> blas_sys::cublasOperation_t {
    if t {
        blas_sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        blas_sys::cublasOperation_t::CUBLAS_OP_N
    }
}

fn event(e: &Event) -> Result<&CudaEvent, KernelError> {
    match &e.0 {
        EventOf::Gpu(e) => Ok(e),
        EventOf::Emu(_) => Err(KernelError::device("an event", "of another engine")),
    }
}

impl Gpu {
    /// Opens device `ordinal`: checks that the driver, NVRTC and cuBLAS load, that the
    /// device exists, compiles and loads the kernels, creates the cuBLAS handle. Any
    /// failure is [`ExecError::CudaUnavailable`] saying why, never a panic.
    pub(super) fn open(ordinal: usize) -> Result<Gpu, ExecError> {
        loader::check_libraries()?;
        // cudarc panics on a symbol missing from an old driver; report it as an error too.
        std::panic::catch_unwind(|| Gpu::open_checked(ordinal)).map_err(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            ExecError::CudaUnavailable(format!("CUDA initialisation failed: {msg}"))
        })?
    }

    fn open_checked(ordinal: usize) -> Result<Gpu, ExecError> {
        let count = CudaContext::device_count().map_err(|e| driver("CUDA driver", e))?;
        if count <= 0 {
            return Err(ExecError::CudaUnavailable("no CUDA device".to_string()));
        }
        if ordinal >= count as usize {
            return Err(ExecError::CudaUnavailable(format!(
                "no CUDA device {ordinal} ({count} present)"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| driver("creating the context", e))?;
        // SAFETY: one compute stream; the copy streams are ordered by explicit events
        // (`host_pool`), so cudarc's cross-stream event tracking is not needed; buffers are
        // freed in stream order.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| driver("compute capability", e))?;
        let cubin = loader::cubin(major, minor)?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .map_err(|e| driver("loading the kernels", e))?;
        let mut funcs = HashMap::new();
        for (name, _) in sources::signatures() {
            let f = module
                .load_function(name)
                .map_err(|e| driver(&format!("kernel `{name}`"), e))?;
            funcs.insert(name.as_str(), f);
        }
        let blas = CudaBlas::new(stream.clone()).map_err(|e| driver("cuBLAS", e))?;
        Ok(Gpu {
            ctx,
            stream,
            blas,
            funcs,
            memory: HashMap::new(),
            host: None,
            _module: module,
        })
    }

    fn bind(&self) -> R {
        self.ctx
            .bind_to_thread()
            .map_err(|e| KernelError::device("binding the context", e))
    }
}

impl Engine for Gpu {
    fn describe(&self) -> String {
        self.ctx
            .name()
            .unwrap_or_else(|_| "unknown device".to_string())
    }

    fn alloc(&mut self, bytes: usize, zeroed: bool) -> Result<u64, KernelError> {
        self.bind()?;
        let size = bytes.max(1);
        let mem = if zeroed {
            self.stream.alloc_zeros::<u8>(size)
        } else {
            // SAFETY: a workspace every user writes before reading.
            unsafe { self.stream.alloc::<u8>(size) }
        }
        .map_err(|e| KernelError::device(format!("allocating {bytes} bytes"), e))?;
        let ptr = {
            let (ptr, _sync) = mem.device_ptr(&self.stream);
            ptr
        };
        self.memory.insert(ptr, mem);
        Ok(ptr)
    }

    fn free(&mut self, ptr: u64) -> R {
        // The allocation is freed on the stream (cudarc's `Drop` for a stream-ordered slice).
        self.memory.remove(&ptr);
        Ok(())
    }

    fn write(&mut self, dst: u64, data: &[u8]) -> R {
        self.bind()?;
        // SAFETY: the backend checked `dst..dst + data.len()` against its buffer; the copy
        // is waited for below, so `data` outlives it.
        unsafe { memcpy_htod_async(dst, data, self.stream.cu_stream()) }
            .map_err(|e| KernelError::device("copying to the device", e))?;
        self.synchronize()
    }

    fn read(&mut self, src: u64, out: &mut [u8]) -> R {
        self.bind()?;
        // SAFETY: the backend checked `src..src + out.len()` against its buffer; the copy
        // is queued after the stream's work and waited for below, so `out` outlives it.
        unsafe { memcpy_dtoh_async(out, src, self.stream.cu_stream()) }
            .map_err(|e| KernelError::device("copying to the host", e))?;
        self.synchronize()
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> R {
        self.bind()?;
        // SAFETY: the caller passes ranges of `bytes` bytes inside live allocations (checked
        // operands or workspaces); the copy is queued on the one stream, in order.
        unsafe { memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .map_err(|e| KernelError::device("copying on the device", e))
    }

    fn launch(&self, name: &'static str, blocks: u32, args: &[Arg]) -> R {
        self.bind()?;
        let f = self
            .funcs
            .get(name)
            .ok_or_else(|| KernelError::device(format!("kernel `{name}`"), "not loaded"))?;
        let mut b = self.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(v) => b.arg(v),
                Arg::I64(v) => b.arg(v),
                Arg::I32(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
                Arg::F64(v) => b.arg(v),
                Arg::Dims(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernel's C parameters (checked by the caller
        // against its declaration in the sources); every pointer was bounds-checked by the
        // backend for the extent the kernel addresses.
        unsafe { b.launch(cfg) }
            .map_err(|e| KernelError::device(format!("launching `{name}`"), e))?;
        Ok(())
    }

    fn sgemm(&self, g: &Sgemm) -> R {
        self.bind()?;
        let alpha = 1.0f32;
        // SAFETY: the caller passes pointers to operands whose bounds the backend checked
        // for these dimensions and strides; alpha/beta are host scalars (the handle's
        // default pointer mode).
        unsafe {
            blas::sgemm_strided_batched(
                *self.blas.handle(),
                op(g.trans_a),
                op(g.trans_b),
                g.m,
                g.n,
                g.k,
                &alpha,
                g.a as *const f32,
                g.lda,
                g.stride_a,
                g.b as *const f32,
                g.ldb,
                g.stride_b,
                &g.beta,
                g.c as *mut f32,
                g.ldc,
                g.stride_c,
                g.batch,
            )
        }
        .map_err(|e| KernelError::device("cuBLAS sgemm", e))
    }

    fn synchronize(&mut self) -> R {
        self.stream
            .synchronize()
            .map_err(|e| KernelError::device("synchronising", e))
    }

    /// An event recorded on the stream, with timing on (cudarc's default disables it).
    fn mark(&mut self) -> Result<Event, KernelError> {
        let e = self
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| KernelError::device("recording an event", e))?;
        Ok(Event(EventOf::Gpu(e)))
    }

    fn seconds_between(&mut self, from: &Event, to: &Event) -> Result<f64, KernelError> {
        let ms = event(from)?
            .elapsed_ms(event(to)?)
            .map_err(|e| KernelError::device("timing events", e))?;
        Ok(f64::from(ms) / 1e3)
    }

    fn alloc_host_pool(&mut self, bytes: usize) -> R {
        self.bind()?;
        let pool = HostPool::new(&self.ctx, bytes)
            .map_err(|e| KernelError::device(format!("allocating {bytes} pinned host bytes"), e))?;
        self.host = Some(pool);
        Ok(())
    }

    fn host_pool_bytes(&self) -> usize {
        self.host.as_ref().map_or(0, HostPool::len)
    }

    fn host_copy(
        &mut self,
        to_host: bool,
        device: u64,
        host_offset: usize,
        bytes: usize,
    ) -> Result<Event, KernelError> {
        let pool = self
            .host
            .as_ref()
            .ok_or_else(|| KernelError::device("a host copy", "no host pool"))?;
        let e = pool
            .copy(&self.stream, to_host, device, host_offset, bytes)
            .map_err(|e| KernelError::device("a host copy", e))?;
        Ok(Event(EventOf::Gpu(e)))
    }

    fn wait(&mut self, done: &Event) -> R {
        self.stream
            .wait(event(done)?)
            .map_err(|e| KernelError::device("waiting for a copy", e))
    }
}
