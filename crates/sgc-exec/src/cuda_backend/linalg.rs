//! Matrix products through cuBLAS (`Device::gemm`, row-major on top of column-major
//! SGEMM; `addmm` accumulates onto its bias, broadcast first); the CPU reference is
//! `cpu_backend/linalg.rs`, same names.

use super::device::{Device, Gemm, R};
use super::launch::{last, rows, Io};
use super::shape::expand;
use crate::ops::linalg::{inner_cols, Bmm, Linalg};

/// One product `C[m, n] = op(A) @ op(B)` with nothing batched; `a`, `b` are
/// `(address, transposed)`.
fn single((m, n, k): (usize, usize, usize), a: (u64, bool), b: (u64, bool), c: u64) -> Gemm {
    Gemm {
        m,
        n,
        k,
        a: a.0,
        trans_a: a.1,
        b: b.0,
        trans_b: b.1,
        c,
        beta: 0.0,
        batch: 1,
        stride_a: 0,
        stride_b: 0,
    }
}

/// `matmul`: `a [rows, k] @ b` with `b [k, n]`, or `b [n, k]` transposed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    d: &Device,
    a: u64,
    b: u64,
    y: u64,
    rows: usize,
    k: usize,
    n: usize,
    transpose_b: bool,
) -> R {
    d.gemm(&single((rows, n, k), (a, false), (b, transpose_b), y))
}

/// `matmul_tn`: `p [rows, m]^T @ q [rows, n]` -> `[m, n]`.
pub(crate) fn matmul_tn(d: &Device, p: u64, q: u64, y: u64, rows: usize, m: usize, n: usize) -> R {
    d.gemm(&single((m, n, rows), (p, true), (q, false), y))
}

/// `batched_matmul`: one strided-batched SGEMM.
pub(crate) fn batched_matmul(d: &Device, a: u64, b: u64, y: u64, s: &Bmm) -> R {
    d.gemm(&Gemm {
        batch: s.batch,
        stride_a: s.m * s.k,
        stride_b: s.k * s.n,
        ..single((s.m, s.n, s.k), (a, s.transpose_a), (b, s.transpose_b), y)
    })
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Linalg, d: &mut Device, io: Io) -> R {
    let sh = |i: usize| io.ops_in[i].shape.as_slice();
    match k {
        Linalg::MatMul { transpose_b } => {
            let (kk, n) = inner_cols(sh(1), *transpose_b);
            // Rows from the output: with k = 0, `a` is empty but `y` still has rows.
            let rows = io.ops_out[0].numel().checked_div(n).unwrap_or(0);
            matmul(
                d,
                io.ins[0],
                io.ins[1],
                io.outs[0],
                rows,
                kk,
                n,
                *transpose_b,
            )
        }
        Linalg::MatMulTn => {
            let (m, n) = (last(sh(0)), last(sh(1)));
            matmul_tn(
                d,
                io.ins[0],
                io.ins[1],
                io.outs[0],
                rows(&io.ops_in[0]),
                m,
                n,
            )
        }
        Linalg::BatchedMatMul {
            transpose_a,
            transpose_b,
        } => {
            let s = Bmm::of(sh(0), &io.ops_out[0].shape, *transpose_a, *transpose_b);
            batched_matmul(d, io.ins[0], io.ins[1], io.outs[0], &s)
        }
        Linalg::AddMm { transpose_b } => {
            let (kk, n) = inner_cols(sh(2), *transpose_b);
            let m = sh(1)[0];
            // The bias in every row, then the product added to it.
            expand(d, io.ins[0], io.outs[0], &[n], &[m, n])?;
            let a = (io.ins[1], false);
            let b = (io.ins[2], *transpose_b);
            d.gemm(&Gemm {
                beta: 1.0,
                ..single((m, n, kk), a, b, io.outs[0])
            })
        }
    }
}
