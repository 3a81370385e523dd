//! Data movement: transpose, concat, slice, select and its gradient, broadcasting,
//! gather, byte copies, and the materialisation of view operands (an i64 one as pairs of
//! f32 words, [`crate::backend::View::widened`]), every strided read through the `transpose` kernel
//! (`kernels/shape.cu`; the CPU reference is `cpu_backend/shape.rs`, same names).

use super::device::{n, Arg, Device, Grid, Idx, R};
use super::launch::{broadcast_strides, dims, fill, offset, view_slot, with_ptrs, Io};
use crate::backend::{Operand, ViewStep};
use crate::error::KernelError;
use crate::operand::strides as strides_of;
use crate::ops::shape::{joins, Shape};
use sgc_ir::DType;

/// `reshape` into its own storage (a view needs no kernel: the executor skips it).
pub(crate) fn reshape(d: &Device, x: u64, y: u64, len: usize) -> R {
    d.launch(
        "reshape",
        Grid::Elements(len),
        &[Arg::Ptr(x), Arg::Ptr(y), n(len)],
    )
}

/// `y [out_shape]` at each index = `x` at `sum(index * src_strides)` (the `transpose`
/// kernel: a permutation, a broadcast, a slice), over 4-byte words.
pub(crate) fn strided(d: &Device, x: u64, y: u64, out_shape: &[usize], src_strides: &[usize]) -> R {
    strided_of(d, 4, (x, y), out_shape, src_strides)
}

/// [`strided`] over elements of `unit` bytes: 4 (`transpose`) or 1 (bool and u8 elements,
/// `transpose_bytes`).
fn strided_of(
    d: &Device,
    unit: usize,
    (x, y): (u64, u64),
    out_shape: &[usize],
    src_strides: &[usize],
) -> R {
    let len: usize = out_shape.iter().product();
    let args = [
        Arg::Ptr(x),
        Arg::Ptr(y),
        n(len),
        Arg::Dims(dims(out_shape, src_strides)?),
    ];
    let kernel = if unit == 1 {
        "transpose_bytes"
    } else {
        "transpose"
    };
    d.launch(kernel, Grid::Elements(len), &args)
}

/// A permutation, broadcast, slice or select of a bool or u8 tensor, as one strided read
/// of single bytes; `None` for any other kernel or dtype.
fn byte_move(k: &Shape, d: &Device, io: Io) -> Option<R> {
    if !matches!(io.ops_in[0].dtype, DType::Bool | DType::U8) {
        return None;
    }
    let (x, y) = (io.ops_in[0].shape.as_slice(), io.ops_out[0].shape.as_slice());
    let strides = strides_of(x);
    // (output shape, source strides, first source element).
    let (to, src, first) = match k {
        Shape::Expand => (y.to_vec(), broadcast_strides(x, y), 0),
        Shape::Transpose { perm } if perm.len() == x.len() => (
            perm.iter().map(|&p| x[p]).collect(),
            perm.iter().map(|&p| strides[p]).collect(),
            0,
        ),
        Shape::Slice {
            axis, start, step, ..
        } => {
            let mut src = strides.clone();
            src[*axis] *= step;
            let mut to = x.to_vec();
            to[*axis] = y[*axis];
            (to, src, start * strides[*axis])
        }
        Shape::Select { axis, index } => {
            let mut to = x.to_vec();
            to[*axis] = 1;
            (to, strides.clone(), index * strides[*axis])
        }
        _ => return None,
    };
    let at = offset(io.ins[0], first, 1);
    Some(strided_of(d, 1, (at, io.outs[0]), &to, &src))
}

/// `transpose`: `y.shape[i] = x.shape[perm[i]]`.
pub(crate) fn transpose(d: &Device, x: u64, y: u64, shape: &[usize], perm: &[usize]) -> R {
    if perm.len() != shape.len() {
        return Err(KernelError::Operands(format!(
            "perm {perm:?} of a rank-{} operand",
            shape.len()
        )));
    }
    let strides = strides_of(shape);
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let src: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    strided(d, x, y, &out, &src)
}

/// `expand`: `x [xs]` broadcast to `y [ys]`.
pub(crate) fn expand(d: &Device, x: u64, y: u64, xs: &[usize], ys: &[usize]) -> R {
    strided(d, x, y, ys, &broadcast_strides(xs, ys))
}

/// Materialises view operand `op` (its stored tensor at `base`) for input `i`: each step
/// applied in order into alternating staging buffers; the address of the result (`base`
/// itself when every step is a reshape).
pub(crate) fn materialize(
    d: &mut Device,
    op: &Operand,
    base: u64,
    i: usize,
) -> Result<u64, KernelError> {
    let Some(view) = &op.view else {
        return Ok(base);
    };
    // Elements moved as 4-byte words (an i64 as two, on an extra trailing axis) or as
    // single bytes (`unit`: the bytes of one moved element).
    let (words, unit, wide);
    let view = match op.dtype {
        DType::F32 | DType::I32 => {
            (words, unit) = (1, 4);
            &**view
        }
        DType::I64 => {
            (words, unit, wide) = (2, 4, view.widened(2));
            &wide
        }
        DType::Bool | DType::U8 => {
            (words, unit) = (1, 1);
            &**view
        }
        d => {
            return Err(KernelError::Operands(format!(
                "views of {} tensors are not supported",
                d.as_str()
            )))
        }
    };
    let (mut at, mut shape, mut k) = (base, view.base.clone(), 0);
    for step in &view.steps {
        if !step.fits(&shape) {
            return Err(KernelError::Operands(format!(
                "view step {step:?} does not fit {shape:?}"
            )));
        }
        let (to, src): (Vec<usize>, Vec<usize>) = match step {
            ViewStep::Reshape(to) => {
                shape = to.clone();
                continue;
            }
            ViewStep::Permute(perm) => {
                let strides = strides_of(&shape);
                (
                    perm.iter().map(|&p| shape[p]).collect(),
                    perm.iter().map(|&p| strides[p]).collect(),
                )
            }
            ViewStep::Expand(to) => (to.clone(), broadcast_strides(&shape, to)),
            ViewStep::Slice {
                axis,
                start,
                step: by,
                ..
            } => {
                let mut strides = strides_of(&shape);
                at = offset(at, start * strides[*axis], unit);
                strides[*axis] *= by;
                (step.sliced(&shape), strides)
            }
        };
        let y = d.staging(view_slot(i, k), unit * to.iter().product::<usize>())?;
        strided_of(d, unit, (at, y), &to, &src)?;
        (at, shape, k) = (y, to, 1 - k);
    }
    // Read as the operand's shape: the same elements, in the same order (every step but a
    // reshape left them contiguous in staging), so only the count must agree.
    let elements = shape.iter().product::<usize>() / words;
    if elements != op.numel() {
        return Err(KernelError::Operands(format!(
            "a view of {:?} read as {:?}",
            view.base, op.shape
        )));
    }
    Ok(at)
}

/// `constant_pad_nd` (`wrap` false: `value` outside `x`) and `roll` (`wrap` true): `y [ys]`
/// at index `i` reads `x [xs]` at `i - offsets` along each axis.
fn shifted(
    d: &Device,
    (x, y): (u64, u64),
    (xs, ys): (&[usize], &[usize]),
    offsets: &[i64],
    (value, wrap): (f32, bool),
) -> R {
    let len: usize = ys.iter().product();
    let geo = dims(ys, &strides_of(xs))?;
    let mut shift = dims(xs, &vec![0; xs.len()])?;
    for (a, &o) in offsets.iter().enumerate().take(xs.len()) {
        shift.src_strides[a] = o;
    }
    let args = [
        Arg::Ptr(x),
        Arg::Ptr(y),
        Arg::F32(value),
        Arg::I32(wrap as i32),
        n(len),
        Arg::Dims(geo),
        Arg::Dims(shift),
    ];
    d.launch("shifted", Grid::Elements(len), &args)
}

/// `(outer, inner)` around `axis` of `shape`.
fn around(shape: &[usize], axis: usize) -> (usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis + 1..].iter().product(),
    )
}

/// `concat` along `axis`: operands `(address, shape)`, one launch each.
pub(crate) fn concat(d: &Device, xs: &[(u64, &[usize])], y: u64, axis: usize) -> R {
    let (outer, inner) = around(xs[0].1, axis);
    let row: usize = xs.iter().map(|(_, s)| s[axis] * inner).sum();
    let mut at = 0;
    for (x, s) in xs {
        let chunk = s[axis] * inner;
        columns(d, "concat", (*x, y), (outer, row), chunk, at)?;
        at += chunk;
    }
    Ok(())
}

/// `slice`: `x[.., start..end:step, ..]` along `axis` (a step above 1: one strided read).
pub(crate) fn slice(
    d: &Device,
    (x, y): (u64, u64),
    shape: &[usize],
    axis: usize,
    (start, end, step): (usize, usize, usize),
) -> R {
    if step > 1 {
        let mut strides = strides_of(shape);
        let at = offset(x, start * strides[axis], 4);
        strides[axis] *= step;
        let mut to = shape.to_vec();
        to[axis] = (end - start).div_ceil(step);
        return strided(d, at, y, &to, &strides);
    }
    let (outer, inner) = around(shape, axis);
    let (row, chunk) = (shape[axis] * inner, (end - start) * inner);
    columns(d, "slice", (x, y), (outer, row), chunk, start * inner)
}

/// One launch of `concat` (`x [outer, chunk]` into columns `at..at + chunk` of
/// `y [outer, row]`) or of `slice` (those columns of `x [outer, row]` into `y`), by name.
pub(crate) fn columns(
    d: &Device,
    name: &'static str,
    (x, y): (u64, u64),
    (outer, row): (usize, usize),
    chunk: usize,
    at: usize,
) -> R {
    let args = [Arg::Ptr(x), Arg::Ptr(y), n(outer), n(chunk), n(row), n(at)];
    d.launch(name, Grid::Elements(outer * chunk), &args)
}

/// `select_backward`: zeros of shape `ys` with `x` at index `index` of `axis`.
fn select_backward(d: &Device, x: u64, y: u64, ys: &[usize], axis: usize, index: usize) -> R {
    fill(d, y, 0.0, ys.iter().product())?;
    let (outer, inner) = around(ys, axis);
    columns(
        d,
        "concat",
        (x, y),
        (outer, ys[axis] * inner),
        inner,
        index * inner,
    )
}

/// `gather` along `axis` of f32 or i64 data (`io`'s operands `(x, index) -> y`).
fn gather(d: &mut Device, io: Io, axis: usize) -> R {
    let (xs, is) = (&io.ops_in[0].shape, &io.ops_in[1].shape);
    let words = if io.ops_in[0].dtype == DType::I64 {
        2
    } else {
        1
    };
    let (_, inner) = around(is, axis);
    let len = io.ops_out[0].numel();
    let ids = Idx::of(&io.ops_in[1], io.ins[1]);
    let args = [
        Arg::Ptr(io.ins[0]),
        Arg::Ptr(ids.ptr),
        Arg::I32(ids.is_i64 as i32),
        Arg::Ptr(io.outs[0]),
        n(len),
        n(is[axis]),
        n(xs[axis]),
        n(inner),
        Arg::I32(words),
        d.flag(),
    ];
    d.launch("gather", Grid::Elements(len * words as usize), &args)?;
    d.check_flag()
}

/// Bytes of the elements of `o` (a view: of the view, as materialised).
fn bytes(o: &Operand) -> usize {
    o.numel() * o.dtype.size() as usize
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Shape, d: &mut Device, io: Io) -> R {
    let x = io.ops_in[0].shape.as_slice();
    let y = || io.ops_out[0].shape.as_slice();
    if let Some(r) = byte_move(k, d, io) {
        return r;
    }
    match k {
        Shape::Expand | Shape::Slice { .. } | Shape::Select { .. } | Shape::Transpose { .. }
            if io.ops_in[0].dtype == DType::I64 =>
        {
            // Pairs of f32 words: the f32 copies move the bits.
            let wide = |s: &[usize]| s.iter().copied().chain([2]).collect::<Vec<_>>();
            let (xw, (a, b)) = (wide(x), (io.ins[0], io.outs[0]));
            match k {
                Shape::Slice {
                    axis,
                    start,
                    end,
                    step,
                } => slice(d, (a, b), &xw, *axis, (*start, *end, *step)),
                Shape::Select { axis, index } => slice(d, (a, b), &xw, *axis, (*index, index + 1, 1)),
                Shape::Transpose { perm } => {
                    let perm: Vec<usize> = perm.iter().copied().chain([x.len()]).collect();
                    transpose(d, a, b, &xw, &perm)
                }
                _ => expand(d, a, b, &xw, &wide(y())),
            }
        }
        Shape::Reshape if io.ops_in[0].dtype == DType::F32 => {
            reshape(d, io.ins[0], io.outs[0], io.ops_in[0].numel())
        }
        // Any other dtype: a byte copy.
        Shape::Reshape => d.copy_bytes(io.outs[0], io.ins[0], bytes(&io.ops_in[0])),
        Shape::CopyInto => d.copy_bytes(io.ins[0], io.ins[1], bytes(&io.ops_in[1])),
        Shape::Transpose { perm } => transpose(d, io.ins[0], io.outs[0], x, perm),
        Shape::Concat { axis } => {
            let rank = y().len();
            let xs: Vec<(u64, &[usize])> = io
                .ins
                .iter()
                .zip(io.ops_in)
                .filter(|(_, o)| joins(&o.shape, rank))
                .map(|(&p, o)| (p, o.shape.as_slice()))
                .collect();
            concat(d, &xs, io.outs[0], *axis)
        }
        Shape::Stack { axis } => {
            let shapes = crate::ops::shape::stacked(io.ops_in, *axis);
            let xs: Vec<(u64, &[usize])> = io
                .ins
                .iter()
                .zip(&shapes)
                .map(|(&p, s)| (p, s.as_slice()))
                .collect();
            concat(d, &xs, io.outs[0], *axis)
        }
        Shape::Slice {
            axis,
            start,
            end,
            step,
        } => slice(d, (io.ins[0], io.outs[0]), x, *axis, (*start, *end, *step)),
        Shape::Split { axis, size } => {
            for (i, &out) in io.outs.iter().enumerate() {
                let start = i * size;
                let end = (start + size).min(x[*axis]);
                slice(d, (io.ins[0], out), x, *axis, (start, end, 1))?;
            }
            Ok(())
        }
        Shape::Unbind { axis } => {
            for (i, &out) in io.outs.iter().enumerate() {
                slice(d, (io.ins[0], out), x, *axis, (i, i + 1, 1))?;
            }
            Ok(())
        }
        Shape::Expand => expand(d, io.ins[0], io.outs[0], x, y()),
        Shape::Select { axis, index } => {
            slice(d, (io.ins[0], io.outs[0]), x, *axis, (*index, index + 1, 1))
        }
        Shape::SliceScatter {
            axis, start, step, ..
        } => {
            d.copy_bytes(io.outs[0], io.ins[0], bytes(&io.ops_in[0]))?;
            let (outer, inner) = around(x, *axis);
            let count = io.ops_in[1].shape.get(*axis).copied().unwrap_or(0);
            let sizes = [n(outer), n(count), n(inner), n(x[*axis]), n(*start), n(*step)];
            let args = with_ptrs(&[io.ins[1], io.outs[0]], sizes);
            d.launch("slice_scatter_into", Grid::Elements(outer * count * inner), &args)
        }
        Shape::Pad { before, value, .. } => {
            shifted(d, (io.ins[0], io.outs[0]), (x, y()), before, (*value as f32, false))
        }
        Shape::Roll { shifts, flat } => {
            let flat_shape = [io.ops_in[0].numel()];
            let s = if *flat { &flat_shape[..] } else { x };
            shifted(d, (io.ins[0], io.outs[0]), (s, s), shifts, (0.0, true))
        }
        Shape::SelectBackward { axis, index } => {
            select_backward(d, io.ins[0], io.outs[0], y(), *axis, *index)
        }
        Shape::Gather { axis } => gather(d, io, *axis),
        Shape::Assign => expand(d, io.ins[1], io.outs[0], &io.ops_in[1].shape, y()),
    }
}
