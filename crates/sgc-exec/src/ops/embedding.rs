//! Embedding lookups (the builder's `(ids, w)` and ATen's `(w, ids)` operand orders) and
//! their gradients.

use super::check::{eq, expect};
use super::{Cx, Family, Slot};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: Embedding EmbeddingGrad AtenEmbedding AtenEmbeddingBackward AtenIndex AtenIndexPut;
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
    /// ATen's `index` with one index tensor, on axis 0: `(x [R, *rest], ids [*I]) ->
    /// [*I, *rest]`, an embedding lookup of rows of `prod(rest)` elements.
    IndexRows,
    /// ATen's `index_put` with one index tensor, on axis 0: `(x [R, *rest], ids [*I],
    /// values [*I, *rest]) -> x` with row `ids[r]` set to (`accumulate`: increased by)
    /// `values[r]`, rows in order.
    IndexPutRows { accumulate: bool },
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
        K::AtenIndex | K::AtenIndexPut => {
            one_leading_index(cx)?;
            if kind == K::AtenIndex {
                Embedding::IndexRows
            } else {
                Embedding::IndexPutRows {
                    accumulate: cx.a.bool_or("accumulate", false)?,
                }
            }
        }
        _ => return Ok(None),
    }))
}

/// Refuses `indices` other than one tensor indexing axis 0 (`x[ids]`): no index tensor
/// after an absent entry (`x[:, ids]`, whose tensors the attribute places), and one tensor.
fn one_leading_index(cx: &Cx) -> Result<(), ExecError> {
    let a = &cx.a;
    if let Some(v) = a.get("indices") {
        let leading = v
            .as_array()
            .is_some_and(|l| l.len() == 1 && l[0].as_str() == Some("tensor"));
        if !leading {
            return Err(a.err(format!(
                "`indices` = {v}: only one index tensor, on axis 0 (x[ids]), runs"
            )));
        }
    }
    let others = if cx.op.kind == Some(OpKind::AtenIndexPut) {
        2
    } else {
        1
    };
    let tensors = cx.op.inputs.len().saturating_sub(others);
    if tensors != 1 {
        return Err(a.err(format!(
            "{tensors} index tensors: only one index tensor, on axis 0 (x[ids]), runs"
        )));
    }
    Ok(())
}

impl Family for Embedding {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Embedding::IndexPutRows { .. } => (Some(3), 1),
            _ => (Some(2), 1),
        }
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
            Embedding::IndexRows => {
                let (x, ids) = (s(0), s(1));
                expect(!x.is_empty(), || "a scalar cannot be indexed".to_string())?;
                eq("output", o(0), &[ids, &x[1..]].concat())
            }
            Embedding::IndexPutRows { .. } => {
                let (x, ids) = (s(0), s(1));
                expect(!x.is_empty(), || "a scalar cannot be indexed".to_string())?;
                eq("values", s(2), &[ids, &x[1..]].concat())?;
                eq("output", o(0), x)
            }
        }
    }
}
