//! Embedding lookups and their gradient (`kernels/embedding.cu`; the CPU reference is
//! `cpu_backend/embedding.rs`, same names).

use super::device::{n, Arg, Device, Grid, Idx, R};
use super::runtime::{no_kernel, Io};
use crate::ops::embedding::Embedding;
use crate::ops::Family;

/// `embedding`: row `ids[r]` of `w [V, D]` into row `r` of the output.
pub(crate) fn embedding(
    d: &mut Device,
    ids: Idx,
    w: u64,
    y: u64,
    rows: usize,
    v: usize,
    dd: usize,
) -> R {
    let args = [
        Arg::Ptr(ids.ptr),
        Arg::I32(ids.is_i64 as i32),
        Arg::Ptr(w),
        Arg::Ptr(y),
        n(rows),
        n(v),
        n(dd),
        d.flag(),
    ];
    d.launch("embedding", Grid::Elements(rows * dd), &args)?;
    d.check_flag()
}

/// `embedding_grad`: `dw[ids[r]] += dy[r]`, rows in order (one thread per column).
pub(crate) fn embedding_grad(
    d: &mut Device,
    ids: Idx,
    dy: u64,
    dw: u64,
    rows: usize,
    v: usize,
    dd: usize,
) -> R {
    let args = [
        Arg::Ptr(ids.ptr),
        Arg::I32(ids.is_i64 as i32),
        Arg::Ptr(dy),
        Arg::Ptr(dw),
        n(rows),
        n(v),
        n(dd),
        d.flag(),
    ];
    d.launch("embedding_grad", Grid::Elements(dd), &args)?;
    d.check_flag()
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Embedding, d: &mut Device, io: Io) -> R {
    let ids = Idx::of(&io.ops_in[0], io.ins[0]);
    let n = io.ops_in[0].numel();
    match k {
        Embedding::Embedding => {
            let w = &io.ops_in[1].shape;
            embedding(d, ids, io.ins[1], io.outs[0], n, w[0], w[1])
        }
        Embedding::EmbeddingGrad => {
            let dw = &io.ops_out[0].shape;
            embedding_grad(d, ids, io.ins[1], io.outs[0], n, dw[0], dw[1])
        }
        _ => Err(no_kernel(k.kind())),
    }
}
