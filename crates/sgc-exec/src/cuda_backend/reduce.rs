//! Sums and means (`kernels/reduce.cu`; the CPU reference is `cpu_backend/reduce.rs`): one
//! thread per output element, its values in order, in f64. Over adjacent axes `x` is
//! `[outer, red, inner]`; over others, each output element reads the reduced axes through
//! their strides (`reduce_sum_strided`).

use super::device::{n, Arg, Device, Grid, R};
use super::launch::{dims, with_ptrs, Io};
use crate::operand::strides;
use crate::ops::reduce::Reduce;

/// Runs the family's kernel.
pub(super) fn run(k: &Reduce, d: &mut Device, io: Io) -> R {
    let x = io.ops_in[0].shape.as_slice();
    if !k.adjacent() {
        let own = strides(x);
        let side = |reduced: bool| -> (Vec<usize>, Vec<usize>) {
            (0..x.len())
                .filter(|a| k.axes.contains(a) == reduced)
                .map(|a| (x[a], own[a]))
                .unzip()
        };
        let ((kept, kept_strides), (red, red_strides)) = (side(false), side(true));
        let (outputs, count) = (kept.iter().product(), red.iter().product());
        let args = [
            Arg::Ptr(io.ins[0]),
            Arg::Ptr(io.outs[0]),
            n(outputs),
            n(count),
            Arg::I32(k.mean as i32),
            Arg::Dims(dims(&kept, &kept_strides)?),
            Arg::Dims(dims(&red, &red_strides)?),
        ];
        return d.launch("reduce_sum_strided", Grid::Elements(outputs), &args);
    }
    let outer: usize = x[..k.start].iter().product();
    let red: usize = x[k.start..k.end].iter().product();
    let inner: usize = x[k.end..].iter().product();
    let args = with_ptrs(
        &[io.ins[0], io.outs[0]],
        [n(outer), n(red), n(inner), Arg::I32(k.mean as i32)],
    );
    d.launch("reduce_sum", Grid::Elements(outer * inner), &args)
}
