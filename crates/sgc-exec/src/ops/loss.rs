//! Losses over the last axis: the builder's cross-entropy over logits, the exporter's
//! negative log-likelihood over log-probabilities, and their gradients.

use super::check::{eq, expect};
use super::{Cx, Family, Slot};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use serde_json::Value;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: CrossEntropy CrossEntropyGrad AtenNllLoss AtenNllLossBackward AtenNllLoss2d
        AtenNllLoss2dBackward;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Loss {
    /// Mean over rows of `logsumexp(logits) - logits[label]`.
    CrossEntropy,
    /// `(softmax(logits) - onehot(label)) / rows`.
    CrossEntropyGrad,
    /// `(logp [N, C, *], target [N, *]) -> (loss [], total_weight [])`, mean over the
    /// targets that are not `ignore_index` (`nll_loss2d`: `*` is `H, W`).
    NllLoss { ignore_index: i64 },
    /// `(dloss [], logp [N, C, *], target [N, *], total_weight []) -> dlogp`.
    NllLossBackward { ignore_index: i64 },
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Loss>, ExecError> {
    use OpKind as K;
    let a = &cx.a;
    Ok(Some(match kind {
        K::CrossEntropy => Loss::CrossEntropy,
        K::CrossEntropyGrad => Loss::CrossEntropyGrad,
        K::AtenNllLoss | K::AtenNllLossBackward | K::AtenNllLoss2d | K::AtenNllLoss2dBackward => {
            let mean = |v: &Value| v.as_u64() == Some(1);
            a.require("reduction", mean, "reduction = mean (1)")?;
            a.require("weight", Value::is_null, "no class weights")?;
            let ignore_index = a.i64_or("ignore_index", -100)?;
            if matches!(kind, K::AtenNllLoss | K::AtenNllLoss2d) {
                Loss::NllLoss { ignore_index }
            } else {
                Loss::NllLossBackward { ignore_index }
            }
        }
        _ => return Ok(None),
    }))
}

impl Family for Loss {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Loss::CrossEntropy | Loss::CrossEntropyGrad => (Some(2), 1),
            Loss::NllLoss { .. } => (Some(2), 2),
            Loss::NllLossBackward { .. } => (Some(4), 1),
        }
    }

    fn input(&self, i: usize) -> Slot {
        match (self, i) {
            (Loss::NllLossBackward { .. }, 2) => Slot::Index,
            (Loss::NllLossBackward { .. }, _) => Slot::Data,
            (_, 1) => Slot::Index,
            _ => Slot::Data,
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            Loss::CrossEntropy | Loss::CrossEntropyGrad => {
                let (logits, labels) = (s(0), s(1));
                expect(
                    logits.len() >= 2 && labels == &logits[..logits.len() - 1],
                    || format!("logits {logits:?} need labels [*], got {labels:?}"),
                )?;
                expect(logits[logits.len() - 1] > 0, || "no classes".into())?;
                let out: &[usize] = if matches!(self, Loss::CrossEntropy) {
                    &[]
                } else {
                    logits
                };
                expect(
                    o(0).iter().product::<usize>() == out.iter().product::<usize>(),
                    || format!("output {:?}, expected {out:?}", o(0)),
                )
            }
            Loss::NllLoss { .. } => {
                let (logp, t) = (s(0), s(1));
                expect(targets_fit(logp, t), || {
                    format!("log-probabilities {logp:?} need targets [N, *], got {t:?}")
                })?;
                expect(o(0).is_empty() && o(1).is_empty(), || {
                    "loss and total weight are scalars".into()
                })
            }
            Loss::NllLossBackward { .. } => {
                let (dl, logp, t, tw) = (s(0), s(1), s(2), s(3));
                expect(
                    dl.is_empty() && tw.is_empty() && targets_fit(logp, t),
                    || format!("nll_loss_backward of {logp:?} with targets {t:?}"),
                )?;
                eq("output", o(0), logp)
            }
        }
    }
}

/// Targets `[N, *]` for log-probabilities `[N, C, *]`.
fn targets_fit(logp: &[usize], t: &[usize]) -> bool {
    logp.len() >= 2 && t.len() + 1 == logp.len() && t[0] == logp[0] && t[1..] == logp[2..]
}

/// `(classes, inner)` of log-probabilities `[N, C, *]`: `C`, and the positions per image.
pub(crate) fn classes(logp: &[usize]) -> (usize, usize) {
    (logp[1], logp[2..].iter().product())
}
