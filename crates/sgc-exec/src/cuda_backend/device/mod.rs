//! The device layer: everything the CUDA backend asks of a device, behind one type
//! ([`Device`]) that the op files and `runtime.rs` use, over one of two engines:
//!
//! - [`gpu`]: a real device through cudarc (the driver, NVRTC-compiled kernels, cuBLAS,
//!   a pinned host pool and copy streams for offloads); the only place that names cudarc,
//!   with [`loader`] (are the libraries there; the kernels' CUBIN) and [`host_pool`].
//! - [`emu`]: the emulated device, a test tool selected by `SGC_CUDA=emulate` and never in
//!   place of a missing GPU: the same kernel sources compiled for the host (build.rs,
//!   `emu/grid.cpp`), cuBLAS's column-major SGEMM contract checked and computed on the
//!   host, and streams that are hostile about ordering (see its docs).
//!
//! The primitives the op files build on are the same for both: [`Device::launch`] (a
//! kernel by name, its arguments checked against [`sources::signatures`]),
//! [`Device::gemm`] (row-major strided-batched SGEMM, turned here into cuBLAS's
//! column-major call, so that a wrong argument fails on either engine) and
//! [`Device::scratch`] / [`Device::staging`] (internal workspaces).
//!
//! Everything is queued on one compute stream, so kernels run in launch order; with one
//! stream and a fixed launch configuration, the same launch gives the same bits.

mod emu;
mod gpu;
mod host_pool;
mod loader;

use super::sources;
use crate::error::{ExecError, KernelError};
use sources::{ParamKind, BLOCK, MAX_RANK};
use std::collections::HashMap;

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
    F64(f64),
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

impl Arg {
    fn kind(&self) -> ParamKind {
        match self {
            Arg::Ptr(_) => ParamKind::Ptr,
            Arg::I64(_) => ParamKind::I64,
            Arg::I32(_) => ParamKind::I32,
            Arg::F32(_) => ParamKind::F32,
            Arg::F64(_) => ParamKind::F64,
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

/// cuBLAS's `sgemmStridedBatched` arguments, column-major, as the engine receives them:
/// `C = op(A) op(B) + beta * C` with `op(A)` `m x k`, leading dimensions and element
/// strides between the batch's problems.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sgemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub a: u64,
    pub lda: i32,
    pub stride_a: i64,
    pub b: u64,
    pub ldb: i32,
    pub stride_b: i64,
    pub beta: f32,
    pub c: u64,
    pub ldc: i32,
    pub stride_c: i64,
    pub batch: i32,
}

/// A point in a stream: a timing mark on the compute stream, or the end of a copy on a
/// copy stream ([`crate::backend::Backend::Mark`], [`crate::backend::Backend::CopyDone`]).
pub struct Event(EventOf);

enum EventOf {
    Gpu(gpu::GpuEvent),
    Emu(emu::EmuEvent),
}

/// What a device does for the backend. Addresses are device addresses (on the emulated
/// device, host addresses of its allocations); every operation but `write`, `read` and
/// `synchronize` is queued on a stream and may run later.
pub(crate) trait Engine {
    /// The device, in words.
    fn describe(&self) -> String;
    /// `bytes` (at least one) of device memory, zeroed when asked; its address.
    fn alloc(&mut self, bytes: usize, zeroed: bool) -> Result<u64, KernelError>;
    /// Frees the allocation at `ptr` once the work queued so far is done.
    fn free(&mut self, ptr: u64) -> R;
    /// Copies `data` to `dst` and waits for it.
    fn write(&mut self, dst: u64, data: &[u8]) -> R;
    /// Copies device bytes at `src` into `out` after the queued work, and waits for it.
    fn read(&mut self, src: u64, out: &mut [u8]) -> R;
    /// Queues a copy of `bytes` bytes between ranges that do not overlap.
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> R;
    /// Queues kernel `name` over `blocks` blocks of [`BLOCK`] threads; `args` were checked
    /// against its signature.
    fn launch(&self, name: &'static str, blocks: u32, args: &[Arg]) -> R;
    /// Queues one cuBLAS strided-batched SGEMM.
    fn sgemm(&self, g: &Sgemm) -> R;
    /// Waits for all queued work on every stream.
    fn synchronize(&mut self) -> R;
    /// A timing mark on the compute stream.
    fn mark(&mut self) -> Result<Event, KernelError>;
    /// Seconds between two marks.
    fn seconds_between(&mut self, from: &Event, to: &Event) -> Result<f64, KernelError>;
    /// Makes the offloads' host pool of `bytes` bytes and its copy streams (once).
    fn alloc_host_pool(&mut self, bytes: usize) -> R;
    /// Bytes of the host pool (0 before it is made).
    fn host_pool_bytes(&self) -> usize;
    /// Queues a copy between device address `device` and the pool at `host_offset` (to the
    /// host, or back) on its copy stream, after the compute stream's work so far; its end.
    fn host_copy(&mut self, to_host: bool, device: u64, host_offset: usize, bytes: usize)
        -> Result<Event, KernelError>;
    /// The compute stream waits for `done` before its later work.
    fn wait(&mut self, done: &Event) -> R;
}

/// The engine `SGC_CUDA` asks for: `emulate` (the emulated device), unset or `gpu` (a
/// real one); anything else is an error naming the values.
fn emulated_requested() -> Result<bool, ExecError> {
    match std::env::var("SGC_CUDA").as_deref() {
        Err(_) | Ok("" | "gpu") => Ok(false),
        Ok("emulate") => Ok(true),
        Ok(other) => Err(ExecError::CudaUnavailable(format!(
            "SGC_CUDA={other:?}: use `emulate` (the emulated CUDA device, a test tool) or `gpu` (the default)"
        ))),
    }
}

/// One CUDA device (real or emulated) with the compiled kernels.
pub(crate) struct Device {
    engine: Box<dyn Engine>,
    /// Device ordinal and engine, for the backend's name.
    pub(crate) label: String,
    scratch: Option<(u64, usize)>,
    staging: HashMap<usize, (u64, usize)>,
    /// Runs so far of each random op (by its seed): the stream position of its next draw.
    pub(crate) draws: HashMap<u64, u64>,
    flag: u64,
    /// Kernels and products queued so far (a launch that covers no block is not counted);
    /// the crate's tests read it.
    #[cfg(test)]
    launched: std::sync::atomic::AtomicU64,
}

impl Device {
    /// Opens device `ordinal` on the engine `SGC_CUDA` selects: a real one (the libraries
    /// checked loadable first, the kernels compiled for it), or the emulated one.
    pub(crate) fn open(ordinal: usize) -> Result<Device, ExecError> {
        Self::open_on(ordinal, emulated_requested()?)
    }

    /// Opens device `ordinal`, emulated or real.
    fn open_on(ordinal: usize, emulated: bool) -> Result<Device, ExecError> {
        let (mut engine, label): (Box<dyn Engine>, String) = if emulated {
            let e = emu::Emu::new(ordinal)?;
            let label = format!("cuda:{ordinal} ({}, SGC_CUDA=emulate)", e.describe());
            (Box::new(e), label)
        } else {
            let g = gpu::Gpu::open(ordinal)?;
            let label = format!("cuda:{ordinal} ({})", g.describe());
            (Box::new(g), label)
        };
        let flag = engine
            .alloc(4, true)
            .map_err(|e| ExecError::CudaUnavailable(format!("allocating the error flag: {e}")))?;
        Ok(Device {
            engine,
            label,
            scratch: None,
            staging: HashMap::new(),
            draws: HashMap::new(),
            flag,
            #[cfg(test)]
            launched: Default::default(),
        })
    }

    /// The emulated device `ordinal`, whatever `SGC_CUDA` says (for the crate's tests).
    #[cfg(test)]
    pub(crate) fn emulated(ordinal: usize) -> Result<Device, ExecError> {
        Self::open_on(ordinal, true)
    }

    /// Kernels and products queued so far.
    #[cfg(test)]
    pub(crate) fn launched(&self) -> u64 {
        self.launched.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts a launch (in the crate's tests only: nothing else reads the count).
    fn count_launch(&self) {
        #[cfg(test)]
        self.launched
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes of the offloads' host pool (0 before it is made).
    pub(crate) fn host_pool_bytes(&self) -> usize {
        self.engine.host_pool_bytes()
    }

    /// The engine, for `runtime.rs`'s buffers, copies and streams.
    pub(crate) fn engine(&mut self) -> &mut dyn Engine {
        self.engine.as_mut()
    }

    /// Device address of the index-error flag (an `int`, 0 while no kernel saw a bad index).
    pub(crate) fn flag(&self) -> Arg {
        Arg::Ptr(self.flag)
    }

    /// Errors (and clears the flag) if a kernel since the last check saw an index out of
    /// range; waits for the queued kernels.
    pub(crate) fn check_flag(&mut self) -> R {
        let mut v = [0u8; 4];
        self.engine.read(self.flag, &mut v)?;
        if i32::from_ne_bytes(v) != 0 {
            self.engine.write(self.flag, &[0; 4])?;
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
        self.count_launch();
        self.engine.launch(name, blocks as u32, args)
    }

    /// Runs `g`. cuBLAS is column-major: the row-major `C = op(A) op(B)` is the
    /// column-major `C^T = op(B)^T op(A)^T`, so the operands swap and `m`, `n` swap.
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
        self.count_launch();
        self.engine.sgemm(&Sgemm {
            trans_a: g.trans_b,
            trans_b: g.trans_a,
            m: nn,
            n: m,
            k,
            a: g.b,
            lda: if g.trans_b { k } else { nn },
            stride_a: g.stride_b as i64,
            b: g.a,
            ldb: if g.trans_a { m } else { k },
            stride_b: g.stride_a as i64,
            beta: g.beta,
            c: g.c,
            ldc: nn,
            stride_c: mn as i64,
            batch: int(g.batch, "batch")?,
        })
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

    /// Grows `mem` to at least `bytes` bytes (uninitialised: every user writes before
    /// reading); its address. The old one is freed in stream order: queued kernels may
    /// still read it.
    fn grow(&mut self, mem: &mut Option<(u64, usize)>, bytes: usize) -> Result<u64, KernelError> {
        let want = bytes.max(1);
        match *mem {
            Some((ptr, have)) if have >= want => Ok(ptr),
            old => {
                if let Some((ptr, _)) = old {
                    *mem = None;
                    self.engine.free(ptr)?;
                }
                let ptr = self.engine.alloc(want, false).map_err(|e| {
                    KernelError::device(format!("allocating a {bytes}-byte workspace"), e)
                })?;
                *mem = Some((ptr, want));
                Ok(ptr)
            }
        }
    }

    /// Copies `bytes` bytes from device address `src` to `dst` (ranges that do not overlap)
    /// on the stream.
    pub(crate) fn copy_bytes(&self, dst: u64, src: u64, bytes: usize) -> R {
        if bytes == 0 || dst == src {
            return Ok(());
        }
        self.engine.copy(dst, src, bytes)
    }
}

fn int(v: usize, what: &str) -> Result<i32, KernelError> {
    i32::try_from(v)
        .map_err(|_| KernelError::Operands(format!("{what} = {v} is too large for cuBLAS")))
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
