//! The host side of offloads: one page-locked host allocation (cudarc's pinned host slice,
//! `cuMemHostAlloc`), made once at the plan's host size, and one copy stream per
//! direction, so copies to host and back run beside the kernels and beside each other.
//!
//! A copy waits for an event recorded on the compute stream when it is queued (every
//! kernel launched before it), runs on its stream, and records an event there that the
//! compute stream waits on ([`crate::backend::Backend::wait_copy`]). Copies are raw
//! driver calls on device addresses, as the kernels' operands are.

use cudarc::driver::result::{memcpy_dtoh_async, memcpy_htod_async};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError, PinnedHostSlice};
use std::sync::Arc;

/// The pinned pool and the two copy streams.
pub(super) struct HostPool {
    mem: PinnedHostSlice<u8>,
    /// Bytes asked for (the allocation has at least one).
    len: usize,
    to_host: Arc<CudaStream>,
    to_device: Arc<CudaStream>,
}

impl HostPool {
    /// A pool of `bytes` page-locked bytes (at least one) and its copy streams.
    pub(super) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<HostPool, DriverError> {
        // SAFETY: the bytes are uninitialised until a copy writes them; nothing reads a
        // part of the pool that no copy to host has written (the plan's layout).
        let mem = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes.max(1), 0) }?;
        Ok(HostPool {
            mem,
            len: bytes,
            to_host: ctx.new_stream()?,
            to_device: ctx.new_stream()?,
        })
    }

    /// Bytes of the pool.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Queues the copy of `bytes` bytes between device address `device` and the pool at
    /// `host_offset` (to the host, or back), after the work queued so far on `compute`;
    /// the event of its end.
    pub(super) fn copy(
        &self,
        compute: &CudaStream,
        to_host: bool,
        device: u64,
        host_offset: usize,
        bytes: usize,
    ) -> Result<CudaEvent, DriverError> {
        let stream = if to_host {
            &self.to_host
        } else {
            &self.to_device
        };
        stream.wait(&compute.record_event(None)?)?;
        let base = self.mem.as_ptr()? as *mut u8;
        if bytes == 0 {
            return stream.record_event(None);
        }
        // SAFETY: the caller checked `host_offset + bytes` against the pool's length and
        // the device range against its buffer; the pool lives until both copy streams are
        // synchronised (`Drop`). No other copy touches these host bytes meanwhile, and a
        // copy back reads what its copy to host wrote, which the compute stream waited for
        // before the event this copy waits on (the executor's order, `crate::offload`).
        unsafe {
            let host = base.add(host_offset);
            if to_host {
                let dst = std::slice::from_raw_parts_mut(host, bytes);
                memcpy_dtoh_async(dst, device, stream.cu_stream())?;
            } else {
                let src = std::slice::from_raw_parts(host as *const u8, bytes);
                memcpy_htod_async(device, src, stream.cu_stream())?;
            }
        }
        stream.record_event(None)
    }
}

impl Drop for HostPool {
    /// Copies still queued end before the pool is freed.
    fn drop(&mut self) {
        let _ = self.to_host.synchronize();
        let _ = self.to_device.synchronize();
    }
}
