//! The emulated CUDA device: a test tool that runs the CUDA backend's own code (launchers,
//! argument packing, grid sizes, view staging, the GEMM's column-major arguments, the
//! offload copy schedule) on a machine without a GPU. Selected by `SGC_CUDA=emulate`
//! only; it is never chosen in place of a missing GPU.
//!
//! - **Kernels**: the same `kernels/*.cu` sources, compiled for the host by build.rs after
//!   `emu/cuda_host.h`; a launch runs every thread of every block on the calling thread
//!   (`emu/grid.cpp`: threads as fibers where the kernel has barriers), blocks and threads
//!   in descending order.
//! - **GEMM**: cuBLAS's `sgemmStridedBatched` contract, column-major: the leading
//!   dimensions are checked as cuBLAS checks them (`CUBLAS_STATUS_INVALID_VALUE`), and
//!   the product reads its operands through them, so a wrong argument gives a wrong result.
//! - **Memory**: device addresses are host addresses. Memory not asked zeroed is poisoned
//!   (`0xFF` bytes: NaN as f32, -1 as an integer), freed memory is poisoned again and never
//!   reused, and every allocation has a poisoned red zone after it, checked after each
//!   launch and copy: a read of uninitialised or freed memory shows in the results, a
//!   write past an allocation's end fails the launch.
//! - **Streams, hostile about ordering**: the compute stream runs each operation when it
//!   is queued; a copy to or from the host pool runs as late as the events allow, when
//!   the compute stream waits for it (or at a synchronisation). A missing wait reads the
//!   host pool's poison (a fetch) or a later state of device memory (an offload), instead
//!   of passing by luck.

use super::{Arg, Engine, Event, EventOf, Sgemm, BLOCK, R};
use crate::error::{ExecError, KernelError};
use std::alloc::Layout;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_void, CString};
use std::time::Instant;

extern "C" {
    /// `emu/grid.cpp` through the generated table: runs kernel `name`; 0 on success, 1 for
    /// a barrier in a kernel without shared memory, 2 when a fiber could not be made, 3 for
    /// an unknown kernel.
    fn sgc_emu_launch(name: *const c_char, blocks: u32, threads: u32, params: *mut *mut c_void) -> i32;
}

/// The poison byte of memory nothing has written.
const POISON: u8 = 0xFF;

/// Bytes of red zone after each allocation.
const RED_ZONE: usize = 256;

/// Alignment of every allocation (cudaMalloc's is at least 256 bytes).
const ALIGN: usize = 256;

/// A mark or a copy's end: its place in its stream.
pub(super) struct EmuEvent {
    /// The copy stream (0: to the host, 1: back) and the copy's number, for a copy's end.
    copy: Option<(usize, u64)>,
    at: Instant,
}

/// One allocation: its layout (for freeing) and the bytes asked for.
struct Allocation {
    layout: Layout,
    bytes: usize,
}

/// A copy between device memory and the host pool, queued on a copy stream.
struct HostCopy {
    number: u64,
    to_host: bool,
    device: u64,
    host_offset: usize,
    bytes: usize,
}

/// The emulated device; see the [module docs](self).
pub(super) struct Emu {
    live: HashMap<u64, Allocation>,
    /// Freed allocations, poisoned, kept until the device goes (never reused).
    freed: Vec<(u64, Allocation)>,
    host: Vec<u8>,
    /// The two copy streams' queued copies, in order.
    queued: [VecDeque<HostCopy>; 2],
    copies: u64,
}

fn fault(what: impl Into<String>) -> KernelError {
    KernelError::device("the emulated device", what.into())
}

impl Emu {
    pub(super) fn new(_ordinal: usize) -> Result<Emu, ExecError> {
        Ok(Emu {
            live: HashMap::new(),
            freed: Vec::new(),
            host: Vec::new(),
            queued: [VecDeque::new(), VecDeque::new()],
            copies: 0,
        })
    }

    /// Whether `ptr..ptr + len` lies inside one live allocation.
    fn inside(&self, ptr: u64, len: usize) -> bool {
        self.live
            .iter()
            .any(|(&base, a)| ptr >= base && ptr - base + len as u64 <= a.bytes as u64)
    }

    fn check_range(&self, ptr: u64, len: usize, what: &str) -> R {
        if len == 0 || self.inside(ptr, len) {
            Ok(())
        } else {
            Err(fault(format!("{what}: {len} bytes at {ptr:#x} are outside every live allocation")))
        }
    }

    /// Errors if any allocation's red zone was written.
    fn check_red_zones(&self, after: &str) -> R {
        for (&base, a) in &self.live {
            // SAFETY: each live allocation has `bytes + RED_ZONE` bytes from `base`.
            let zone = unsafe { std::slice::from_raw_parts((base as *const u8).add(a.bytes), RED_ZONE) };
            if zone.iter().any(|&b| b != POISON) {
                return Err(fault(format!(
                    "{after} wrote past the end of the {}-byte allocation at {base:#x}",
                    a.bytes
                )));
            }
        }
        Ok(())
    }

    /// Runs stream `s`'s queued copies up to and including copy `number` (all when `None`).
    fn drain(&mut self, s: usize, number: Option<u64>) -> R {
        while let Some(c) = self.queued[s].front() {
            if number.is_some_and(|n| c.number > n) {
                break;
            }
            let c = self.queued[s].pop_front().expect("a queued copy");
            self.run_copy(&c)?;
        }
        Ok(())
    }

    fn run_copy(&mut self, c: &HostCopy) -> R {
        self.check_range(c.device, c.bytes, "a host copy")?;
        let host = &mut self.host[c.host_offset..c.host_offset + c.bytes];
        // SAFETY: the device range lies inside a live allocation (checked above) and does
        // not overlap the host pool (a separate Vec).
        unsafe {
            let dev = c.device as *mut u8;
            if c.to_host {
                std::ptr::copy_nonoverlapping(dev, host.as_mut_ptr(), c.bytes);
            } else {
                std::ptr::copy_nonoverlapping(host.as_ptr(), dev, c.bytes);
            }
        }
        Ok(())
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        let all = self.live.drain().chain(self.freed.drain(..));
        for (base, a) in all.collect::<Vec<_>>() {
            // SAFETY: allocated in `alloc` with this layout, freed once.
            unsafe { std::alloc::dealloc(base as *mut u8, a.layout) };
        }
    }
}

/// One argument's value, stored so that its address can be passed to the kernel.
#[repr(C)]
union Value {
    u: u64,
    i: i64,
    i32: i32,
    f: f32,
    d: f64,
    dims: super::DimsArg,
}

impl Engine for Emu {
    fn describe(&self) -> String {
        "emulated on the host".to_string()
    }

    fn alloc(&mut self, bytes: usize, zeroed: bool) -> Result<u64, KernelError> {
        let size = bytes.max(1);
        let layout = Layout::from_size_align(size + RED_ZONE, ALIGN)
            .map_err(|e| fault(format!("allocating {bytes} bytes: {e}")))?;
        // SAFETY: a layout of non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(fault(format!("out of host memory for {bytes} bytes")));
        }
        // SAFETY: `p` holds `size + RED_ZONE` bytes.
        unsafe {
            std::ptr::write_bytes(p, if zeroed { 0 } else { POISON }, size);
            std::ptr::write_bytes(p.add(size), POISON, RED_ZONE);
        }
        self.live.insert(p as u64, Allocation { layout, bytes: size });
        Ok(p as u64)
    }

    fn free(&mut self, ptr: u64) -> R {
        let a = self
            .live
            .remove(&ptr)
            .ok_or_else(|| fault(format!("freeing {ptr:#x}, which is not a live allocation")))?;
        // SAFETY: the allocation holds `a.bytes` bytes from `ptr`.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, POISON, a.bytes) };
        self.freed.push((ptr, a));
        Ok(())
    }

    fn write(&mut self, dst: u64, data: &[u8]) -> R {
        self.check_range(dst, data.len(), "a copy to the device")?;
        // SAFETY: checked to lie inside a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len()) };
        Ok(())
    }

    fn read(&mut self, src: u64, out: &mut [u8]) -> R {
        self.check_range(src, out.len(), "a copy to the host")?;
        // SAFETY: checked to lie inside a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> R {
        self.check_range(dst, bytes, "a device copy's destination")?;
        self.check_range(src, bytes, "a device copy's source")?;
        if dst.abs_diff(src) < bytes as u64 {
            return Err(fault("a device copy between overlapping ranges"));
        }
        // SAFETY: both ranges lie inside live allocations and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) };
        Ok(())
    }

    fn launch(&self, name: &'static str, blocks: u32, args: &[Arg]) -> R {
        let mut values: Vec<Value> = args
            .iter()
            .map(|a| match *a {
                Arg::Ptr(u) => Value { u },
                Arg::I64(i) => Value { i },
                Arg::I32(i32) => Value { i32 },
                Arg::F32(f) => Value { f },
                Arg::F64(d) => Value { d },
                Arg::Dims(dims) => Value { dims },
            })
            .collect();
        let mut params: Vec<*mut c_void> =
            values.iter_mut().map(|v| v as *mut Value as *mut c_void).collect();
        let cname = CString::new(name).map_err(|_| fault("a kernel name with a NUL byte"))?;
        // SAFETY: `params` points at one value per parameter of the kernel's signature
        // (checked by the caller), each stored as the C type it is read as; every pointer
        // argument is an address the backend checked against its operand's extent.
        let rc = unsafe { sgc_emu_launch(cname.as_ptr(), blocks, BLOCK, params.as_mut_ptr()) };
        match rc {
            0 => self.check_red_zones(&format!("kernel `{name}`")),
            1 => Err(fault(format!("kernel `{name}` reached __syncthreads, which build.rs did not see it reach (only those run their threads as fibers)"))),
            2 => Err(fault(format!("kernel `{name}`: could not make its threads' fibers"))),
            _ => Err(fault(format!("no kernel `{name}` in the host build"))),
        }
    }

    fn sgemm(&self, g: &Sgemm) -> R {
        sgemm(g)?;
        self.check_red_zones("cuBLAS sgemm")
    }

    fn synchronize(&mut self) -> R {
        self.drain(0, None)?;
        self.drain(1, None)
    }

    fn mark(&mut self) -> Result<Event, KernelError> {
        Ok(Event(EventOf::Emu(EmuEvent {
            copy: None,
            at: Instant::now(),
        })))
    }

    fn seconds_between(&mut self, from: &Event, to: &Event) -> Result<f64, KernelError> {
        match (&from.0, &to.0) {
            (EventOf::Emu(a), EventOf::Emu(b)) => Ok(b.at.saturating_duration_since(a.at).as_secs_f64()),
            _ => Err(fault("timing events of another engine")),
        }
    }

    fn alloc_host_pool(&mut self, bytes: usize) -> R {
        self.host = vec![POISON; bytes.max(1)];
        Ok(())
    }

    fn host_pool_bytes(&self) -> usize {
        self.host.len()
    }

    fn host_copy(
        &mut self,
        to_host: bool,
        device: u64,
        host_offset: usize,
        bytes: usize,
    ) -> Result<Event, KernelError> {
        if host_offset + bytes > self.host.len() {
            return Err(fault("a host copy outside the host pool"));
        }
        self.copies += 1;
        let stream = usize::from(!to_host);
        self.queued[stream].push_back(HostCopy {
            number: self.copies,
            to_host,
            device,
            host_offset,
            bytes,
        });
        Ok(Event(EventOf::Emu(EmuEvent {
            copy: Some((stream, self.copies)),
            at: Instant::now(),
        })))
    }

    fn wait(&mut self, done: &Event) -> R {
        match &done.0 {
            EventOf::Emu(EmuEvent { copy: Some((s, n)), .. }) => self.drain(*s, Some(*n)),
            EventOf::Emu(_) => Ok(()),
            EventOf::Gpu(_) => Err(fault("waiting for an event of another engine")),
        }
    }
}

/// cuBLAS's column-major `sgemmStridedBatched` on host memory, its arguments checked as
/// cuBLAS checks them.
fn sgemm(g: &Sgemm) -> R {
    let rows = |t: bool, r: i32, c: i32| if t { c } else { r };
    let bad = g.m < 0
        || g.n < 0
        || g.k < 0
        || g.batch < 0
        || g.lda < rows(g.trans_a, g.m, g.k).max(1)
        || g.ldb < rows(g.trans_b, g.k, g.n).max(1)
        || g.ldc < g.m.max(1);
    if bad {
        return Err(KernelError::device(
            "cuBLAS sgemm",
            format!("CUBLAS_STATUS_INVALID_VALUE (emulated): {g:?}"),
        ));
    }
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    // Column-major: element (i, j) of a matrix with leading dimension ld is at i + j * ld;
    // op(X) transposed swaps the strides.
    let strides = |t: bool, ld: i32| -> (isize, isize) {
        if t {
            (ld as isize, 1)
        } else {
            (1, ld as isize)
        }
    };
    let (rsa, csa) = strides(g.trans_a, g.lda);
    let (rsb, csb) = strides(g.trans_b, g.ldb);
    for i in 0..g.batch as i64 {
        let a = (g.a as *const f32).wrapping_offset((i * g.stride_a) as isize);
        let b = (g.b as *const f32).wrapping_offset((i * g.stride_b) as isize);
        let c = (g.c as *mut f32).wrapping_offset((i * g.stride_c) as isize);
        // SAFETY: the backend checked every operand's extent for these dimensions and
        // strides; a wrong argument stays inside the emulated device's allocations or their
        // red zones (checked after the call).
        unsafe {
            matrixmultiply::sgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, g.beta, c, 1, g.ldc as isize);
        }
    }
    Ok(())
}
