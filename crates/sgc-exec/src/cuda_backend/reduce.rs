//! Sums and means over contiguous axes (`kernels/reduce.cu`; the CPU reference is
//! `cpu_backend/reduce.rs`): one thread per output element, its values in order, in f64.

use super::device::{n, Arg, Device, Grid, R};
use super::launch::{with_ptrs, Io};
use crate::ops::reduce::Reduce;

/// Runs the family's kernel: `x` viewed as `[outer, red, inner]`, summed over `red`.
pub(super) fn run(k: &Reduce, d: &mut Device, io: Io) -> R {
    if !k.adjacent() {
        return Err(crate::error::KernelError::Operands(format!(
            "a reduction over the non-adjacent axes {:?} runs on the CPU backend only",
            k.axes
        )));
    }
    let x = io.ops_in[0].shape.as_slice();
    let outer: usize = x[..k.start].iter().product();
    let red: usize = x[k.start..k.end].iter().product();
    let inner: usize = x[k.end..].iter().product();
    let args = with_ptrs(
        &[io.ins[0], io.outs[0]],
        [n(outer), n(red), n(inner), Arg::I32(k.mean as i32)],
    );
    d.launch("reduce_sum", Grid::Elements(outer * inner), &args)
}
