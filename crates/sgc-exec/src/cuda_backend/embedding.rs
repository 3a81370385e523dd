//! Embedding lookups and their gradient (`kernels/embedding.cu`; the CPU reference is
//! `cpu_backend/embedding.rs`).

use super::device::{n, Arg, Device, Grid, Idx, R};
use super::launch::{no_kernel, Io};
use crate::ops::embedding::Embedding;

/// Runs a kernel of the family: `embedding` (row `ids[r]` of `w [V, D]` into row `r` of
/// the output, a thread per output element) or `embedding_grad` (`dw[ids[r]] += dy[r]`,
/// rows in order, a thread per column). Both take `(ids, idx64, in, out, rows, V, D, flag)`.
pub(super) fn run(k: &Embedding, d: &mut Device, io: Io) -> R {
    let ids = Idx::of(&io.ops_in[0], io.ins[0]);
    let rows = io.ops_in[0].numel();
    // The table `[V, D]` is the weight (an input) or its gradient (the output).
    let (kernel, table, per_column) = match k {
        Embedding::Embedding => ("embedding", &io.ops_in[1].shape, false),
        Embedding::EmbeddingGrad => ("embedding_grad", &io.ops_out[0].shape, true),
        _ => return Err(no_kernel()),
    };
    let (v, dd) = (table[0], table[1]);
    let grid = Grid::Elements(if per_column { dd } else { rows * dd });
    let args = [
        Arg::Ptr(ids.ptr),
        Arg::I32(ids.is_i64 as i32),
        Arg::Ptr(io.ins[1]),
        Arg::Ptr(io.outs[0]),
        n(rows),
        n(v),
        n(dd),
        d.flag(),
    ];
    d.launch(kernel, grid, &args)?;
    d.check_flag()
}
