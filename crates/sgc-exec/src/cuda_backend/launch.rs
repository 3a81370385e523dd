//! What every family's launchers share: one launch's operands ([`Io`]), kernel argument
//! lists, staging slots and addresses. The families
//! (`<family>.rs`) use it; `runtime.rs` dispatches to them.

use super::device::Arg;
use crate::backend::Operand;

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
