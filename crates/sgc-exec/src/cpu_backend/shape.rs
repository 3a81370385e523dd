//! Data movement: embedding lookups, transpose, concat, slice, reshape copies.

use super::Indices;
use crate::KernelError;

/// `embedding`: row `ids[r]` of `w [V, D]` into row `r` of the output.
pub(crate) fn embedding(
    ids: &Indices,
    w: &[f32],
    y: &mut [f32],
    v: usize,
    d: usize,
) -> Result<(), KernelError> {
    for r in 0..ids.len() {
        let id = ids.get(r, v)?;
        y[r * d..(r + 1) * d].copy_from_slice(&w[id * d..(id + 1) * d]);
    }
    Ok(())
}

/// `embedding_grad`: `dw[ids[r]] += dy[r]`, rows in order.
pub(crate) fn embedding_grad(
    ids: &Indices,
    dy: &[f32],
    dw: &mut [f32],
    v: usize,
    d: usize,
) -> Result<(), KernelError> {
    dw.fill(0.0);
    for r in 0..ids.len() {
        let id = ids.get(r, v)?;
        for j in 0..d {
            dw[id * d + j] += dy[r * d + j];
        }
    }
    Ok(())
}

/// `reshape` into its own storage (a view needs no kernel: the executor skips it).
pub(crate) fn reshape(x: &[f32], y: &mut [f32]) {
    y.copy_from_slice(x);
}

/// `transpose`: `y` at index `(i_0..i_r)` = `x` at the index whose axis `perm[k]` is `i_k`.
pub(crate) fn transpose(x: &[f32], y: &mut [f32], shape: &[usize], perm: &[usize]) {
    let r = shape.len();
    let mut strides = vec![1usize; r];
    for a in (0..r.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let src_strides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    let mut idx = vec![0usize; r];
    for yv in y.iter_mut() {
        let src: usize = idx.iter().zip(&src_strides).map(|(i, s)| i * s).sum();
        *yv = x[src];
        for a in (0..r).rev() {
            idx[a] += 1;
            if idx[a] < out_shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

/// `(outer, inner)` around `axis` of `shape`.
fn around(shape: &[usize], axis: usize) -> (usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis + 1..].iter().product(),
    )
}

/// `concat` along `axis`: operands `(data, shape)`.
pub(crate) fn concat(xs: &[(&[f32], &[usize])], y: &mut [f32], axis: usize) {
    let (outer, inner) = around(xs[0].1, axis);
    let mut at = 0;
    for o in 0..outer {
        for (x, s) in xs {
            let chunk = s[axis] * inner;
            y[at..at + chunk].copy_from_slice(&x[o * chunk..(o + 1) * chunk]);
            at += chunk;
        }
    }
}

/// `slice`: `x[.., start..end, ..]` along `axis`.
pub(crate) fn slice(
    x: &[f32],
    y: &mut [f32],
    shape: &[usize],
    axis: usize,
    start: usize,
    end: usize,
) {
    let (outer, inner) = around(shape, axis);
    let (row, chunk) = (shape[axis] * inner, (end - start) * inner);
    for o in 0..outer {
        let src = o * row + start * inner;
        y[o * chunk..(o + 1) * chunk].copy_from_slice(&x[src..src + chunk]);
    }
}
