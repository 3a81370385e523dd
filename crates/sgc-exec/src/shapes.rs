//! Operand checks of every kernel: counts, dtypes and shapes, run on every op before the
//! first step so that kernels index in bounds by construction.

use crate::backend::Operand;
use crate::kernel::Kernel;
use crate::KernelError;
use sgc_ir::DType;

type R = Result<(), KernelError>;

fn expect(cond: bool, msg: impl FnOnce() -> String) -> R {
    if cond {
        Ok(())
    } else {
        Err(KernelError::Operands(msg()))
    }
}

fn eq(what: &'static str, found: &[usize], expected: &[usize]) -> R {
    if found == expected {
        return Ok(());
    }
    Err(KernelError::Shape {
        what,
        found: found.to_vec(),
        expected: expected.to_vec(),
    })
}

fn dtype(what: String, ok: bool, expected: &'static str, found: DType) -> R {
    if ok {
        return Ok(());
    }
    Err(KernelError::DType {
        what,
        expected,
        found: found.as_str(),
    })
}

/// Output length of a sliding window, if the window fits.
pub(crate) fn window_out(len: usize, k: usize, stride: usize, pad: usize) -> Option<usize> {
    let padded = len + 2 * pad;
    (stride > 0 && k > 0 && padded >= k).then(|| (padded - k) / stride + 1)
}

/// Whether input slot `i` of `k` holds integer indices rather than f32 data.
pub fn is_index_slot(k: &Kernel, i: usize) -> bool {
    matches!(
        (k, i),
        (Kernel::Embedding | Kernel::EmbeddingGrad, 0)
            | (Kernel::CrossEntropy | Kernel::CrossEntropyGrad, 1)
            | (Kernel::NllLoss { .. }, 1)
            | (Kernel::NllLossBackward { .. }, 2)
            | (Kernel::MaxPool2dIndicesBackward { .. }, 2)
            | (
                Kernel::EmbeddingRows | Kernel::EmbeddingDenseBackward { .. },
                1
            )
    )
}

/// The dtype of output slot `i` of `k` (f32 but for pooling indices and dropout masks).
fn output_dtype(k: &Kernel, i: usize) -> DType {
    match (k, i) {
        (Kernel::MaxPool2dIndices { .. }, 1) => DType::I64,
        (Kernel::Dropout { .. }, 1) => DType::Bool,
        _ => DType::F32,
    }
}

/// Whether input slot `i` of `k` is a boolean mask.
fn is_mask_slot(k: &Kernel, i: usize) -> bool {
    matches!(
        (k, i),
        (Kernel::DropoutBackward { .. }, 1) | (Kernel::MaskMul, 1)
    )
}

/// Kernels whose operands may be of any dtype, all alike (byte copies, integer counters).
fn any_dtype(k: &Kernel) -> bool {
    matches!(
        k,
        Kernel::CopyInto | Kernel::AddScalar { .. } | Kernel::Reshape
    )
}

/// Outputs of a kernel that takes as many as the op has (`split`).
const VARIADIC: usize = usize::MAX;

/// Number of (inputs, outputs) a kernel takes; `None` inputs for variadic `concat`,
/// [`VARIADIC`] outputs for `split`.
fn arity(k: &Kernel) -> (Option<usize>, usize) {
    use Kernel::*;
    match k {
        Relu
        | Gelu
        | GlobalAvgPool
        | BiasAddGrad { .. }
        | GlobalAvgPoolGrad
        | Reshape
        | Transpose { .. }
        | Slice { .. }
        | Upsample2x
        | Upsample2xGrad
        | MaxPool2d { .. }
        | Softmax { .. } => (Some(1), 1),
        BatchNorm { .. } | LayerNorm { .. } => (Some(3), 3),
        BatchNormGrad | LayerNormGrad => (Some(5), 3),
        Concat { .. } => (None, 1),
        Split { .. } => (Some(1), VARIADIC),
        SgdUpdate { .. } | CopyInto => (Some(2), 0),
        ConvGrouped { bias, .. } => (Some(2 + usize::from(*bias)), 1),
        Bernoulli { .. } => (Some(1), 1),
        Zeros { inputs } => (Some(*inputs), 1),
        Dropout { .. } => (Some(1), 2),
        DropoutBackward { .. } | MaskMul => (Some(2), 1),
        Unbind { .. } => (Some(1), VARIADIC),
        Stack { .. } => (None, 1),
        Assign => (Some(2), 1),
        ConvBackward { mask, .. } | BatchNormBackward { mask } => {
            let n = mask.iter().filter(|m| **m).count();
            (
                Some(if matches!(k, ConvBackward { .. }) {
                    3
                } else {
                    5
                }),
                n,
            )
        }
        BatchNormUpdateStats { .. } => (Some(4), 2),
        AddScalar { .. }
        | MulScalar { .. }
        | DivScalar { .. }
        | AvgPool2d { .. }
        | Reduce { .. }
        | Expand
        | Fill { .. }
        | Pointwise(_)
        | LogSoftmax => (Some(1), 1),
        LayerNormBackward { mask } => (Some(6), mask.iter().filter(|m| **m).count()),
        MaxPool2dIndices { .. } => (Some(1), 2),
        MaxPool2dIndicesBackward { .. } | AddMm { .. } => (Some(3), 1),
        NllLoss { .. } => (Some(2), 2),
        NllLossBackward { .. } => (Some(4), 1),
        _ => (Some(2), 1),
    }
}

/// Checks the operands of `k`; the error says what does not fit.
pub fn check(k: &Kernel, ins: &[Operand], outs: &[Operand]) -> R {
    let (n_in, n_out) = arity(k);
    let n_out = if n_out == VARIADIC {
        outs.len().max(1)
    } else {
        n_out
    };
    let n_in = n_in.unwrap_or(ins.len().max(1));
    for (what, expected, found) in [("inputs", n_in, ins.len()), ("outputs", n_out, outs.len())] {
        if expected != found {
            return Err(KernelError::Arity {
                what,
                expected,
                found,
            });
        }
    }
    if any_dtype(k) {
        let d = ins[0].dtype;
        for (i, o) in ins.iter().chain(outs).enumerate() {
            let ok = matches!(d, DType::F32 | DType::I64) && o.dtype == d;
            dtype(
                format!("operand {i}"),
                ok,
                "f32 like the others, or i64 like the others",
                o.dtype,
            )?;
        }
    } else {
        for (i, o) in ins.iter().enumerate() {
            if is_index_slot(k, i) {
                let ok = matches!(o.dtype, DType::I64 | DType::I32);
                dtype(format!("input {i}"), ok, "i64 or i32 indices", o.dtype)?;
            } else if is_mask_slot(k, i) {
                dtype(
                    format!("input {i}"),
                    o.dtype == DType::Bool,
                    "a bool mask",
                    o.dtype,
                )?;
            } else {
                dtype(format!("input {i}"), o.dtype == DType::F32, "f32", o.dtype)?;
            }
        }
        for (i, o) in outs.iter().enumerate() {
            let want = output_dtype(k, i);
            dtype(
                format!("output {i}"),
                o.dtype == want,
                want.as_str(),
                o.dtype,
            )?;
        }
    }
    let s = |i: usize| ins[i].shape.as_slice();
    let o = |i: usize| outs[i].shape.as_slice();
    check_shapes(k, ins.len(), outs.len(), &s, &o)
}

fn check_shapes<'a>(
    k: &Kernel,
    n_in: usize,
    n_out: usize,
    s: &dyn Fn(usize) -> &'a [usize],
    o: &dyn Fn(usize) -> &'a [usize],
) -> R {
    use Kernel::*;
    match k {
        MatMul { transpose_b } => {
            let (a, b) = (s(0), s(1));
            expect(a.len() >= 2 && b.len() == 2, || {
                format!("ranks {a:?} @ {b:?}")
            })?;
            let (kk, n) = if *transpose_b {
                (b[1], b[0])
            } else {
                (b[0], b[1])
            };
            expect(a[a.len() - 1] == kk, || {
                format!("inner dims of {a:?} @ {b:?}")
            })?;
            eq("output", o(0), &[&a[..a.len() - 1], &[n]].concat())
        }
        MatMulTn => {
            let (p, q) = (s(0), s(1));
            expect(!p.is_empty() && !q.is_empty(), || "scalar operand".into())?;
            let rows = |x: &[usize]| x[..x.len() - 1].iter().product::<usize>();
            expect(rows(p) == rows(q), || {
                format!("rows of {p:?} and {q:?} differ")
            })?;
            eq("output", o(0), &[p[p.len() - 1], q[q.len() - 1]])
        }
        BatchedMatMul {
            transpose_a,
            transpose_b,
        } => {
            let (a, b) = (s(0), s(1));
            let r = a.len();
            expect(r >= 3 && b.len() == r && a[..r - 2] == b[..r - 2], || {
                format!("batched operands {a:?}, {b:?}")
            })?;
            let (m, ka) = if *transpose_a {
                (a[r - 1], a[r - 2])
            } else {
                (a[r - 2], a[r - 1])
            };
            let (kb, n) = if *transpose_b {
                (b[r - 1], b[r - 2])
            } else {
                (b[r - 2], b[r - 1])
            };
            expect(ka == kb, || format!("inner dims of {a:?} @ {b:?}"))?;
            eq("output", o(0), &[&a[..r - 2], &[m, n]].concat())
        }
        BiasAdd { axis } => {
            let x = s(0);
            expect(*axis < x.len() && s(1) == [x[*axis]], || {
                format!("bias {:?} does not fit axis {axis} of {x:?}", s(1))
            })?;
            eq("output", o(0), x)
        }
        BiasAddGrad { axis } => {
            expect(*axis < s(0).len(), || format!("axis {axis} of {:?}", s(0)))?;
            eq("output", o(0), &[s(0)[*axis]])
        }
        Add | Mul | ReluGrad | GeluGrad | SoftmaxGrad { .. } => {
            eq("input 1", s(1), s(0))?;
            eq("output", o(0), s(0))
        }
        Relu | Gelu => eq("output", o(0), s(0)),
        Conv2d { stride, padding } => {
            let (x, w) = (s(0), s(1));
            expect(x.len() == 4 && w.len() == 4 && x[1] == w[1], || {
                format!("conv of {x:?} by {w:?}")
            })?;
            let out = conv_out(x, w, *stride, *padding)?;
            eq("output", o(0), &out)
        }
        Conv2dGradInput { stride, padding } => {
            let (dy, w, dx) = (s(0), s(1), o(0));
            expect(dx.len() == 4 && w.len() == 4 && dx[1] == w[1], || {
                format!("dx {dx:?} and weight {w:?}")
            })?;
            eq("dy", dy, &conv_out(dx, w, *stride, *padding)?)
        }
        Conv2dGradWeight { stride, padding } => {
            let (x, dy, dw) = (s(0), s(1), o(0));
            expect(x.len() == 4 && dw.len() == 4 && x[1] == dw[1], || {
                format!("x {x:?} and dw {dw:?}")
            })?;
            eq("dy", dy, &conv_out(x, dw, *stride, *padding)?)
        }
        MaxPool2d {
            kernel,
            stride,
            padding,
        } => eq("output", o(0), &pool_out(s(0), *kernel, *stride, *padding)?),
        MaxPool2dGrad {
            kernel,
            stride,
            padding,
        } => {
            eq("dy", s(1), &pool_out(s(0), *kernel, *stride, *padding)?)?;
            eq("output", o(0), s(0))
        }
        GlobalAvgPool => {
            expect(s(0).len() == 4, || format!("rank-4 input, got {:?}", s(0)))?;
            eq("output", o(0), &s(0)[..2])
        }
        GlobalAvgPoolGrad => {
            expect(o(0).len() == 4, || format!("rank-4 output, got {:?}", o(0)))?;
            eq("dy", s(0), &o(0)[..2])
        }
        BatchNorm { .. } | LayerNorm { .. } => {
            let x = s(0);
            let (feat, stat) = norm_shapes(k, x)?;
            eq("gamma", s(1), &[feat])?;
            eq("beta", s(2), &[feat])?;
            eq("output", o(0), x)?;
            // ATen keeps the normalised axis as 1 (`[B, T, 1]`); the builder drops it.
            let kept: Vec<usize> = [stat.as_slice(), &[1]].concat();
            let stat_ok = |t: &[usize]| {
                t == stat.as_slice() || (matches!(k, LayerNorm { .. }) && t == kept.as_slice())
            };
            expect(stat_ok(o(1)), || {
                format!("mean has shape {:?}, expected {stat:?}", o(1))
            })?;
            expect(stat_ok(o(2)), || {
                format!("spread has shape {:?}, expected {stat:?}", o(2))
            })
        }
        BatchNormGrad | LayerNormGrad => {
            let x = s(0);
            let (feat, stat) = norm_shapes(k, x)?;
            eq("gamma", s(1), &[feat])?;
            eq("mean", s(2), &stat)?;
            eq("spread", s(3), &stat)?;
            eq("dy", s(4), x)?;
            eq("dx", o(0), x)?;
            eq("dgamma", o(1), &[feat])?;
            eq("dbeta", o(2), &[feat])
        }
        Softmax { causal, .. } => {
            let x = s(0);
            let r = x.len();
            expect(
                r >= 1 && (!causal || (r >= 2 && x[r - 1] == x[r - 2])),
                || format!("softmax over {x:?}"),
            )?;
            eq("output", o(0), x)
        }
        Embedding => {
            let (ids, w) = (s(0), s(1));
            expect(w.len() == 2, || format!("weight {w:?} must be [V, D]"))?;
            eq("output", o(0), &[ids, &[w[1]]].concat())
        }
        EmbeddingGrad => {
            let (ids, dw) = (s(0), o(0));
            expect(dw.len() == 2, || format!("output {dw:?} must be [V, D]"))?;
            eq("dy", s(1), &[ids, &[dw[1]]].concat())
        }
        Reshape => {
            let n = |x: &[usize]| x.iter().product::<usize>();
            expect(n(s(0)) == n(o(0)), || {
                format!("reshape {:?} to {:?}", s(0), o(0))
            })
        }
        Transpose { perm } => {
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
        Concat { axis } => {
            let mut out = s(0).to_vec();
            expect(*axis < out.len(), || format!("axis {axis} of {out:?}"))?;
            out[*axis] = 0;
            for i in 0..n_in {
                let x = s(i);
                let agrees =
                    x.len() == out.len() && (0..x.len()).all(|d| d == *axis || x[d] == out[d]);
                expect(agrees, || format!("input {i} {x:?} off axis {axis}"))?;
                out[*axis] += x[*axis];
            }
            eq("output", o(0), &out)
        }
        Slice { axis, start, end } => {
            let x = s(0);
            expect(*axis < x.len() && start <= end && *end <= x[*axis], || {
                format!("slice {start}..{end} of axis {axis} of {x:?}")
            })?;
            let mut out = x.to_vec();
            out[*axis] = end - start;
            eq("output", o(0), &out)
        }
        Upsample2x => {
            let x = s(0);
            expect(x.len() == 4, || format!("rank-4 input, got {x:?}"))?;
            eq("output", o(0), &[x[0], x[1], 2 * x[2], 2 * x[3]])
        }
        Upsample2xGrad => {
            let dx = o(0);
            expect(dx.len() == 4, || format!("rank-4 output, got {dx:?}"))?;
            eq("dy", s(0), &[dx[0], dx[1], 2 * dx[2], 2 * dx[3]])
        }
        CrossEntropy | CrossEntropyGrad => {
            let (logits, labels) = (s(0), s(1));
            expect(
                logits.len() >= 2 && labels == &logits[..logits.len() - 1],
                || format!("logits {logits:?} need labels [*], got {labels:?}"),
            )?;
            expect(logits[logits.len() - 1] > 0, || "no classes".into())?;
            let out: &[usize] = if matches!(k, CrossEntropy) {
                &[]
            } else {
                logits
            };
            expect(
                o(0).iter().product::<usize>() == out.iter().product::<usize>(),
                || format!("output {:?}, expected {out:?}", o(0)),
            )
        }
        SgdUpdate { .. } => eq("gradient", s(1), s(0)),
        ConvGrouped {
            stride,
            padding,
            groups,
            bias,
        } => {
            let (x, w) = (s(0), s(1));
            grouped(x, w, *groups)?;
            if *bias {
                eq("bias", s(2), &[w[0]])?;
            }
            eq("output", o(0), &conv_out(x, w, *stride, *padding)?)
        }
        Bernoulli { .. } => eq("output", o(0), s(0)),
        Zeros { .. } => Ok(()),
        Dropout { .. } => {
            eq("output", o(0), s(0))?;
            eq("mask", o(1), s(0))
        }
        DropoutBackward { .. } | MaskMul => {
            eq("mask", s(1), s(0))?;
            eq("output", o(0), s(0))
        }
        Unbind { axis } => {
            let x = s(0);
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
        Stack { axis } => {
            let x = s(0);
            expect(*axis <= x.len(), || format!("axis {axis} of {x:?} stacked"))?;
            for i in 1..n_in {
                eq("input", s(i), x)?;
            }
            let mut want = x.to_vec();
            want.insert(*axis, n_in);
            eq("output", o(0), &want)
        }
        Assign => {
            let (x, y) = (s(1), o(0));
            eq("output", y, s(0))?;
            let fits = broadcasts(x, y);
            expect(fits, || format!("source {x:?} does not broadcast to {y:?}"))
        }
        ConvBackward {
            stride,
            padding,
            groups,
            mask,
        } => {
            let (dy, x, w) = (s(0), s(1), s(2));
            grouped(x, w, *groups)?;
            eq("dy", dy, &conv_out(x, w, *stride, *padding)?)?;
            let wanted: [&[usize]; 3] = [x, w, &[w[0]]];
            masked(mask, &wanted, o)
        }
        BatchNormBackward { mask } => {
            let x = s(1);
            expect(x.len() >= 2, || format!("batch norm of {x:?}"))?;
            eq("dy", s(0), x)?;
            for (i, what) in [(2, "gamma"), (3, "mean"), (4, "invstd")] {
                eq(what, s(i), &[x[1]])?;
            }
            masked(mask, &[x, &[x[1]], &[x[1]]], o)
        }
        BatchNormUpdateStats { .. } => {
            for i in 1..4 {
                eq("statistic", s(i), s(0))?;
            }
            expect(s(0).len() == 1, || {
                format!("statistics {:?} must be [C]", s(0))
            })?;
            eq("mean", o(0), s(0))?;
            eq("var", o(1), s(0))
        }
        CopyInto => eq("source", s(1), s(0)),
        AddScalar { .. } | MulScalar { .. } | DivScalar { .. } | Fill { .. } | LogSoftmax => {
            eq("output", o(0), s(0))
        }
        ThresholdBackward { .. } | LogSoftmaxBackward => {
            eq("input 1", s(1), s(0))?;
            eq("output", o(0), s(0))
        }
        MaxPool2dIndices {
            kernel,
            stride,
            padding,
        } => {
            let y = pool_out(s(0), *kernel, *stride, *padding)?;
            eq("output", o(0), &y)?;
            eq("indices", o(1), &y)
        }
        MaxPool2dIndicesBackward {
            kernel,
            stride,
            padding,
        } => {
            let y = pool_out(s(1), *kernel, *stride, *padding)?;
            eq("dy", s(0), &y)?;
            eq("indices", s(2), &y)?;
            eq("output", o(0), s(1))
        }
        AvgPool2d {
            kernel,
            stride,
            padding,
        } => eq("output", o(0), &pool_out(s(0), *kernel, *stride, *padding)?),
        AvgPool2dBackward {
            kernel,
            stride,
            padding,
        } => {
            eq("dy", s(0), &pool_out(s(1), *kernel, *stride, *padding)?)?;
            eq("output", o(0), s(1))
        }
        Reduce { start, end, .. } => {
            let x = s(0);
            expect(start <= end && *end <= x.len(), || {
                format!("axes {start}..{end} of {x:?}")
            })?;
            let kept: usize = x[..*start].iter().chain(&x[*end..]).product();
            expect(o(0).iter().product::<usize>() == kept, || {
                format!(
                    "output {:?} of a reduction of {x:?} over axes {start}..{end}",
                    o(0)
                )
            })
        }
        Expand => {
            let (x, y) = (s(0), o(0));
            let fits = broadcasts(x, y);
            expect(fits, || format!("{x:?} does not broadcast to {y:?}"))
        }
        AddMm { transpose_b } => {
            let (bias, a, b) = (s(0), s(1), s(2));
            expect(a.len() == 2 && b.len() == 2, || {
                format!("addmm of {a:?} @ {b:?}")
            })?;
            let (k, n) = if *transpose_b {
                (b[1], b[0])
            } else {
                (b[0], b[1])
            };
            expect(a[1] == k, || format!("addmm of {a:?} @ {b:?}"))?;
            expect(
                bias.iter().product::<usize>() == n && bias.last() == Some(&n),
                || format!("bias {bias:?} for {n} columns"),
            )?;
            eq("output", o(0), &[a[0], n])
        }
        NllLoss { .. } => {
            let (logp, t) = (s(0), s(1));
            expect(logp.len() == 2 && t == [logp[0]], || {
                format!("log-probabilities {logp:?} need targets [N], got {t:?}")
            })?;
            expect(o(0).is_empty() && o(1).is_empty(), || {
                "loss and total weight are scalars".into()
            })
        }
        Pointwise(_) => eq("output", o(0), s(0)),
        Split { axis, size } => {
            let x = s(0);
            expect(*axis < x.len(), || format!("axis {axis} of {x:?}"))?;
            let pieces = x[*axis].div_ceil(*size).max(1);
            expect(pieces == n_out, || {
                format!("{pieces} pieces of {x:?}, {n_out} outputs")
            })?;
            for i in 0..n_out {
                let mut want = x.to_vec();
                want[*axis] = (*size).min(x[*axis] - i * size);
                eq("piece", o(i), &want)?;
            }
            Ok(())
        }
        Broadcast { .. } => {
            let y = o(0);
            for i in 0..2 {
                let x = s(i);
                let fits = broadcasts(x, y);
                expect(fits, || {
                    format!("input {i} {x:?} does not broadcast to {y:?}")
                })?;
            }
            let want: Vec<usize> = (0..y.len())
                .map(|d| {
                    let at = |x: &[usize]| (d + x.len()).checked_sub(y.len()).map_or(1, |k| x[k]);
                    at(s(0)).max(at(s(1)))
                })
                .collect();
            eq("output", y, &want)
        }
        PointwiseBackward(_) | SoftmaxBackward => {
            eq("input 1", s(1), s(0))?;
            eq("output", o(0), s(0))
        }
        EmbeddingRows => {
            let (w, ids) = (s(0), s(1));
            expect(w.len() == 2, || format!("weight {w:?} must be [V, D]"))?;
            eq("output", o(0), &[ids, &[w[1]]].concat())
        }
        EmbeddingDenseBackward { padding_idx } => {
            let (ids, dw) = (s(1), o(0));
            expect(
                dw.len() == 2 && padding_idx.is_none_or(|p| p < dw[0]),
                || format!("output {dw:?} must be [V, D] (padding row {padding_idx:?})"),
            )?;
            eq("dy", s(0), &[ids, &[dw[1]]].concat())
        }
        LayerNormBackward { mask } => {
            let x = s(1);
            expect(!x.is_empty(), || "layer norm of a scalar".into())?;
            let d = x[x.len() - 1];
            let rows = x.iter().product::<usize>() / d.max(1);
            eq("dy", s(0), x)?;
            for (i, what) in [(2, "mean"), (3, "rstd")] {
                expect(s(i).iter().product::<usize>() == rows, || {
                    format!("{what} {:?} needs one value per row of {x:?}", s(i))
                })?;
            }
            eq("gamma", s(4), &[d])?;
            eq("beta", s(5), &[d])?;
            masked(mask, &[x, &[d], &[d]], o)
        }
        NllLossBackward { .. } => {
            let (dl, logp, t, tw) = (s(0), s(1), s(2), s(3));
            expect(
                dl.is_empty() && tw.is_empty() && logp.len() == 2 && t == [logp[0]],
                || format!("nll_loss_backward of {logp:?} with targets {t:?}"),
            )?;
            eq("output", o(0), logp)
        }
    }
}

/// Whether `x` broadcasts to `y`: axes aligned on the right, each equal or 1 in `x`.
pub(crate) fn broadcasts(x: &[usize], y: &[usize]) -> bool {
    x.len() <= y.len()
        && x.iter()
            .rev()
            .zip(y.iter().rev())
            .all(|(a, b)| a == b || *a == 1)
}

/// `x [N, C, H, W]` and `w [O, C/groups, kh, kw]` with `groups` dividing `C` and `O`.
fn grouped(x: &[usize], w: &[usize], groups: usize) -> R {
    expect(
        x.len() == 4 && w.len() == 4 && groups > 0 && x[1] == w[1] * groups && w[0] % groups == 0,
        || format!("conv of {x:?} by {w:?} in {groups} groups"),
    )
}

/// The results a mask asks for, in order, have the wanted shapes.
fn masked<'a>(mask: &[bool; 3], wanted: &[&[usize]; 3], o: &dyn Fn(usize) -> &'a [usize]) -> R {
    let present = (0..3).filter(|&i| mask[i]);
    for (slot, i) in present.enumerate() {
        eq("result", o(slot), wanted[i])?;
    }
    Ok(())
}

fn conv_out(
    x: &[usize],
    w: &[usize],
    stride: usize,
    pad: usize,
) -> Result<Vec<usize>, KernelError> {
    let ho = window_out(x[2], w[2], stride, pad);
    let wo = window_out(x[3], w[3], stride, pad);
    match (ho, wo) {
        (Some(ho), Some(wo)) => Ok(vec![x[0], w[0], ho, wo]),
        _ => Err(KernelError::Operands(format!(
            "window {w:?} does not fit {x:?}"
        ))),
    }
}

fn pool_out(x: &[usize], k: usize, stride: usize, pad: usize) -> Result<Vec<usize>, KernelError> {
    expect(x.len() == 4 && 2 * pad <= k, || {
        format!("pool {k}x{k} (padding {pad}) of {x:?}")
    })?;
    match (
        window_out(x[2], k, stride, pad),
        window_out(x[3], k, stride, pad),
    ) {
        (Some(ho), Some(wo)) => Ok(vec![x[0], x[1], ho, wo]),
        _ => Err(KernelError::Operands(format!(
            "window {k} does not fit {x:?}"
        ))),
    }
}

/// (features, statistics shape) of a norm over `x`.
fn norm_shapes(k: &Kernel, x: &[usize]) -> Result<(usize, Vec<usize>), KernelError> {
    if matches!(k, Kernel::BatchNorm { .. } | Kernel::BatchNormGrad) {
        expect(x.len() >= 2, || format!("batch norm of {x:?}"))?;
        Ok((x[1], vec![x[1]]))
    } else {
        expect(!x.is_empty(), || "layer norm of a scalar".into())?;
        Ok((x[x.len() - 1], x[..x.len() - 1].to_vec()))
    }
}
