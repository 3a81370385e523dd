//! Data movement: transpose, concat, slice (with a step) and `slice_scatter`, select and
//! its gradient, broadcasting, gather, constant padding, roll, reshape and byte copies.
//!
//! A slice moves runs of contiguous elements ([`slice_runs`]: one per outer index for step
//! 1, one per taken row otherwise), which `slice_scatter` writes back the other way. A
//! padding and a roll go row by row over the last axis: each output row reads one input
//! row (or none: padding) found axis by axis, and copies it in at most two pieces.

use super::{byte_path, f, CpuBackend, Host, Indices, Io, NAME, R};
use crate::backend::{Backend, Operand};
use crate::error::ExecError;
use crate::error::KernelError;
use crate::ops::shape::{joins, Shape};
use crate::real::Real;
use sgc_ir::ops::OpKind;
use sgc_ir::DType;

/// `reshape` into its own storage (a view needs no kernel: the executor skips it).
pub(crate) fn reshape<T: Real>(x: &[T], y: &mut [T]) {
    y.copy_from_slice(x);
}

/// `transpose`: `y` at index `(i_0..i_r)` = `x` at the index whose axis `perm[k]` is `i_k`.
pub(crate) fn transpose<T: Copy>(x: &[T], y: &mut [T], shape: &[usize], perm: &[usize]) {
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
pub(crate) fn concat<T: Real>(xs: &[(&[T], &[usize])], y: &mut [T], axis: usize) {
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

/// A slice `start..end:step` of an axis (`step >= 1`, `start <= end <= len`).
pub(crate) type Span = (usize, usize, usize);

/// The runs of contiguous elements that slice `span` of `axis` takes from a tensor of
/// `shape`: `(offset in the tensor, offset in the slice, length)`, in the slice's order.
fn slice_runs(
    shape: &[usize],
    axis: usize,
    (start, end, step): Span,
) -> impl Iterator<Item = (usize, usize, usize)> {
    let (outer, inner) = around(shape, axis);
    let (n, row) = ((end - start).div_ceil(step), shape[axis] * inner);
    let (per_outer, len) = if step == 1 {
        (1, n * inner)
    } else {
        (n, inner)
    };
    (0..outer).flat_map(move |o| {
        (0..per_outer).map(move |k| {
            (
                o * row + (start + k * step) * inner,
                o * n * inner + k * len,
                len,
            )
        })
    })
}

/// `slice`: `x[.., start..end:step, ..]` along `axis`.
pub(crate) fn slice<T: Copy>(x: &[T], y: &mut [T], shape: &[usize], axis: usize, span: Span) {
    for (from, to, len) in slice_runs(shape, axis, span) {
        y[to..to + len].copy_from_slice(&x[from..from + len]);
    }
}

/// `slice_scatter`: `x [shape]` with `src` written over its slice `span` of `axis`.
pub(crate) fn slice_scatter<T: Real>(
    x: &[T],
    src: &[T],
    y: &mut [T],
    shape: &[usize],
    axis: usize,
    span: Span,
) {
    y.copy_from_slice(x);
    for (to, from, len) in slice_runs(shape, axis, span) {
        y[to..to + len].copy_from_slice(&src[from..from + len]);
    }
}

/// Calls `f(i, index)` for each row-major index of `shape`, `i` counting them.
fn each_index(shape: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let mut index = vec![0usize; shape.len()];
    for i in 0..shape.iter().product() {
        f(i, &index);
        for a in (0..shape.len()).rev() {
            index[a] += 1;
            if index[a] < shape[a] {
                break;
            }
            index[a] = 0;
        }
    }
}

/// `constant_pad_nd`: `y [ys]` at index `i` = `x [xs]` at `i - before` where that lies in
/// `x`, else `value` (a negative `before` crops).
pub(crate) fn pad<T: Real>(
    x: &[T],
    y: &mut [T],
    xs: &[usize],
    ys: &[usize],
    before: &[i64],
    value: f64,
) {
    let Some((&len, lead)) = ys.split_last() else {
        y.copy_from_slice(x); // rank 0: no axis to pad
        return;
    };
    if y.is_empty() {
        return;
    }
    let (r, from) = (ys.len() - 1, crate::operand::strides(xs));
    // The output columns `lo..hi` read input columns `lo - b..hi - b`.
    let b = before[r];
    let lo = b.clamp(0, len as i64) as usize;
    let hi = (b + xs[r] as i64).clamp(0, len as i64) as usize;
    each_index(lead, |row, index| {
        let out = &mut y[row * len..(row + 1) * len];
        out.fill(T::of(value));
        let mut at = 0;
        for (a, &i) in index.iter().enumerate() {
            let src = i as i64 - before[a];
            if src < 0 || src >= xs[a] as i64 {
                return; // a padded row
            }
            at += src as usize * from[a];
        }
        if hi > lo {
            let start = at + (lo as i64 - b) as usize;
            out[lo..hi].copy_from_slice(&x[start..start + (hi - lo)]);
        }
    });
}

/// `roll`: `y` at index `i` = `x` at `i - shifts` along each axis of `shape`, wrapping
/// around.
pub(crate) fn roll<T: Real>(x: &[T], y: &mut [T], shape: &[usize], shifts: &[i64]) {
    let Some((&len, lead)) = shape.split_last() else {
        y.copy_from_slice(x);
        return;
    };
    if y.is_empty() {
        return;
    }
    let by: Vec<usize> = (0..shape.len())
        .map(|a| shifts[a].rem_euclid(shape[a] as i64) as usize)
        .collect();
    let from = crate::operand::strides(shape);
    let s = by[lead.len()];
    each_index(lead, |row, index| {
        let at: usize = (0..lead.len())
            .map(|a| (index[a] + shape[a] - by[a]) % shape[a] * from[a])
            .sum();
        let (src, out) = (&x[at..at + len], &mut y[row * len..(row + 1) * len]);
        out[s..].copy_from_slice(&src[..len - s]);
        out[..s].copy_from_slice(&src[len - s..]);
    });
}

/// The two operands of a broadcasting binary op, each expanded to the output shape `ys`.
pub(crate) fn expand_pair<T: Real>(
    (a, a_shape): (&[T], &[usize]),
    (b, b_shape): (&[T], &[usize]),
    ys: &[usize],
) -> (Vec<T>, Vec<T>) {
    let n = ys.iter().product();
    let (mut ea, mut eb) = (vec![T::zero(); n], vec![T::zero(); n]);
    expand(a, &mut ea, a_shape, ys);
    expand(b, &mut eb, b_shape, ys);
    (ea, eb)
}

/// Broadcast `x` (shape `xs`) to `y` (shape `ys`), axes aligned on the right.
pub(crate) fn expand<T: Copy>(x: &[T], y: &mut [T], xs: &[usize], ys: &[usize]) {
    let lead = ys.len() - xs.len();
    // Stride of each output axis in `x` (0 where `x` broadcasts).
    let mut strides = vec![0usize; ys.len()];
    let mut s = 1;
    for d in (0..xs.len()).rev() {
        strides[lead + d] = if xs[d] == 1 { 0 } else { s };
        s *= xs[d];
    }
    let mut pos = vec![0usize; ys.len()];
    for v in y.iter_mut() {
        *v = x[pos.iter().zip(&strides).map(|(p, s)| p * s).sum::<usize>()];
        for d in (0..ys.len()).rev() {
            pos[d] += 1;
            if pos[d] < ys[d] {
                break;
            }
            pos[d] = 0;
        }
    }
}

/// `select_backward`: zeros of shape `ys` with `x` at index `index` of `axis`.
pub(crate) fn select_backward<T: Real>(
    x: &[T],
    y: &mut [T],
    ys: &[usize],
    axis: usize,
    index: usize,
) {
    let (outer, inner) = around(ys, axis);
    let row = ys[axis] * inner;
    y.fill(T::zero());
    for o in 0..outer {
        let at = o * row + index * inner;
        y[at..at + inner].copy_from_slice(&x[o * inner..(o + 1) * inner]);
    }
}

/// `gather` along `axis`: `y [is]` at `(o, j, i)` = `x [xs]` at `(o, index[o, j, i], i)`.
pub(crate) fn gather<T: Copy>(
    x: &[T],
    index: &Indices,
    y: &mut [T],
    (xs, is): (&[usize], &[usize]),
    axis: usize,
) -> R {
    let (_, inner) = around(is, axis);
    let (len, taken) = (xs[axis], is[axis]);
    for (e, v) in y.iter_mut().enumerate() {
        let (o, i) = (e / (taken * inner), e % inner);
        *v = x[(o * len + index.get(e, len)?) * inner + i];
    }
    Ok(())
}

/// Runs a kernel of the family on float data.
pub(super) fn run<T: Host>(k: &Shape, io: Io<T>) -> R {
    let sh = |i: usize| io.ops_in[i].shape.as_slice();
    match k {
        Shape::Reshape => reshape(f(&io.ins[0])?, io.outs[0]),
        Shape::Transpose { perm } => transpose(f(&io.ins[0])?, io.outs[0], sh(0), perm),
        Shape::Concat { axis } => {
            let rank = io.ops_out[0].shape.len();
            let xs = io
                .ins
                .iter()
                .zip(io.ops_in)
                .filter(|(_, o)| joins(&o.shape, rank))
                .map(|(s, o)| Ok((f(s)?, o.shape.as_slice())))
                .collect::<Result<Vec<_>, KernelError>>()?;
            concat(&xs, io.outs[0], *axis)
        }
        Shape::Slice {
            axis,
            start,
            end,
            step,
        } => slice(
            f(&io.ins[0])?,
            io.outs[0],
            sh(0),
            *axis,
            (*start, *end, *step),
        ),
        Shape::SliceScatter {
            axis,
            start,
            end,
            step,
        } => {
            let span = (*start, *end, *step);
            let (x, src) = (f(&io.ins[0])?, f(&io.ins[1])?);
            slice_scatter(x, src, io.outs[0], sh(0), *axis, span)
        }
        Shape::Pad { before, value, .. } => {
            let ys = &io.ops_out[0].shape;
            pad(f(&io.ins[0])?, io.outs[0], sh(0), ys, before, *value)
        }
        Shape::Roll { shifts, flat } => {
            let x = f(&io.ins[0])?;
            match flat {
                true => roll(x, io.outs[0], &[x.len()], shifts),
                false => roll(x, io.outs[0], sh(0), shifts),
            }
        }
        Shape::Split { axis, size } => {
            let x = sh(0);
            for (i, out) in io.outs.iter_mut().enumerate() {
                let start = i * size;
                let end = (start + size).min(x[*axis]);
                slice(f(&io.ins[0])?, out, x, *axis, (start, end, 1));
            }
        }
        Shape::Unbind { axis } => {
            for (i, out) in io.outs.iter_mut().enumerate() {
                slice(f(&io.ins[0])?, out, sh(0), *axis, (i, i + 1, 1));
            }
        }
        Shape::Stack { axis } => {
            let shapes = crate::ops::shape::stacked(io.ops_in, *axis);
            let xs = io
                .ins
                .iter()
                .zip(&shapes)
                .map(|(s, sh)| Ok((f(s)?, sh.as_slice())))
                .collect::<Result<Vec<_>, KernelError>>()?;
            concat(&xs, io.outs[0], *axis)
        }
        Shape::Expand => expand(f(&io.ins[0])?, io.outs[0], sh(0), &io.ops_out[0].shape),
        Shape::Assign => expand(f(&io.ins[1])?, io.outs[0], sh(1), &io.ops_out[0].shape),
        Shape::Select { axis, index } => slice(
            f(&io.ins[0])?,
            io.outs[0],
            sh(0),
            *axis,
            (*index, index + 1, 1),
        ),
        Shape::SelectBackward { axis, index } => select_backward(
            f(&io.ins[0])?,
            io.outs[0],
            &io.ops_out[0].shape,
            *axis,
            *index,
        ),

        Shape::CopyInto | Shape::Gather { .. } => return Err(byte_path()),
    }
    Ok(())
}

/// Byte copies: `copy_` (any dtype) and a reshape of a stored non-f32 tensor; `false` for
/// every other kernel.
pub(super) fn launch_bytes(
    be: &mut CpuBackend,
    k: &Shape,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<bool, ExecError> {
    // Elements of 8 bytes move as i64 bits (an f64's included).
    let wide = matches!(inputs[0].dtype, DType::I64 | DType::F64);
    let (src, dst) = match k {
        Shape::Gather { axis } => {
            gather_any(be, inputs, &outputs[0], *axis)?;
            return Ok(true);
        }
        Shape::Expand if inputs[0].dtype == DType::Bool => {
            if inputs[0].view.is_some() {
                return Err(ExecError::backend(NAME, "a view of a bool tensor expanded"));
            }
            let x = be.bytes(&inputs[0])?;
            let mut y = vec![0u8; outputs[0].numel()];
            expand(&x, &mut y, &inputs[0].shape, &outputs[0].shape);
            be.write(outputs[0].buffer, outputs[0].offset, &y)?;
            return Ok(true);
        }
        Shape::Transpose { perm } if wide => {
            let x = be.i64_of(&inputs[0])?;
            let mut y = vec![0i64; outputs[0].numel()];
            transpose(&x, &mut y, &inputs[0].shape, perm);
            be.write_i64(&outputs[0], &y)?;
            return Ok(true);
        }
        Shape::Expand | Shape::Slice { .. } | Shape::Select { .. } if wide => {
            let x = be.i64_of(&inputs[0])?;
            let mut y = vec![0i64; outputs[0].numel()];
            let (xs, ys) = (inputs[0].shape.as_slice(), outputs[0].shape.as_slice());
            match k {
                Shape::Slice {
                    axis,
                    start,
                    end,
                    step,
                } => slice(&x, &mut y, xs, *axis, (*start, *end, *step)),
                Shape::Select { axis, index } => {
                    slice(&x, &mut y, xs, *axis, (*index, index + 1, 1))
                }
                _ => expand(&x, &mut y, xs, ys),
            }
            be.write_i64(&outputs[0], &y)?;
            return Ok(true);
        }
        Shape::CopyInto => (&inputs[1], &inputs[0]),
        // A reshape (or clone) of a non-f32 tensor, through its elements' bytes.
        Shape::Reshape if inputs[0].dtype != DType::F32 => {
            let bytes = be.byte_elements(&inputs[0])?;
            be.write(outputs[0].buffer, outputs[0].offset, &bytes)?;
            return Ok(true);
        }
        _ => return Ok(false),
    };
    let bytes = be.bytes(src)?;
    be.write(dst.buffer, dst.offset, &bytes)?;
    Ok(true)
}

/// `gather` of f32, f64 or i64 data (views materialised; f64 as i64 bits), through copies.
fn gather_any(
    be: &mut CpuBackend,
    ins: &[Operand],
    y: &Operand,
    axis: usize,
) -> Result<(), ExecError> {
    let shapes = (ins[0].shape.as_slice(), ins[1].shape.as_slice());
    let index = match ins[1].dtype {
        DType::I32 if ins[1].view.is_none() => be
            .bytes(&ins[1])?
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => be.i64_of(&ins[1])?,
    };
    let index = Indices::I64(&index);
    let fail = |error| ExecError::Kernel {
        backend: NAME.to_string(),
        kernel: OpKind::AtenGather.name(),
        error: Box::new(error),
    };
    if matches!(ins[0].dtype, DType::I64 | DType::F64) {
        let x = be.i64_of(&ins[0])?;
        let mut out = vec![0i64; y.numel()];
        gather(&x, &index, &mut out, shapes, axis).map_err(fail)?;
        be.write_i64(y, &out)
    } else {
        let x = be.f32_of(&ins[0])?;
        let mut out = vec![0f32; y.numel()];
        gather(&x, &index, &mut out, shapes, axis).map_err(fail)?;
        be.write_f32(y, &out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `0, 1, 2, ...` as f32, `n` of them.
    fn iota(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    /// Every index of `shape`, row-major.
    fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
        let mut all = Vec::new();
        each_index(shape, |_, i| all.push(i.to_vec()));
        all
    }

    /// The row-major offset of `index` in `shape`.
    fn at(shape: &[usize], index: &[usize]) -> usize {
        let s = crate::operand::strides(shape);
        index.iter().zip(&s).map(|(i, s)| i * s).sum()
    }

    /// Strided slices against their definition on every axis, and `slice_scatter` as the
    /// slice's inverse: the slice of the scattered tensor is the source, and every element
    /// off the slice keeps its value.
    #[test]
    fn strided_slices_and_their_scatter() {
        let shape = [2, 7, 3];
        let x = iota(42);
        for axis in 0..3 {
            for span in [
                (0, shape[axis], 2),
                (1, shape[axis], 2),
                (0, 2, 3),
                (1, 2, 1),
                (1, 1, 1),
            ] {
                let (start, end, step): Span = span;
                let mut out = shape.to_vec();
                out[axis] = (end - start).div_ceil(step);
                let mut y = vec![-1.0; out.iter().product()];
                slice(&x, &mut y, &shape, axis, span);
                for (k, i) in indices(&out).iter().enumerate() {
                    let mut src = i.clone();
                    src[axis] = start + i[axis] * step;
                    assert_eq!(y[k], x[at(&shape, &src)], "axis {axis}, {span:?}, {i:?}");
                }
                let src: Vec<f32> = (0..y.len()).map(|v| -(v as f32) - 1.0).collect();
                let mut back = vec![0.0; x.len()];
                slice_scatter(&x, &src, &mut back, &shape, axis, span);
                let mut again = vec![0.0; y.len()];
                slice(&back, &mut again, &shape, axis, span);
                assert_eq!(again, src);
                let written = back.iter().filter(|v| **v < 0.0).count();
                assert_eq!(written, src.len(), "only the slice is written");
            }
        }
    }

    /// Padding against its definition (`y[i] = x[i - before]` inside `x`, else the value)
    /// with pads of both signs on every axis, and a negative pad undoing a positive one.
    #[test]
    fn constant_padding_crops_and_pads() {
        let xs = [2, 3, 4];
        let x = iota(24);
        for before in [[0, 1, 2], [1, -1, 0], [-1, 2, -3], [0, 0, 0]] {
            let after = [1i64, -2, 3];
            let ys: Vec<usize> = (0..3)
                .map(|a| (xs[a] as i64 + before[a] + after[a]) as usize)
                .collect();
            let mut y = vec![f32::NAN; ys.iter().product()];
            pad(&x, &mut y, &xs, &ys, &before, -7.5);
            for (k, i) in indices(&ys).iter().enumerate() {
                let src: Vec<i64> = (0..3).map(|a| i[a] as i64 - before[a]).collect();
                let inside = (0..3).all(|a| (0..xs[a] as i64).contains(&src[a]));
                let want = if inside {
                    let src: Vec<usize> = src.iter().map(|&v| v as usize).collect();
                    x[at(&xs, &src)]
                } else {
                    -7.5
                };
                assert_eq!(y[k], want, "before {before:?}, at {i:?}");
            }
        }
        // Swin pads the bottom and right of [2, 3, 3, 1] to 4x4, and its backward crops.
        let (xs, ys) = ([2, 3, 3, 1], [2, 4, 4, 1]);
        let x = iota(18);
        let mut y = vec![0.0; 32];
        pad(&x, &mut y, &xs, &ys, &[0, 0, 0, 0], 0.0);
        let mut back = vec![0.0; 18];
        pad(&y, &mut back, &ys, &xs, &[0, 0, 0, 0], 0.0);
        assert_eq!(back, x);
        // Rank 0 and an empty output.
        let mut one = [0.0];
        pad(&[3.0], &mut one, &[], &[], &[], 1.0);
        assert_eq!(one, [3.0]);
        pad(&x, &mut [], &[2, 9], &[2, 0], &[0, -9], 1.0);
    }

    /// Rolls against their definition over two axes with shifts of both signs (beyond the
    /// axis' length too), and a roll undone by its opposite.
    #[test]
    fn rolls_wrap_around_each_axis() {
        let shape = [2, 4, 5];
        let x = iota(40);
        for shifts in [[0, -3, 3], [1, 5, -7], [0, 0, 0], [-1, 2, 11]] {
            let mut y = vec![0.0; 40];
            roll(&x, &mut y, &shape, &shifts);
            for (k, i) in indices(&shape).iter().enumerate() {
                let src: Vec<usize> = (0..3)
                    .map(|a| (i[a] as i64 - shifts[a]).rem_euclid(shape[a] as i64) as usize)
                    .collect();
                assert_eq!(y[k], x[at(&shape, &src)], "shifts {shifts:?}, at {i:?}");
            }
            let back: Vec<i64> = shifts.iter().map(|s| -s).collect();
            let mut z = vec![0.0; 40];
            roll(&y, &mut z, &shape, &back);
            assert_eq!(z, x);
        }
        let mut flat = vec![0.0; 6];
        roll(&iota(6), &mut flat, &[6], &[-2]);
        assert_eq!(flat, [2.0, 3.0, 4.0, 5.0, 0.0, 1.0]);
        roll::<f32>(&[], &mut [], &[0, 3], &[1, 1]);
    }

    #[test]
    fn select_backward_places_the_gradient_among_zeros() {
        let x = [1.0, 2.0, 3.0, 4.0];
        let mut y = [9.0; 12];
        select_backward(&x, &mut y, &[2, 3, 2], 1, 2);
        assert_eq!(
            y,
            [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 4.0]
        );
    }

    #[test]
    fn gather_reads_along_the_axis_and_refuses_an_index_outside_it() {
        let x = [10i64, 11, 12, 20, 21, 22];
        let mut y = [0i64; 4];
        let ids = [2i64, 0, 1, 1];
        gather(&x, &Indices::I64(&ids), &mut y, (&[2, 3], &[2, 2]), 1).unwrap();
        assert_eq!(y, [12, 10, 21, 21]);
        let bad = [3i64, 0, 0, 0];
        assert!(gather(&x, &Indices::I64(&bad), &mut y, (&[2, 3], &[2, 2]), 1).is_err());
    }
}
