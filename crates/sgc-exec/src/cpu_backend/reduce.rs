//! Sums and means over contiguous axes, accumulated in f64 in a fixed order.

use super::{f, Io, R};
use crate::ops::reduce::Reduce;

/// Sum (or mean) of `x` viewed as `[outer, red, inner]` over `red`, in f64.
pub(crate) fn reduce(x: &[f32], y: &mut [f32], red: usize, inner: usize, mean: bool) {
    for (o, chunk) in y.chunks_mut(inner.max(1)).enumerate() {
        for (i, y) in chunk.iter_mut().enumerate() {
            let s: f64 = (0..red)
                .map(|r| f64::from(x[(o * red + r) * inner + i]))
                .sum();
            *y = if mean { s / red as f64 } else { s } as f32;
        }
    }
}

/// Runs the family's kernel.
pub(super) fn run(k: &Reduce, io: Io) -> R {
    let x = io.ops_in[0].shape.as_slice();
    let red = x[k.start..k.end].iter().product();
    let inner = x[k.end..].iter().product();
    reduce(f(&io.ins[0])?, io.outs[0], red, inner, k.mean);
    Ok(())
}
