//! Normalisations (batch norm, layer norm, their gradients, the running statistics) and
//! softmax and log-softmax over the last axis.

use super::check::{eq, expect, masked};
use super::{Cx, Family};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use serde_json::Value;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: BatchNorm BatchNormGrad LayerNorm LayerNormGrad Softmax SoftmaxGrad AtenBatchNorm
        AtenLayerNorm AtenSoftmax AtenSafeSoftmax AtenBatchNormBackward BatchNormUpdateStats
        AtenLayerNormBackward AtenSoftmaxBackward AtenLogSoftmax AtenLogSoftmaxBackward;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Norm {
    /// `(x, gamma, beta) -> (y, mean, invstd)`, statistics over every axis but 1.
    BatchNorm { eps: f64 },
    /// `(x, gamma, mean, invstd, dy) -> (dx, dgamma, dbeta)`.
    BatchNormGrad,
    /// `(x, gamma, beta) -> (y, mean, rstd)` over the last `axes` axes (ATen's
    /// `normalized_shape`; gamma and beta have their shape). The CPU backend runs any
    /// count, CUDA one.
    LayerNorm { eps: f64, axes: usize },
    /// `(x, gamma, mean, rstd, dy) -> (dx, dgamma, dbeta)`.
    LayerNormGrad,
    /// `aten.native_batch_norm_backward`: `(dy, x, gamma, mean, invstd)` -> the results
    /// `mask` asks for, of `(dx, dgamma, dbeta)`.
    BatchNormBackward { mask: [bool; 3] },
    /// `native_layer_norm_backward`: `(dy, x, mean, rstd, gamma, beta)` -> the results
    /// `mask` asks for, of `(dx, dgamma, dbeta)`.
    LayerNormBackward { mask: [bool; 3], axes: usize },
    /// `sgc.batch_norm_update_stats`: `(running_mean, running_var, mean, invstd)` ->
    /// `(lerp(running_mean, mean, momentum), lerp(running_var, unbiased var, momentum))`.
    BatchNormUpdateStats { momentum: f64, eps: f64, count: u64 },
    /// Softmax over the last axis of `scale * x`, optionally causally masked.
    Softmax { scale: f64, causal: bool },
    /// `(y, dy) -> scale * y * (dy - sum(dy * y))`.
    SoftmaxGrad { scale: f64 },
    /// `_softmax_backward_data`: `(dy, y) -> y * (dy - sum(dy * y))` over the last axis.
    SoftmaxBackward,
    /// Log-softmax over `axis` (off the last axis: the operands moved to make it last).
    LogSoftmax { axis: usize },
    /// `(dy, y) -> dy - exp(y) * sum(dy)` over `axis`.
    LogSoftmaxBackward { axis: usize },
}

/// The permutation that moves `axis` of a rank-`rank` operand last, if it is not last.
pub fn axis_last(axis: usize, rank: usize) -> Option<Vec<usize>> {
    (axis + 1 < rank).then(|| (0..rank).filter(|&d| d != axis).chain([axis]).collect())
}

/// The inverse of permutation `perm`.
pub fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Norm>, ExecError> {
    use OpKind as K;
    let a = &cx.a;
    let eps = || a.f64_or("eps", Some(1e-5));
    Ok(Some(match kind {
        K::BatchNorm | K::AtenBatchNorm => Norm::BatchNorm { eps: eps()? },
        K::BatchNormGrad => Norm::BatchNormGrad,
        K::LayerNorm => Norm::LayerNorm {
            eps: eps()?,
            axes: 1,
        },
        K::LayerNormGrad => Norm::LayerNormGrad,
        K::Softmax => Norm::Softmax {
            scale: a.f64_or("scale", Some(1.0))?,
            causal: a.bool_or("causal", false)?,
        },
        K::SoftmaxGrad => Norm::SoftmaxGrad {
            scale: a.f64_or("scale", Some(1.0))?,
        },
        K::AtenBatchNormBackward => {
            a.flag("train", true, "training mode")?;
            Norm::BatchNormBackward { mask: a.mask()? }
        }
        K::BatchNormUpdateStats => Norm::BatchNormUpdateStats {
            momentum: a.f64_or("momentum", None)?,
            eps: a.f64_or("eps", None)?,
            count: a
                .get("count")
                .and_then(Value::as_u64)
                .filter(|&c| c > 1)
                .ok_or_else(|| a.err("`count` must be an integer above 1".into()))?,
        },
        K::AtenLayerNorm => Norm::LayerNorm {
            eps: eps()?,
            axes: normalized_axes(cx)?,
        },
        K::AtenLayerNormBackward => {
            if cx.inputs() != 6 {
                return Err(a.err("only a norm with weight and bias runs".into()));
            }
            Norm::LayerNormBackward {
                mask: a.mask()?,
                axes: normalized_axes(cx)?,
            }
        }
        K::AtenSoftmax | K::AtenSafeSoftmax => {
            a.last_axis(cx.rank(0))?;
            Norm::Softmax {
                scale: 1.0,
                causal: false,
            }
        }
        K::AtenSoftmaxBackward => {
            a.last_axis(cx.rank(0))?;
            Norm::SoftmaxBackward
        }
        K::AtenLogSoftmax => {
            a.flag("half_to_float", false, "half_to_float = false")?;
            Norm::LogSoftmax {
                axis: a.axis_of("dim", cx.rank(0))?,
            }
        }
        K::AtenLogSoftmaxBackward => Norm::LogSoftmaxBackward {
            axis: a.axis_of("dim", cx.rank(0))?,
        },
        _ => return Ok(None),
    }))
}

/// Axes of a layer norm's `normalized_shape` (1 when absent), at least one.
fn normalized_axes(cx: &Cx) -> Result<usize, ExecError> {
    let n =
        cx.a.get("normalized_shape")
            .and_then(Value::as_array)
            .map_or(1, Vec::len);
    if n == 0 {
        return Err(cx.a.err("`normalized_shape` is empty".into()));
    }
    Ok(n)
}

impl Family for Norm {
    fn arity(&self) -> (Option<usize>, usize) {
        let results = |mask: &[bool; 3]| mask.iter().filter(|m| **m).count();
        match self {
            Norm::BatchNorm { .. } | Norm::LayerNorm { .. } => (Some(3), 3),
            Norm::BatchNormGrad | Norm::LayerNormGrad => (Some(5), 3),
            Norm::BatchNormBackward { mask } => (Some(5), results(mask)),
            Norm::LayerNormBackward { mask, .. } => (Some(6), results(mask)),
            Norm::BatchNormUpdateStats { .. } => (Some(4), 2),
            Norm::Softmax { .. } | Norm::LogSoftmax { .. } => (Some(1), 1),
            Norm::SoftmaxGrad { .. } | Norm::SoftmaxBackward | Norm::LogSoftmaxBackward { .. } => {
                (Some(2), 1)
            }
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            Norm::BatchNorm { .. } | Norm::LayerNorm { .. } => self.forward_shapes(ins, outs),
            Norm::BatchNormGrad | Norm::LayerNormGrad => {
                let x = s(0);
                let (feat, stat) = self.dims(x)?;
                eq("gamma", s(1), &feat)?;
                eq("mean", s(2), &stat)?;
                eq("spread", s(3), &stat)?;
                eq("dy", s(4), x)?;
                eq("dx", o(0), x)?;
                eq("dgamma", o(1), &feat)?;
                eq("dbeta", o(2), &feat)
            }
            Norm::BatchNormBackward { mask } => {
                let x = s(1);
                expect(x.len() >= 2, || format!("batch norm of {x:?}"))?;
                eq("dy", s(0), x)?;
                for (i, what) in [(2, "gamma"), (3, "mean"), (4, "invstd")] {
                    eq(what, s(i), &[x[1]])?;
                }
                masked(mask, &[x, &[x[1]], &[x[1]]], outs)
            }
            Norm::LayerNormBackward { mask, axes } => {
                let x = s(1);
                expect(x.len() >= *axes, || {
                    format!("layer norm over {axes} axes of {x:?}")
                })?;
                let normed = &x[x.len() - axes..];
                let d: usize = normed.iter().product();
                let rows = x.iter().product::<usize>() / d.max(1);
                eq("dy", s(0), x)?;
                for (i, what) in [(2, "mean"), (3, "rstd")] {
                    expect(s(i).iter().product::<usize>() == rows, || {
                        format!("{what} {:?} needs one value per row of {x:?}", s(i))
                    })?;
                }
                eq("gamma", s(4), normed)?;
                eq("beta", s(5), normed)?;
                masked(mask, &[x, normed, normed], outs)
            }
            Norm::BatchNormUpdateStats { .. } => {
                for i in 1..4 {
                    eq("statistic", s(i), s(0))?;
                }
                expect(s(0).len() == 1, || {
                    format!("statistics {:?} must be [C]", s(0))
                })?;
                eq("mean", o(0), s(0))?;
                eq("var", o(1), s(0))
            }
            Norm::Softmax { causal, .. } => {
                let x = s(0);
                let r = x.len();
                expect(
                    r >= 1 && (!causal || (r >= 2 && x[r - 1] == x[r - 2])),
                    || format!("softmax over {x:?}"),
                )?;
                eq("output", o(0), x)
            }
            Norm::LogSoftmax { .. } => eq("output", o(0), s(0)),
            Norm::SoftmaxGrad { .. } | Norm::SoftmaxBackward | Norm::LogSoftmaxBackward { .. } => {
                eq("input 1", s(1), s(0))?;
                eq("output", o(0), s(0))
            }
        }
    }
}

impl Norm {
    /// (the shape of gamma and beta, the statistics' shape) of a norm over `x`.
    fn dims(&self, x: &[usize]) -> Result<(Vec<usize>, Vec<usize>), KernelError> {
        let axes = match self {
            Norm::BatchNorm { .. } | Norm::BatchNormGrad => {
                expect(x.len() >= 2, || format!("batch norm of {x:?}"))?;
                return Ok((vec![x[1]], vec![x[1]]));
            }
            Norm::LayerNorm { axes, .. } => *axes,
            _ => 1,
        };
        expect(x.len() >= axes && axes > 0, || {
            format!("layer norm over {axes} axes of {x:?}")
        })?;
        let at = x.len() - axes;
        Ok((x[at..].to_vec(), x[..at].to_vec()))
    }

    /// `(x, gamma, beta) -> (y, mean, spread)` of batch and layer norm.
    fn forward_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        let x = s(0);
        let (feat, stat) = self.dims(x)?;
        eq("gamma", s(1), &feat)?;
        eq("beta", s(2), &feat)?;
        eq("output", o(0), x)?;
        // ATen keeps the normalised axes as 1 (`[B, T, 1]`); the builder drops them.
        let kept: Vec<usize> = [stat.clone(), vec![1; feat.len()]].concat();
        let stat_ok = |t: &[usize]| {
            t == stat.as_slice() || (matches!(self, Norm::LayerNorm { .. }) && t == kept.as_slice())
        };
        expect(stat_ok(o(1)), || {
            format!("mean has shape {:?}, expected {stat:?}", o(1))
        })?;
        expect(stat_ok(o(2)), || {
            format!("spread has shape {:?}, expected {stat:?}", o(2))
        })
    }
}
