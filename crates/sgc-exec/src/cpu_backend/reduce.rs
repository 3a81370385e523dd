//! Sums and means, accumulated in f64 in a fixed order: over contiguous axes in place; over
//! others after moving the kept axes first (the reduced ones then form one contiguous run,
//! summed in the same row-major order).

use super::{f, Host, Io, R};
use crate::ops::reduce::Reduce;
use crate::real::Real;

/// Sum (or mean) of `x` viewed as `[outer, red, inner]` over `red`, in f64.
pub(crate) fn reduce<T: Real>(x: &[T], y: &mut [T], red: usize, inner: usize, mean: bool) {
    for (o, chunk) in y.chunks_mut(inner.max(1)).enumerate() {
        for (i, y) in chunk.iter_mut().enumerate() {
            let s: f64 = (0..red).map(|r| x[(o * red + r) * inner + i].f64()).sum();
            *y = T::of(if mean { s / red as f64 } else { s });
        }
    }
}

/// Runs the family's kernel.
pub(super) fn run<T: Host>(k: &Reduce, io: Io<T>) -> R {
    let x = io.ops_in[0].shape.as_slice();
    if k.adjacent() {
        let red = x[k.start..k.end].iter().product();
        let inner = x[k.end..].iter().product();
        reduce(f(&io.ins[0])?, io.outs[0], red, inner, k.mean);
        return Ok(());
    }
    let perm: Vec<usize> = (0..x.len())
        .filter(|a| !k.axes.contains(a))
        .chain(k.axes.iter().copied())
        .collect();
    let data = f(&io.ins[0])?;
    let mut moved = vec![T::zero(); data.len()];
    super::shape::transpose(data, &mut moved, x, &perm);
    let red = k.axes.iter().map(|&a| x[a]).product();
    reduce(&moved, io.outs[0], red, 1, k.mean);
    Ok(())
}
