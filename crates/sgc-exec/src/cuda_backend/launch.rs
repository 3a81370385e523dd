//! What every family's launchers share: one launch's operands ([`Io`]), kernel argument
//! lists, and the error of a kernel CUDA lacks. The families
//! (`<family>.rs`) use it; `runtime.rs` dispatches to them.

use super::device::Arg;
use crate::backend::Operand;
use crate::error::KernelError;

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

/// The error of a kernel CUDA lacks: `supports` refuses these before any launch
/// (`Kernel::on_cuda`).
pub(super) fn no_kernel() -> KernelError {
    KernelError::Operands("no CUDA kernel (the CPU backend runs it)".to_string())
}

/// Rows of operand `o` over its last axis.
pub(super) fn rows(o: &Operand) -> usize {
    o.numel().checked_div(last(&o.shape)).unwrap_or(0)
}

/// The last axis of `s` (1 for a scalar).
pub(super) fn last(s: &[usize]) -> usize {
    s.last().copied().unwrap_or(1)
}
