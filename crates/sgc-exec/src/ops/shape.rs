//! Data movement: reshapes and views, transposes, concatenation and stacking, slicing
//! (with a step) and splitting, writing a slice (`slice_scatter`), selecting (and its
//! gradient), broadcasting copies, `gather` along an axis, constant padding, rolling, and
//! the exporter's `copy`/`copy_`.
//!
//! Slices follow Python's: negative bounds count from the end and both are clamped to the
//! axis (`slice_bounds`); a step takes every `step`-th element from `start`. A padding
//! or a roll is a map from output to input positions, axis by axis (a negative pad crops;
//! a roll's shifts wrap around), run row by row over the last axis.

use super::check::{broadcasts, eq, expect};
use super::{Cx, Family, VARIADIC};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use serde_json::Value;
use sgc_ir::ops::OpKind;
use sgc_ir::DType;

kinds! {
    cuda: Reshape Transpose Concat Slice AtenView AtenUnsafeView AtenAlias AtenClone
        AtenUnsqueeze AtenSqueezeDim AtenT AtenTranspose AtenPermute AtenCat AtenSlice
        AtenExpand AtenSplit AtenUnbind AtenStack AtenCopy AtenCopyInPlace AtenSelect
        AtenSelectBackward AtenGather AtenSliceScatter AtenConstantPadNd AtenRoll;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// A view (or a copy when the output has its own storage).
    Reshape,
    /// Contiguous copy with `out.shape[i] = x.shape[perm[i]]`.
    Transpose {
        perm: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    /// `x[.., start..end:step, ..]` along `axis`: `(end - start).div_ceil(step)` elements
    /// (`step >= 1`). Any dtype (f32 and i64 in the exports).
    Slice {
        axis: usize,
        start: usize,
        end: usize,
        step: usize,
    },
    /// `aten.slice_scatter`: `(input, src) -> y`, `input` with `src` written over its slice
    /// `start..end:step` of `axis` (the exporter's `slice_backward` is this over zeros).
    SliceScatter {
        axis: usize,
        start: usize,
        end: usize,
        step: usize,
    },
    /// `aten.constant_pad_nd`: `before[a]` elements of `value` ahead of axis `a` and
    /// `after[a]` behind it (one pair per axis of the input; a negative count crops).
    Pad {
        before: Vec<i64>,
        after: Vec<i64>,
        value: f64,
    },
    /// `aten.roll`: `y` at index `i` = `x` at `i - shifts` (each axis wrapping around); one
    /// shift per axis, or with `flat` one shift of the flattened tensor.
    Roll {
        shifts: Vec<i64>,
        flat: bool,
    },
    /// `aten.split`: consecutive slices of `size` along `axis`, one per output.
    Split {
        axis: usize,
        size: usize,
    },
    /// `aten.unbind`: one output per index of `axis`, the axis dropped.
    Unbind {
        axis: usize,
    },
    /// `aten.select`: index `index` of `axis`, the axis dropped.
    Select {
        axis: usize,
        index: usize,
    },
    /// `aten.select_backward`: zeros of the output's shape with the input at index
    /// `index` of `axis` (an axis the input lacks).
    SelectBackward {
        axis: usize,
        index: usize,
    },
    /// `aten.gather`: `(x, index) -> y` with `y[.., j, ..] = x[.., index[.., j, ..], ..]`
    /// along `axis`; the index has `x`'s shape off `axis`. Any dtype: `x`, the index
    /// and `y` alike (i64 positions in the exports).
    Gather {
        axis: usize,
    },
    /// `aten.stack`: the inputs along a new axis `axis`.
    Stack {
        axis: usize,
    },
    /// Broadcast to the output shape (axes aligned on the right).
    Expand,
    /// `aten.copy`: `(dst, src) -> src` broadcast to `dst`'s shape (a functional copy).
    Assign,
    /// `aten.copy_`: input 1 copied into input 0 (any dtype, byte for byte); no outputs.
    CopyInto,
}

/// The shapes of `stack`'s inputs with the new axis `axis` inserted (of length 1): the
/// stack is their concatenation along it.
pub(crate) fn stacked(ins: &[Operand], axis: usize) -> Vec<Vec<usize>> {
    ins.iter()
        .map(|o| {
            let mut s = o.shape.clone();
            s.insert(axis, 1);
            s
        })
        .collect()
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Shape>, ExecError> {
    use OpKind as K;
    let a = &cx.a;
    let r = cx.rank(0);
    Ok(Some(match kind {
        K::Reshape
        | K::AtenView
        | K::AtenUnsafeView
        | K::AtenAlias
        | K::AtenClone
        | K::AtenUnsqueeze
        | K::AtenSqueezeDim => Shape::Reshape,
        K::Transpose => Shape::Transpose { perm: a.perm()? },
        K::Concat => Shape::Concat {
            axis: a.usize("axis")?,
        },
        K::Slice => Shape::Slice {
            axis: a.usize("axis")?,
            start: a.usize("start")?,
            end: a.usize("end")?,
            step: 1,
        },
        K::AtenT => Shape::Transpose {
            perm: if r == 2 { vec![1, 0] } else { (0..r).collect() },
        },
        K::AtenTranspose => {
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(a.axis_of("dim0", r)?, a.axis_of("dim1", r)?);
            Shape::Transpose { perm }
        }
        K::AtenPermute => Shape::Transpose {
            perm: permutation(cx)?,
        },
        K::AtenCat => Shape::Concat {
            axis: a.axis_of("dim", cx.output_rank(0))?,
        },
        K::AtenSelect => Shape::Select {
            axis: a.axis_of("dim", r)?,
            index: index_in(cx, r, cx.shape(0))?,
        },
        K::AtenSelectBackward => {
            let out = cx.output_rank(0);
            let sizes = cx.graph.tensor(cx.op.outputs[0]).shape.as_slice();
            Shape::SelectBackward {
                axis: a.axis_of("dim", out)?,
                index: index_in(cx, out, Some(sizes))?,
            }
        }
        K::AtenGather => Shape::Gather {
            axis: a.axis_of("dim", r)?,
        },
        K::AtenSlice => {
            let (axis, start, end, step) = aten_slice(cx)?;
            Shape::Slice {
                axis,
                start,
                end,
                step,
            }
        }
        K::AtenSliceScatter => {
            let (axis, start, end, step) = aten_slice(cx)?;
            Shape::SliceScatter {
                axis,
                start,
                end,
                step,
            }
        }
        K::AtenConstantPadNd => pad(cx)?,
        K::AtenRoll => roll(cx)?,
        K::AtenExpand => Shape::Expand,
        K::AtenSplit => Shape::Split {
            axis: a.axis_of("dim", r)?,
            size: a
                .get("split_size")
                .and_then(Value::as_u64)
                .filter(|&s| s > 0)
                .ok_or_else(|| a.err("`split_size` must be a positive integer".into()))?
                as usize,
        },
        K::AtenUnbind => Shape::Unbind {
            axis: a.axis_of("dim", r)?,
        },
        K::AtenStack => Shape::Stack {
            axis: a.axis_of("dim", r + 1)?,
        },
        K::AtenCopy => Shape::Assign,
        K::AtenCopyInPlace => Shape::CopyInto,
        _ => return Ok(None),
    }))
}

/// `index` of `select` (negative counts from the end) along `dim` of `shape`, in bounds.
fn index_in(cx: &Cx, rank: usize, shape: Option<&[u64]>) -> Result<usize, ExecError> {
    let a = &cx.a;
    let len = shape
        .and_then(|s| s.get(a.axis_of("dim", rank).ok()?))
        .copied();
    let i = a.i64_or("index", 0)?;
    let len = len.unwrap_or(0) as i64;
    let at = if i < 0 { i + len } else { i };
    if at < 0 || at >= len {
        return Err(a.err(format!("`index` {i} is outside an axis of length {len}")));
    }
    Ok(at as usize)
}

/// Whether a `cat` input of shape `shape` joins an output of rank `rank`: ATen skips
/// the legacy empty operand, a rank-1 tensor of length 0, beside tensors of other ranks.
pub(crate) fn joins(shape: &[usize], rank: usize) -> bool {
    !(shape == [0] && rank != 1)
}

/// `dims` of `aten.permute`.
fn permutation(cx: &Cx) -> Result<Vec<usize>, ExecError> {
    let (a, r) = (&cx.a, cx.rank(0));
    let dims = a
        .get("dims")
        .and_then(Value::as_array)
        .ok_or_else(|| a.err("`dims` is missing".into()))?;
    dims.iter()
        .map(|d| d.as_i64().and_then(|d| sgc_ir::ops::axis(d, r)))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| a.err("`dims` must list axes".into()))
}

/// `[start, end)` of a Python slice of an axis of length `len`: `None` bounds are the
/// axis' ends, negative ones count from the end, both are clamped to the axis, and `end`
/// is at least `start`.
pub(crate) fn slice_bounds(len: usize, start: Option<i64>, end: Option<i64>) -> (usize, usize) {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let clamp = |v: i64| (if v < 0 { v.saturating_add(len) } else { v }).clamp(0, len) as usize;
    let start = clamp(start.unwrap_or(0));
    (start, clamp(end.unwrap_or(len)).max(start))
}

/// `(dim, start, end, step)` of `aten.slice` and `aten.slice_scatter` over input 0's
/// shape: the bounds as [`slice_bounds`] reads them (absent or `null`: the axis' ends),
/// `step` at least 1 (PyTorch refuses others).
fn aten_slice(cx: &Cx) -> Result<(usize, usize, usize, usize), ExecError> {
    let a = &cx.a;
    let axis = a.axis_of("dim", cx.rank(0))?;
    let bound = |key: &str| match a.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| a.err(format!("`{key}` must be an integer"))),
    };
    let step = a.i64_or("step", 1)?;
    let step = usize::try_from(step)
        .ok()
        .filter(|&s| s >= 1)
        .ok_or_else(|| {
            a.err(format!(
                "`step` = {step}: a slice's step must be at least 1"
            ))
        })?;
    let len = cx.shape(0).map_or(0, |s| s[axis]) as usize;
    let (start, end) = slice_bounds(len, bound("start")?, bound("end")?);
    Ok((axis, start, end, step))
}

/// `aten.constant_pad_nd`: `pad` holds `(before, after)` pairs from the last axis back, at
/// most one per axis; `value` (default 0) may be infinite.
fn pad(cx: &Cx) -> Result<Shape, ExecError> {
    let a = &cx.a;
    let (rank, pad) = (cx.rank(0), a.ints("pad")?);
    if pad.len() % 2 != 0 || pad.len() > 2 * rank {
        return Err(a.err(format!(
            "`pad` = {pad:?}: one (before, after) pair per padded axis, at most {rank}"
        )));
    }
    let (mut before, mut after) = (vec![0; rank], vec![0; rank]);
    for (k, pair) in pad.chunks(2).enumerate() {
        (before[rank - 1 - k], after[rank - 1 - k]) = (pair[0], pair[1]);
    }
    let value = a.scalar_or("value", Some(0.0))?;
    Ok(Shape::Pad {
        before,
        after,
        value,
    })
}

/// `aten.roll`: `shifts` and `dims` pair up (an axis named twice adds its shifts); without
/// `dims`, one shift of the flattened tensor.
fn roll(cx: &Cx) -> Result<Shape, ExecError> {
    let a = &cx.a;
    let (rank, shifts, dims) = (cx.rank(0), a.ints("shifts")?, a.ints("dims")?);
    if dims.is_empty() {
        if shifts.len() != 1 {
            return Err(a.err(format!(
                "`shifts` = {shifts:?} without `dims`: one shift of the flattened tensor"
            )));
        }
        return Ok(Shape::Roll { shifts, flat: true });
    }
    if shifts.len() != dims.len() {
        return Err(a.err(format!(
            "`shifts` = {shifts:?} and `dims` = {dims:?}: one shift per axis"
        )));
    }
    let mut per_axis = vec![0i64; rank];
    for (&d, &by) in dims.iter().zip(&shifts) {
        let axis = sgc_ir::ops::axis(d, rank).ok_or_else(|| {
            a.err(format!(
                "`dims` = {dims:?}: {d} is not an axis of a rank-{rank} operand"
            ))
        })?;
        per_axis[axis] = per_axis[axis]
            .checked_add(by)
            .ok_or_else(|| a.err(format!("`shifts` = {shifts:?} overflow")))?;
    }
    Ok(Shape::Roll {
        shifts: per_axis,
        flat: false,
    })
}

impl Shape {
    /// Whether the kernel only re-reads its input (a view when its outputs share the
    /// input's storage: the executor then moves no data).
    pub fn is_view_like(&self) -> bool {
        matches!(
            self,
            Shape::Reshape
                | Shape::Transpose { .. }
                | Shape::Expand
                | Shape::Slice { .. }
                | Shape::Split { .. }
                | Shape::Unbind { .. }
                | Shape::Select { .. }
        )
    }
}

impl Family for Shape {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Shape::Concat { .. } | Shape::Stack { .. } => (None, 1),
            Shape::Split { .. } | Shape::Unbind { .. } => (Some(1), VARIADIC),
            Shape::Assign | Shape::Gather { .. } | Shape::SliceScatter { .. } => (Some(2), 1),
            Shape::CopyInto => (Some(2), 0),
            _ => (Some(1), 1),
        }
    }

    fn input(&self, i: usize) -> super::Slot {
        match self {
            Shape::Gather { .. } if i == 1 => super::Slot::Index,
            _ => super::Slot::Data,
        }
    }

    fn ints(&self) -> &'static [DType] {
        match self {
            // A bool mask broadcast (a causal mask expanded to the batch).
            Shape::Expand => &[DType::I64, DType::Bool],
            Shape::CopyInto
            | Shape::Reshape
            | Shape::Gather { .. }
            | Shape::Slice { .. }
            | Shape::Select { .. }
            | Shape::Transpose { .. } => &[DType::I64],
            _ => &[],
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            Shape::Reshape => {
                let n = |x: &[usize]| x.iter().product::<usize>();
                expect(n(s(0)) == n(o(0)), || {
                    format!("reshape {:?} to {:?}", s(0), o(0))
                })
            }
            Shape::Transpose { perm } => {
                let x = s(0);
                let mut seen = vec![false; x.len()];
                let ok = perm.len() == x.len()
                    && perm
                        .iter()
                        .all(|&p| p < x.len() && !std::mem::replace(&mut seen[p], true));
                expect(ok, || format!("{perm:?} is not a permutation of {x:?}"))?;
                let out: Vec<usize> = perm.iter().map(|&p| x[p]).collect();
                eq("output", o(0), &out)
            }
            Shape::Concat { axis } => concat_shapes(*axis, ins, o(0)),
            Shape::Slice {
                axis,
                start,
                end,
                step,
            } => eq("output", o(0), &sliced(s(0), *axis, (*start, *end, *step))?),
            Shape::SliceScatter {
                axis,
                start,
                end,
                step,
            } => {
                eq("source", s(1), &sliced(s(0), *axis, (*start, *end, *step))?)?;
                eq("output", o(0), s(0))
            }
            Shape::Pad { before, after, .. } => eq("output", o(0), &padded(s(0), before, after)?),
            Shape::Roll { shifts, flat } => {
                let x = s(0);
                let axes = if *flat { 1 } else { x.len() };
                expect(shifts.len() == axes, || {
                    format!("{} shifts for {x:?}", shifts.len())
                })?;
                eq("output", o(0), x)
            }
            Shape::Split { axis, size } => split_shapes(*axis, *size, s(0), outs),
            Shape::Unbind { axis } => {
                let (x, n_out) = (s(0), outs.len());
                expect(*axis < x.len() && x[*axis] == n_out, || {
                    format!("{n_out} outputs from axis {axis} of {x:?}")
                })?;
                let mut want = x.to_vec();
                want.remove(*axis);
                for i in 0..n_out {
                    eq("piece", o(i), &want)?;
                }
                Ok(())
            }
            Shape::Stack { axis } => {
                let x = s(0);
                expect(*axis <= x.len(), || format!("axis {axis} of {x:?} stacked"))?;
                for i in 1..ins.len() {
                    eq("input", s(i), x)?;
                }
                let mut want = x.to_vec();
                want.insert(*axis, ins.len());
                eq("output", o(0), &want)
            }
            Shape::Expand => {
                let (x, y) = (s(0), o(0));
                let fits = broadcasts(x, y);
                expect(fits, || format!("{x:?} does not broadcast to {y:?}"))
            }
            Shape::Assign => {
                let (x, y) = (s(1), o(0));
                eq("output", y, s(0))?;
                let fits = broadcasts(x, y);
                expect(fits, || format!("source {x:?} does not broadcast to {y:?}"))
            }
            Shape::CopyInto => eq("source", s(1), s(0)),
            Shape::Select { axis, index } => eq("output", o(0), &selected(s(0), *axis, *index)?),
            Shape::SelectBackward { axis, index } => {
                eq("input", s(0), &selected(o(0), *axis, *index)?)
            }
            Shape::Gather { axis } => {
                let (x, i) = (s(0), s(1));
                let fits = *axis < x.len()
                    && i.len() == x.len()
                    && (0..x.len()).all(|d| d == *axis || i[d] == x[d]);
                expect(fits, || {
                    format!("index {i:?} of {x:?} along axis {axis} (equal off the axis)")
                })?;
                eq("output", o(0), i)
            }
        }
    }
}

/// The shape of the slice `start..end:step` of `axis` of `x`, if it has one.
pub(crate) fn sliced(
    x: &[usize],
    axis: usize,
    (start, end, step): (usize, usize, usize),
) -> Result<Vec<usize>, KernelError> {
    let fits = axis < x.len() && start <= end && end <= x[axis] && step >= 1;
    expect(fits, || {
        format!("slice {start}..{end} by {step} of axis {axis} of {x:?}")
    })?;
    let mut out = x.to_vec();
    out[axis] = (end - start).div_ceil(step);
    Ok(out)
}

/// The shape of `x` padded by `before` and `after` (one count per axis), if no axis
/// would be cropped below length 0.
fn padded(x: &[usize], before: &[i64], after: &[i64]) -> Result<Vec<usize>, KernelError> {
    let fits = before.len() == x.len() && after.len() == x.len();
    expect(fits, || format!("{} pads for {x:?}", before.len()))?;
    let len = |a: usize| {
        let n = i64::try_from(x[a]).ok()?;
        usize::try_from(n.checked_add(before[a])?.checked_add(after[a])?).ok()
    };
    let out: Option<Vec<usize>> = (0..x.len()).map(len).collect();
    out.ok_or_else(|| {
        KernelError::Operands(format!(
            "{x:?} padded by {before:?} before and {after:?} after: an axis below length 0"
        ))
    })
}

/// The shape of index `index` of `axis` of `x` (the axis dropped), if it has one.
fn selected(x: &[usize], axis: usize, index: usize) -> Result<Vec<usize>, KernelError> {
    expect(axis < x.len() && index < x[axis], || {
        format!("index {index} of axis {axis} of {x:?}")
    })?;
    let mut out = x.to_vec();
    out.remove(axis);
    Ok(out)
}

/// The inputs agree off `axis`; the output's `axis` is the sum of theirs.
fn concat_shapes(axis: usize, ins: &[Operand], y: &[usize]) -> Result<(), KernelError> {
    let joined = || {
        ins.iter()
            .enumerate()
            .filter(|(_, o)| joins(&o.shape, y.len()))
    };
    let mut out = joined()
        .next()
        .map_or(ins[0].shape.clone(), |(_, o)| o.shape.clone());
    expect(axis < out.len(), || format!("axis {axis} of {out:?}"))?;
    out[axis] = 0;
    for (i, op) in joined() {
        let x = op.shape.as_slice();
        let agrees = x.len() == out.len() && (0..x.len()).all(|d| d == axis || x[d] == out[d]);
        expect(agrees, || format!("input {i} {x:?} off axis {axis}"))?;
        out[axis] += x[axis];
    }
    eq("output", y, &out)
}

/// Pieces of `size` along `axis` of `x`, one per output (the last may be shorter).
fn split_shapes(
    axis: usize,
    size: usize,
    x: &[usize],
    outs: &[Operand],
) -> Result<(), KernelError> {
    let n_out = outs.len();
    expect(axis < x.len(), || format!("axis {axis} of {x:?}"))?;
    let pieces = x[axis].div_ceil(size).max(1);
    expect(pieces == n_out, || {
        format!("{pieces} pieces of {x:?}, {n_out} outputs")
    })?;
    for (i, o) in outs.iter().enumerate() {
        let mut want = x.to_vec();
        want[axis] = size.min(x[axis] - i * size);
        eq("piece", &o.shape, &want)?;
    }
    Ok(())
}
