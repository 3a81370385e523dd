//! Data movement: transpose, concat, slice, select and its gradient, broadcasting,
//! gather, reshape and byte copies.

use super::{byte_path, f, CpuBackend, Indices, Io, NAME, R};
use crate::backend::{Backend, Operand};
use crate::error::ExecError;
use crate::error::KernelError;
use crate::ops::shape::{joins, Shape};
use sgc_ir::ops::OpKind;
use sgc_ir::DType;

/// `reshape` into its own storage (a view needs no kernel: the executor skips it).
pub(crate) fn reshape(x: &[f32], y: &mut [f32]) {
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
pub(crate) fn slice<T: Copy>(
    x: &[T],
    y: &mut [T],
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
pub(crate) fn select_backward(x: &[f32], y: &mut [f32], ys: &[usize], axis: usize, index: usize) {
    let (outer, inner) = around(ys, axis);
    let row = ys[axis] * inner;
    y.fill(0.0);
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

/// Runs a kernel of the family on f32 data.
pub(super) fn run(k: &Shape, io: Io) -> R {
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
        Shape::Slice { axis, start, end } => {
            slice(f(&io.ins[0])?, io.outs[0], sh(0), *axis, *start, *end)
        }
        Shape::Split { axis, size } => {
            let x = sh(0);
            for (i, out) in io.outs.iter_mut().enumerate() {
                let start = i * size;
                let end = (start + size).min(x[*axis]);
                slice(f(&io.ins[0])?, out, x, *axis, start, end);
            }
        }
        Shape::Unbind { axis } => {
            for (i, out) in io.outs.iter_mut().enumerate() {
                slice(f(&io.ins[0])?, out, sh(0), *axis, i, i + 1);
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
        Shape::Select { axis, index } => {
            slice(f(&io.ins[0])?, io.outs[0], sh(0), *axis, *index, index + 1)
        }
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
    let wide = inputs[0].dtype == DType::I64;
    let (src, dst) = match k {
        Shape::Gather { axis } => {
            gather_any(be, inputs, &outputs[0], *axis)?;
            return Ok(true);
        }
        Shape::Expand | Shape::Slice { .. } | Shape::Select { .. } if wide => {
            let x = be.i64_of(&inputs[0])?;
            let mut y = vec![0i64; outputs[0].numel()];
            let (xs, ys) = (inputs[0].shape.as_slice(), outputs[0].shape.as_slice());
            match k {
                Shape::Slice { axis, start, end } => slice(&x, &mut y, xs, *axis, *start, *end),
                Shape::Select { axis, index } => slice(&x, &mut y, xs, *axis, *index, index + 1),
                _ => expand(&x, &mut y, xs, ys),
            }
            be.write_i64(&outputs[0], &y)?;
            return Ok(true);
        }
        Shape::CopyInto => (&inputs[1], &inputs[0]),
        Shape::Reshape if inputs[0].dtype != DType::F32 && inputs[0].view.is_none() => {
            (&inputs[0], &outputs[0])
        }
        _ => return Ok(false),
    };
    let bytes = be.bytes(src)?;
    be.write(dst.buffer, dst.offset, &bytes)?;
    Ok(true)
}

/// `gather` of f32 or i64 data (views materialised), through copies.
fn gather_any(
    be: &mut CpuBackend,
    ins: &[Operand],
    y: &Operand,
    axis: usize,
) -> Result<(), ExecError> {
    let shapes = (ins[0].shape.as_slice(), ins[1].shape.as_slice());
    let index = be.i64_of(&ins[1])?;
    let index = Indices::I64(&index);
    let fail = |error| ExecError::Kernel {
        backend: NAME.to_string(),
        kernel: OpKind::AtenGather.name(),
        error: Box::new(error),
    };
    if ins[0].dtype == DType::I64 {
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
