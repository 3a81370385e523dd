//! What every family's launchers share: one launch's operands ([`Io`]), kernel argument
//! lists, staging slots and addresses, the `Dims` of a strided read and `fill`. The families
//! (`<family>.rs`) use it; `runtime.rs` dispatches to them.

use super::device::{n, Arg, Device, DimsArg, Grid, R};
use super::sources::MAX_RANK;
use crate::backend::Operand;
use crate::error::KernelError;
use crate::operand::strides as strides_of;

/// One launch's operands: their device addresses (`ins`, `outs`) and the operands
/// themselves (for shapes). As in the CPU backend, `sgd_update` writes `ins[0]` in place.
#[derive(Clone, Copy)]
pub(super) struct Io<'a> {
    pub ins: &'a [u64],
    pub outs: &'a [u64],
    pub ops_in: &'a [Operand],
    pub ops_out: &'a [Operand],
}

/// The pointer arguments `ptrs`, then `rest`.
pub(super) fn with_ptrs<const K: usize>(ptrs: &[u64], rest: [Arg; K]) -> Vec<Arg> {
    ptrs.iter().map(|&p| Arg::Ptr(p)).chain(rest).collect()
}

/// Rows of operand `o` over its last axis.
pub(super) fn rows(o: &Operand) -> usize {
    o.numel().checked_div(last(&o.shape)).unwrap_or(0)
}

/// The last axis of `s` (1 for a scalar).
pub(super) fn last(s: &[usize]) -> usize {
    s.last().copied().unwrap_or(1)
}

/// Staging slot `k` (0 or 1, they alternate) of the view read as input `i`
/// ([`super::device::Device::staging`]).
pub(super) fn view_slot(i: usize, k: usize) -> usize {
    2 * i + k
}

/// The first staging slot a kernel may use for its own operands (gathered channel groups,
/// discarded results): above every view's.
pub(super) const KERNEL_SLOTS: usize = 1 << 16;

/// Address `elems` elements of `size` bytes past `p`.
pub(super) fn offset(p: u64, elems: usize, size: usize) -> u64 {
    p + (elems * size) as u64
}

/// Every element of `y` set to `value`.
pub(crate) fn fill(d: &Device, y: u64, value: f32, len: usize) -> R {
    let args = [Arg::Ptr(y), Arg::F32(value), n(len)];
    d.launch("fill", Grid::Elements(len), &args)
}

/// The kernels' `Dims` of an output `out_shape` read at `src_strides` (per output axis).
pub(crate) fn dims(out_shape: &[usize], src_strides: &[usize]) -> Result<DimsArg, KernelError> {
    let r = out_shape.len();
    if r > MAX_RANK {
        return Err(KernelError::Operands(format!(
            "rank {r} {out_shape:?}; at most {MAX_RANK} axes"
        )));
    }
    let mut dims = DimsArg {
        rank: r as i64,
        ..DimsArg::default()
    };
    for (i, (&len, &stride)) in out_shape.iter().zip(src_strides).enumerate() {
        dims.out_shape[i] = len as i64;
        dims.src_strides[i] = stride as i64;
    }
    Ok(dims)
}

/// The stride in `x [xs]` of each axis of `ys` when `x` broadcasts to it (axes aligned on
/// the right; 0 where `x` repeats).
pub(crate) fn broadcast_strides(xs: &[usize], ys: &[usize]) -> Vec<usize> {
    let lead = ys.len() - xs.len();
    let own = strides_of(xs);
    (0..ys.len())
        .map(|a| match a.checked_sub(lead) {
            Some(d) if xs[d] != 1 => own[d],
            _ => 0,
        })
        .collect()
}
