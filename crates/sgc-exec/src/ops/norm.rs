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
    BatchNorm { eps: f32 },
    /// `(x, gamma, mean, invstd, dy) -> (dx, dgamma, dbeta)`.
    BatchNormGrad,
    /// `(x, gamma, beta) -> (y, mean, rstd)` over the last axis.
    LayerNorm { eps: f32 },
    /// `(x, gamma, mean, rstd, dy) -> (dx, dgamma, dbeta)`.
    LayerNormGrad,
    /// `aten.native_batch_norm_backward`: `(dy, x, gamma, mean, invstd)` -> the results
    /// `mask` asks for, of `(dx, dgamma, dbeta)`.
    BatchNormBackward { mask: [bool; 3] },
    /// `native_layer_norm_backward`: `(dy, x, mean, rstd, gamma, beta)` -> the results
    /// `mask` asks for, of `(dx, dgamma, dbeta)`.
    LayerNormBackward { mask: [bool; 3] },
    /// `sgc.batch_norm_update_stats`: `(running_mean, running_var, mean, invstd)` ->
    /// `(lerp(running_mean, mean, momentum), lerp(running_var, unbiased var, momentum))`.
    BatchNormUpdateStats { momentum: f32, eps: f32, count: u64 },
    /// Softmax over the last axis of `scale * x`, optionally causally masked.
    Softmax { scale: f32, causal: bool },
    /// `(y, dy) -> scale * y * (dy - sum(dy * y))`.
    SoftmaxGrad { scale: f32 },
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
    let eps = || a.f32_or("eps", Some(1e-5));
    Ok(Some(match kind {
        K::BatchNorm | K::AtenBatchNorm => Norm::BatchNorm { eps: eps()? },
        K::BatchNormGrad => Norm::BatchNormGrad,
        K::LayerNorm => Norm::LayerNorm { eps: eps()? },
        K::LayerNormGrad => Norm::LayerNormGrad,
        K::Softmax => Norm::Softmax {
            scale: a.f32_or("scale", Some(1.0))?,
            causal: a.bool_or("causal", false)?,
        },
        K::SoftmaxGrad => Norm::SoftmaxGrad {
            scale: a.f32_or("scale", Some(1.0))?,
        },
        K::AtenBatchNormBackward => {
            a.flag("train", true, "training mode")?;
            Norm::BatchNormBackward { mask: a.mask()? }
        }
        K::BatchNormUpdateStats => Norm::BatchNormUpdateStats {
            momentum: a.f32_or("momentum", None)?,
            eps: a.f32_or("eps", None)?,
            count: a
                .get("count")
                .and_then(Value::as_u64)
                .filter(|&c| c > 1)
                .ok_or_else(|| a.err("`count` must be an integer above 1".into()))?,
        },
        K::AtenLayerNorm => {
            if normalized_axes(cx) != 1 {
                return Err(a.err("`normalized_shape`: only a norm over the last axis runs".into()));
            }
            Norm::LayerNorm { eps: eps()? }
        }
        K::AtenLayerNormBackward => {
            if normalized_axes(cx) != 1 || cx.inputs() != 6 {
                return Err(
                    a.err("only a norm over the last axis with weight and bias runs".into())
                );
            }
            Norm::LayerNormBackward { mask: a.mask()? }
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

/// Axes of a layer norm's `normalized_shape` (1 when absent).
fn normalized_axes(cx: &Cx) -> usize {
    cx.a.get("normalized_shape")
        .and_then(Value::as_array)
        .map_or(1, Vec::len)
}

impl Family for Norm {
    fn arity(&self) -> (Option<usize>, usize) {
        let results = |mask: &[bool; 3]| mask.iter().filter(|m| **m).count();
        match self {
            Norm::BatchNorm { .. } | Norm::LayerNorm { .. } => (Some(3), 3),
            Norm::BatchNormGrad | Norm::LayerNormGrad => (Some(5), 3),
            Norm::BatchNormBackward { mask } => (Some(5), results(mask)),
            Norm::LayerNormBackward { mask } => (Some(6), results(mask)),
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
                eq("gamma", s(1), &[feat])?;
                eq("mean", s(2), &stat)?;
                eq("spread", s(3), &stat)?;
                eq("dy", s(4), x)?;
                eq("dx", o(0), x)?;
                eq("dgamma", o(1), &[feat])?;
                eq("dbeta", o(2), &[feat])
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
            Norm::LayerNormBackward { mask } => {
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
                masked(mask, &[x, &[d], &[d]], outs)
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
    /// (features, statistics shape) of a norm over `x`.
    fn dims(&self, x: &[usize]) -> Result<(usize, Vec<usize>), KernelError> {
        if matches!(self, Norm::BatchNorm { .. } | Norm::BatchNormGrad) {
            expect(x.len() >= 2, || format!("batch norm of {x:?}"))?;
            Ok((x[1], vec![x[1]]))
        } else {
            expect(!x.is_empty(), || "layer norm of a scalar".into())?;
            Ok((x[x.len() - 1], x[..x.len() - 1].to_vec()))
        }
    }

    /// `(x, gamma, beta) -> (y, mean, spread)` of batch and layer norm.
    fn forward_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        let x = s(0);
        let (feat, stat) = self.dims(x)?;
        eq("gamma", s(1), &[feat])?;
        eq("beta", s(2), &[feat])?;
        eq("output", o(0), x)?;
        // ATen keeps the normalised axis as 1 (`[B, T, 1]`); the builder drops it.
        let kept: Vec<usize> = [stat.as_slice(), &[1]].concat();
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
