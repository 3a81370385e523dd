//! Embedding lookups and their gradient (`kernels/embedding.cu`; the CPU reference is
//! `cpu_backend/embedding.rs`).

use super::device::{n, Arg, Device, Grid, Idx, R};
use super::launch::fill;
use super::launch::{offset, Io};
use crate::ops::embedding::Embedding;

/// Runs a kernel of the family: `embedding` (row `ids[r]` of `w [V, D]` into row `r` of
/// the output, a thread per output element) or `embedding_grad` (`dw[ids[r]] += dy[r]`,
/// rows in order, a thread per column), in the builder's operand order `(ids, data)` or
/// ATen's `(data, ids)`; both kernels take `(ids, idx64, in, out, rows, V, D, flag)`.
pub(super) fn run(k: &Embedding, d: &mut Device, io: Io) -> R {
    // (kernel, slot of the ids, whether the table `[V, D]` is the output).
    let (kernel, id_slot, grad) = match k {
        Embedding::Embedding => ("embedding", 0, false),
        Embedding::EmbeddingGrad => ("embedding_grad", 0, true),
        Embedding::EmbeddingRows => ("embedding", 1, false),
        Embedding::EmbeddingDenseBackward { .. } => ("embedding_grad", 1, true),
        Embedding::IndexRows | Embedding::IndexPutRows { .. } => {
            return Err(crate::error::KernelError::Operands(
                "index and index_put run on the CPU backend only (their KINDS row says so)".into(),
            ))
        }
    };
    let ids = Idx::of(&io.ops_in[id_slot], io.ins[id_slot]);
    let data = io.ins[1 - id_slot];
    let rows = io.ops_in[id_slot].numel();
    let table = if grad {
        &io.ops_out[0].shape
    } else {
        &io.ops_in[1 - id_slot].shape
    };
    let (v, dd) = (table[0], table[1]);
    let grid = Grid::Elements(if grad { dd } else { rows * dd });
    let args = [
        Arg::Ptr(ids.ptr),
        Arg::I32(ids.is_i64 as i32),
        Arg::Ptr(data),
        Arg::Ptr(io.outs[0]),
        n(rows),
        n(v),
        n(dd),
        d.flag(),
    ];
    d.launch(kernel, grid, &args)?;
    if let Embedding::EmbeddingDenseBackward {
        padding_idx: Some(p),
    } = k
    {
        if *p < v {
            fill(d, offset(io.outs[0], p * dd, 4), 0.0, dd)?;
        }
    }
    d.check_flag()
}
