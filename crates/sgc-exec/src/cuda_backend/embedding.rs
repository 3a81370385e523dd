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
/// ATen's `index` on axis 0 is `embedding` over `x` seen as `[R, prod(rest)]`; its
/// `index_put` copies `x` and runs `index_put_rows`.
pub(super) fn run(k: &Embedding, d: &mut Device, io: Io) -> R {
    // (kernel, slot of the ids, whether the table `[V, D]` is the output).
    let (kernel, id_slot, grad) = match k {
        Embedding::Embedding => ("embedding", 0, false),
        Embedding::EmbeddingGrad => ("embedding_grad", 0, true),
        Embedding::EmbeddingRows | Embedding::IndexRows => ("embedding", 1, false),
        Embedding::EmbeddingDenseBackward { .. } => ("embedding_grad", 1, true),
        Embedding::IndexPutRows { accumulate } => return index_put(*accumulate, d, io),
    };
    let ids = Idx::of(&io.ops_in[id_slot], io.ins[id_slot]);
    let data = io.ins[1 - id_slot];
    let rows = io.ops_in[id_slot].numel();
    let table = if grad {
        &io.ops_out[0].shape
    } else {
        &io.ops_in[1 - id_slot].shape
    };
    let (v, dd) = (table[0], table[1..].iter().product());
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

/// `index_put` on axis 0: the output starts as a copy of `x [R, *rest]`, then row `ids[r]`
/// is set to (`accumulate`: increased by) row `r` of `values`, rows in order, one thread
/// per column (so repeated ids end as the CPU reference ends them).
fn index_put(accumulate: bool, d: &mut Device, io: Io) -> R {
    let x = &io.ops_in[0];
    let (v, dd): (usize, usize) = (x.shape[0], x.shape[1..].iter().product());
    d.copy_bytes(io.outs[0], io.ins[0], x.numel() * 4)?;
    let ids = Idx::of(&io.ops_in[1], io.ins[1]);
    let args = [
        Arg::Ptr(ids.ptr),
        Arg::I32(ids.is_i64 as i32),
        Arg::Ptr(io.ins[2]),
        Arg::Ptr(io.outs[0]),
        n(io.ops_in[1].numel()),
        n(v),
        n(dd),
        Arg::I32(accumulate as i32),
        d.flag(),
    ];
    d.launch("index_put_rows", Grid::Elements(dd), &args)?;
    d.check_flag()
}
