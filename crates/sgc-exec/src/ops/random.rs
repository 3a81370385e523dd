//! Random draws and their masks: `bernoulli`, dropout and its backward, and the masking
//! half of a dropout the exporter split (`mul.Tensor` by a boolean mask). Draws come from
//! a counter-based stream keyed by a seed from the op's name and the run: these ops are
//! never recomputed, so planned and unplanned runs draw the same values.

use super::check::eq;
use super::{name_seed, Cx, Family, Slot};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use sgc_ir::ops::OpKind;
use sgc_ir::DType;

// `mul.Tensor` by a mask is listed with the element-wise family, which runs its other forms.
kinds! {
    cuda: AtenBernoulli AtenDropout AtenDropoutBackward;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Random {
    /// `aten.bernoulli.p`: ones with probability `p`.
    Bernoulli { p: f64, seed: u64 },
    /// `aten.native_dropout`: `x -> (x * mask / (1 - p), mask)`, `mask` (bool) one with
    /// probability `1 - p`, drawn like [`Random::Bernoulli`].
    Dropout { p: f64, seed: u64 },
    /// `aten.native_dropout_backward`: `(dy, mask) -> dy * mask * scale`.
    DropoutBackward { scale: f64 },
    /// `aten.mul.Tensor(x, mask)` with a boolean mask of `x`'s shape: `x * mask` (the
    /// recomputable half of a dropout the exporter split, see `sgc_trace.exporter.trace`).
    MaskMul,
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Random>, ExecError> {
    use OpKind as K;
    let a = &cx.a;
    Ok(Some(match kind {
        K::AtenBernoulli => Random::Bernoulli {
            p: a.f64_of("p")?,
            seed: name_seed(&cx.op.name),
        },
        K::AtenDropout => {
            a.flag("train", true, "training mode")?;
            Random::Dropout {
                p: a.f64_of("p")?,
                seed: name_seed(&cx.op.name),
            }
        }
        K::AtenDropoutBackward => Random::DropoutBackward {
            scale: a.f64_of("scale")?,
        },
        K::AtenMulTensor if cx.inputs() == 2 && cx.is_bool(1) && cx.shape(0) == cx.shape(1) => {
            Random::MaskMul
        }
        _ => return Ok(None),
    }))
}

impl Family for Random {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Random::Bernoulli { .. } => (Some(1), 1),
            Random::Dropout { .. } => (Some(1), 2),
            Random::DropoutBackward { .. } | Random::MaskMul => (Some(2), 1),
        }
    }

    fn input(&self, i: usize) -> Slot {
        match (self, i) {
            (Random::DropoutBackward { .. } | Random::MaskMul, 1) => Slot::Mask,
            _ => Slot::Data,
        }
    }

    fn output_dtype(&self, i: usize) -> DType {
        match (self, i) {
            (Random::Dropout { .. }, 1) => DType::Bool,
            _ => DType::F32,
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            Random::Bernoulli { .. } => eq("output", o(0), s(0)),
            Random::Dropout { .. } => {
                eq("output", o(0), s(0))?;
                eq("mask", o(1), s(0))
            }
            Random::DropoutBackward { .. } | Random::MaskMul => {
                eq("mask", s(1), s(0))?;
                eq("output", o(0), s(0))
            }
        }
    }
}
