//! The device side: the context, stream, loaded kernels and cuBLAS handle, and the three
//! primitives the op files build on: [`Device::launch`] (a kernel by name, its arguments
//! checked against [`sources::signatures`]), [`Device::gemm`] (row-major strided-batched
//! SGEMM through cuBLAS) and [`Device::scratch`] (an internal workspace, e.g. im2col).
//!
//! Everything is queued on one stream, so kernels run in launch order; with one stream and
//! a fixed launch configuration, cuBLAS and the kernels give the same bits every run.

use super::{loader, sources};
use crate::error::ExecError;
use crate::error::KernelError;
use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    LaunchConfig, PushKernelArg,
};
use sources::{ParamKind, BLOCK, MAX_RANK};
use std::collections::HashMap;
use std::sync::Arc;

/// Result of an op function: the error says what failed (the caller adds the kernel).
pub(crate) type R = Result<(), KernelError>;

/// At most this many blocks per launch; every kernel loops (grid-stride or over rows), so
/// any size is covered.
const MAX_BLOCKS: usize = 1 << 20;

/// A kernel argument, passed by value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg {
    Ptr(u64),
    I64(i64),
    I32(i32),
    F32(f32),
    Dims(DimsArg),
}

/// The prelude's `struct Dims` (`transpose`): same fields, same C layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DimsArg {
    pub rank: i64,
    pub out_shape: [i64; MAX_RANK],
    pub src_strides: [i64; MAX_RANK],
}

// SAFETY: plain `repr(C)` integers, the layout of the C struct it is passed as.
unsafe impl DeviceRepr for DimsArg {}

impl Arg {
    fn kind(&self) -> ParamKind {
        match self {
            Arg::Ptr(_) => ParamKind::Ptr,
            Arg::I64(_) => ParamKind::I64,
            Arg::I32(_) => ParamKind::I32,
            Arg::F32(_) => ParamKind::F32,
            Arg::Dims(_) => ParamKind::Dims,
        }
    }
}

/// A size as a kernel's `i64` argument.
pub(crate) fn n(v: usize) -> Arg {
    Arg::I64(v as i64)
}

/// How many blocks a launch needs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Grid {
    /// Grid-stride over this many elements.
    Elements(usize),
    /// One block per row (or channel, or plane).
    Rows(usize),
    /// A single block.
    One,
}

impl Grid {
    fn blocks(self) -> usize {
        match self {
            Grid::Elements(e) => e.div_ceil(BLOCK as usize).min(MAX_BLOCKS),
            Grid::Rows(r) => r.min(MAX_BLOCKS),
            Grid::One => 1,
        }
    }
}

/// A row-major product `C[m, n] = op(A) @ op(B) + beta * C`, `batch` times at the given
/// element strides. `op(A)` is `m x k`, stored `m x k` (or `k x m` when `trans_a`);
/// `op(B)` is `k x n`, stored `k x n` (or `n x k` when `trans_b`); `C` is contiguous.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: u64,
    pub trans_a: bool,
    pub b: u64,
    pub trans_b: bool,
    pub c: u64,
    pub beta: f32,
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
}

fn int(v: usize, what: &str) -> Result<i32, KernelError> {
    i32::try_from(v)
        .map_err(|_| KernelError::Operands(format!("{what} = {v} is too large for cuBLAS")))
}

fn op(t: bool) -> blas_sys::cublasOperation_t {
    if t {
        blas_sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        blas_sys::cublasOperation_t::CUBLAS_OP_N
    }
}

/// One CUDA device with the compiled kernels.
pub(crate) struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    blas: CudaBlas,
    funcs: HashMap<&'static str, CudaFunction>,
    scratch: Option<CudaSlice<u8>>,
    staging: HashMap<usize, CudaSlice<u8>>,
    /// Runs so far of each random op (by its seed): the stream position of its next draw.
    pub(crate) draws: HashMap<u64, u64>,
    flag: CudaSlice<i32>,
    _module: Arc<CudaModule>,
}

fn driver(what: &str, e: impl std::fmt::Display) -> ExecError {
    ExecError::CudaUnavailable(format!("{what}: {e}"))
}

impl Device {
    /// Opens device `ordinal` (the libraries were checked loadable), compiles and loads
    /// the kernels, creates the cuBLAS handle.
    pub(crate) fn open(ordinal: usize) -> Result<Device, ExecError> {
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
        // SAFETY: one stream only, so cudarc's cross-stream event tracking is not needed;
        // buffers are freed in stream order (or after a synchronize, see `scratch`).
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
        let flag = stream
            .alloc_zeros::<i32>(1)
            .map_err(|e| driver("allocating the error flag", e))?;
        Ok(Device {
            ctx,
            stream,
            blas,
            funcs,
            scratch: None,
            staging: HashMap::new(),
            draws: HashMap::new(),
            flag,
            _module: module,
        })
    }

    /// Device address of the first byte of `mem`.
    pub(crate) fn address<T>(&self, mem: &CudaSlice<T>) -> u64 {
        let (p, _sync) = mem.device_ptr(&self.stream);
        p
    }

    /// Device address of the index-error flag (an `int`, 0 while no kernel saw a bad index).
    pub(crate) fn flag(&self) -> Arg {
        Arg::Ptr(self.address(&self.flag))
    }

    /// Errors (and clears the flag) if a kernel since the last check saw an index out of
    /// range; waits for the queued kernels.
    pub(crate) fn check_flag(&mut self) -> R {
        let v = self
            .stream
            .clone_dtoh(&self.flag)
            .map_err(|e| KernelError::device("reading the index-error flag", e))?;
        self.stream
            .synchronize()
            .map_err(|e| KernelError::device("synchronising", e))?;
        if v.first().is_some_and(|&f| f != 0) {
            self.stream
                .memset_zeros(&mut self.flag)
                .map_err(|e| KernelError::device("clearing the index-error flag", e))?;
            return Err(KernelError::Operands(
                "an index (id or label) is outside its range".to_string(),
            ));
        }
        Ok(())
    }

    /// Launches kernel `name` over `grid` with `args`, which must match its signature.
    pub(crate) fn launch(&self, name: &'static str, grid: Grid, args: &[Arg]) -> R {
        let blocks = grid.blocks();
        if blocks == 0 {
            return Ok(());
        }
        let kinds: Vec<ParamKind> = args.iter().map(Arg::kind).collect();
        if sources::signature(name) != Some(kinds.as_slice()) {
            return Err(KernelError::Operands(format!(
                "kernel `{name}` launched with arguments {kinds:?}, expected {:?}",
                sources::signature(name)
            )));
        }
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
                Arg::Dims(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernel's C parameters (checked above against
        // its declaration in the sources); every
        // pointer was bounds-checked by the backend for the extent the kernel addresses.
        unsafe { b.launch(cfg) }
            .map_err(|e| KernelError::device(format!("launching `{name}`"), e))?;
        Ok(())
    }

    /// Runs `g` through cuBLAS. cuBLAS is column-major: the row-major `C = op(A) op(B)` is
    /// the column-major `C^T = op(B)^T op(A)^T`, so the operands swap and `m`, `n` swap.
    pub(crate) fn gemm(&self, g: &Gemm) -> R {
        if g.m == 0 || g.n == 0 || g.batch == 0 {
            return Ok(());
        }
        let mn = g.m * g.n;
        if g.k == 0 {
            if g.beta == 0.0 {
                let args = [Arg::Ptr(g.c), n(mn * g.batch)];
                return self.launch("fill_zero", Grid::Elements(mn * g.batch), &args);
            }
            return Ok(());
        }
        let (m, nn, k) = (int(g.m, "m")?, int(g.n, "n")?, int(g.k, "k")?);
        let lda = if g.trans_b { k } else { nn };
        let ldb = if g.trans_a { m } else { k };
        let (alpha, beta) = (1.0f32, g.beta);
        // SAFETY: the caller passes pointers to operands whose bounds the backend checked
        // for these dimensions and strides; alpha/beta are host scalars (the handle's
        // default pointer mode).
        unsafe {
            blas::sgemm_strided_batched(
                *self.blas.handle(),
                op(g.trans_b),
                op(g.trans_a),
                nn,
                m,
                k,
                &alpha,
                g.b as *const f32,
                lda,
                g.stride_b as i64,
                g.a as *const f32,
                ldb,
                g.stride_a as i64,
                &beta,
                g.c as *mut f32,
                nn,
                mn as i64,
                int(g.batch, "batch")?,
            )
        }
        .map_err(|e| KernelError::device("cuBLAS sgemm", e))
    }

    /// Address of an internal workspace of at least `bytes` bytes (grown on demand, not
    /// counted in the allocator's statistics, like the CPU backend's im2col buffer).
    pub(crate) fn scratch(&mut self, bytes: usize) -> Result<u64, KernelError> {
        let mut mem = self.scratch.take();
        let grown = self.grow(&mut mem, bytes);
        self.scratch = mem;
        grown
    }

    /// Address of staging buffer `slot` of at least `bytes` bytes: like [`Device::scratch`],
    /// one per slot, so that a materialised view ([`super::launch::view_slot`]) or a
    /// kernel's gathered operand ([`super::launch::KERNEL_SLOTS`]) lives beside the
    /// im2col workspace.
    pub(crate) fn staging(&mut self, slot: usize, bytes: usize) -> Result<u64, KernelError> {
        let mut mem = self.staging.remove(&slot);
        let grown = self.grow(&mut mem, bytes);
        if let Some(m) = mem {
            self.staging.insert(slot, m);
        }
        grown
    }

    /// Grows `mem` to at least `bytes` bytes; its address.
    fn grow(&mut self, mem: &mut Option<CudaSlice<u8>>, bytes: usize) -> Result<u64, KernelError> {
        let have = mem.as_ref().map_or(0, |s| s.len());
        if have < bytes.max(1) {
            // The old workspace may still be read by queued kernels.
            self.stream
                .synchronize()
                .map_err(|e| KernelError::device("synchronising", e))?;
            *mem = None;
            // SAFETY: a workspace every user writes before reading.
            let fresh = unsafe { self.stream.alloc::<u8>(bytes.max(1)) }.map_err(|e| {
                KernelError::device(format!("allocating a {bytes}-byte workspace"), e)
            })?;
            *mem = Some(fresh);
        }
        let m = mem
            .as_ref()
            .ok_or_else(|| KernelError::device("the workspace", "missing"))?;
        Ok(self.address(m))
    }

    /// Copies `bytes` bytes from device address `src` to `dst` (ranges that do not overlap)
    /// on the stream.
    pub(crate) fn copy_bytes(&self, dst: u64, src: u64, bytes: usize) -> R {
        if bytes == 0 || dst == src {
            return Ok(());
        }
        // SAFETY: the caller passes ranges of `bytes` bytes inside live allocations (checked
        // operands or workspaces); the copy is queued on the one stream, in order.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream())
        }
        .map_err(|e| KernelError::device("copying on the device", e))
    }
}

/// An index operand: its address and whether it holds i64 (else i32).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Idx {
    pub ptr: u64,
    pub is_i64: bool,
}

impl Idx {
    /// The index operand `op` at device address `ptr`.
    pub(crate) fn of(op: &crate::backend::Operand, ptr: u64) -> Idx {
        Idx {
            ptr,
            is_i64: op.dtype == sgc_ir::DType::I64,
        }
    }

    pub(crate) fn args(self) -> [Arg; 2] {
        [Arg::Ptr(self.ptr), Arg::I32(self.is_i64 as i32)]
    }
}
