//! Embedding lookups (the builder's `(ids, w)` and ATen's `(w, ids)` operand orders) and
//! their gradients.

use super::check::{eq, expect};
use super::{Cx, Family, Slot};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: Embedding EmbeddingGrad AtenEmbedding AtenEmbeddingBackward;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Embedding {
    /// `(ids [*], w [V, D]) -> [*, D]`.
    Embedding,
    /// `(ids [*], dy [*, D]) -> dw [V, D]`, rows accumulated in id order.
    EmbeddingGrad,
    /// `(weight [V, D], ids [*]) -> [*, D]` (ATen's operand order).
    EmbeddingRows,
    /// `(dy [*, D], ids [*]) -> dw [V, D]`, the row `padding_idx` (if any) left zero.
    EmbeddingDenseBackward { padding_idx: Option<usize> },
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Embedding>, ExecError> {
    use OpKind as K;
    Ok(Some(match kind {
        K::Embedding => Embedding::Embedding,
        K::EmbeddingGrad => Embedding::EmbeddingGrad,
        K::AtenEmbedding => Embedding::EmbeddingRows,
        K::AtenEmbeddingBackward => {
            let p = cx.a.i64_or("padding_idx", -1)?;
            Embedding::EmbeddingDenseBackward {
                padding_idx: usize::try_from(p).ok(),
            }
        }
        _ => return Ok(None),
    }))
}

impl Family for Embedding {
    fn arity(&self) -> (Option<usize>, usize) {
        (Some(2), 1)
    }

    fn input(&self, i: usize) -> Slot {
        let ids = match self {
            Embedding::Embedding | Embedding::EmbeddingGrad => 0,
            _ => 1,
        };
        if i == ids {
            Slot::Index
        } else {
            Slot::Data
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            Embedding::Embedding | Embedding::EmbeddingRows => {
                let (ids, w) = match self {
                    Embedding::Embedding => (s(0), s(1)),
                    _ => (s(1), s(0)),
                };
                expect(w.len() == 2, || format!("weight {w:?} must be [V, D]"))?;
                eq("output", o(0), &[ids, &[w[1]]].concat())
            }
            Embedding::EmbeddingGrad => {
                let (ids, dw) = (s(0), o(0));
                expect(dw.len() == 2, || format!("output {dw:?} must be [V, D]"))?;
                eq("dy", s(1), &[ids, &[dw[1]]].concat())
            }
            Embedding::EmbeddingDenseBackward { padding_idx } => {
                let (ids, dw) = (s(1), o(0));
                expect(
                    dw.len() == 2 && padding_idx.is_none_or(|p| p < dw[0]),
                    || format!("output {dw:?} must be [V, D] (padding row {padding_idx:?})"),
                )?;
                eq("dy", s(0), &[ids, &[dw[1]]].concat())
            }
        }
    }
}
