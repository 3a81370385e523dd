//! Embedding lookups and their gradient (rows accumulated in id order).

use super::{f, idx, Host, Indices, Io, R};
use crate::ops::embedding::Embedding;
use crate::real::Real;

/// `embedding`: row `ids[r]` of `w [V, D]` into row `r` of the output.
pub(crate) fn embedding<T: Real>(ids: &Indices, w: &[T], y: &mut [T], v: usize, d: usize) -> R {
    for r in 0..ids.len() {
        let id = ids.get(r, v)?;
        y[r * d..(r + 1) * d].copy_from_slice(&w[id * d..(id + 1) * d]);
    }
    Ok(())
}

/// `embedding_grad`: `dw[ids[r]] += dy[r]`, rows in order.
pub(crate) fn embedding_grad<T: Real>(
    ids: &Indices,
    dy: &[T],
    dw: &mut [T],
    v: usize,
    d: usize,
) -> R {
    dw.fill(T::zero());
    for r in 0..ids.len() {
        let id = ids.get(r, v)?;
        for j in 0..d {
            dw[id * d + j] += dy[r * d + j];
        }
    }
    Ok(())
}

/// Runs a kernel of the family.
pub(super) fn run<T: Host>(k: &Embedding, io: Io<T>) -> R {
    let dw = io.ops_out[0].shape.as_slice();
    match k {
        Embedding::Embedding => {
            let w = &io.ops_in[1].shape;
            embedding(idx(&io.ins[0])?, f(&io.ins[1])?, io.outs[0], w[0], w[1])
        }
        Embedding::EmbeddingGrad => {
            embedding_grad(idx(&io.ins[0])?, f(&io.ins[1])?, io.outs[0], dw[0], dw[1])
        }
        Embedding::EmbeddingRows => {
            let w = &io.ops_in[0].shape;
            embedding(idx(&io.ins[1])?, f(&io.ins[0])?, io.outs[0], w[0], w[1])
        }
        Embedding::IndexRows => {
            let x = &io.ops_in[0].shape;
            let rows = x.iter().skip(1).product();
            embedding(idx(&io.ins[1])?, f(&io.ins[0])?, io.outs[0], x[0], rows)
        }
        Embedding::IndexPutRows { accumulate } => {
            let x = &io.ops_in[0].shape;
            let d: usize = x.iter().skip(1).product();
            let (ids, values) = (idx(&io.ins[1])?, f(&io.ins[2])?);
            io.outs[0].copy_from_slice(f(&io.ins[0])?);
            for r in 0..ids.len() {
                let at = ids.get(r, x[0])? * d;
                let (row, src) = (&mut io.outs[0][at..at + d], &values[r * d..(r + 1) * d]);
                if *accumulate {
                    row.iter_mut().zip(src).for_each(|(y, &v)| *y += v);
                } else {
                    row.copy_from_slice(src);
                }
            }
            Ok(())
        }
        Embedding::EmbeddingDenseBackward { padding_idx } => {
            embedding_grad(idx(&io.ins[1])?, f(&io.ins[0])?, io.outs[0], dw[0], dw[1])?;
            if let Some(p) = padding_idx {
                io.outs[0][p * dw[1]..(p + 1) * dw[1]].fill(T::zero());
            }
            Ok(())
        }
    }
}
