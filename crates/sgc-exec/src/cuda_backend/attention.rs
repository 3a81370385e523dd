//! Scaled dot-product attention (`kernels/attention.cu`; the CPU reference is
//! `cpu_backend/attention.rs`): every product one strided-batched cuBLAS GEMM over the
//! batch, the row softmax and its gradient one block per row. The scores `[batch, l, s]`
//! and their gradient live in staging buffers.

use super::device::{n, Arg, Device, Gemm, Grid, R};
use super::launch::{Io, KERNEL_SLOTS};
use crate::ops::attention::{Attention, Sdpa};

/// `c = op(a) op(b)` for each of `z.batch` problems (`m x k` by `k x n`), `stride_a` and
/// `stride_b` elements apart.
fn products(
    d: &Device,
    z: &Sdpa,
    (a, trans_a, stride_a): (u64, bool, usize),
    (b, trans_b, stride_b): (u64, bool, usize),
    (m, nn, k): (usize, usize, usize),
    c: u64,
) -> R {
    d.gemm(&Gemm {
        m,
        n: nn,
        k,
        a,
        trans_a,
        b,
        trans_b,
        c,
        beta: 0.0,
        batch: z.batch,
        stride_a,
        stride_b,
    })
}

/// The probabilities `P` of every problem into `p`: `Q K^T`, then the row kernel
/// (writing `lse` when `fresh`, else reading it).
fn probabilities(d: &Device, z: &Sdpa, (q, k): (u64, u64), lse: u64, fresh: bool, p: u64) -> R {
    let (l, s, e) = (z.l, z.s, z.e);
    products(d, z, (q, false, l * e), (k, true, s * e), (l, s, e), p)?;
    let rows = z.batch * l;
    let args = [
        Arg::Ptr(p),
        Arg::Ptr(lse),
        n(rows),
        n(l),
        n(s),
        Arg::F32(z.scale),
        Arg::I32(i32::from(z.causal)),
        Arg::I32(i32::from(fresh)),
    ];
    d.launch("sdpa_probs", Grid::Rows(rows), &args)
}

/// The forward: `(q, k, v) -> (out, lse)`.
fn sdpa(d: &mut Device, z: &Sdpa, io: Io) -> R {
    let p = d.staging(KERNEL_SLOTS, 4 * z.batch * z.l * z.s)?;
    let [q, k, v] = [io.ins[0], io.ins[1], io.ins[2]];
    probabilities(d, z, (q, k), io.outs[1], true, p)?;
    let (l, s, ev) = (z.l, z.s, z.ev);
    products(
        d,
        z,
        (p, false, l * s),
        (v, false, s * ev),
        (l, ev, s),
        io.outs[0],
    )
}

/// The backward: `(d_out, q, k, v, out, lse) -> (dq, dk, dv)`.
fn sdpa_backward(d: &mut Device, z: &Sdpa, io: Io) -> R {
    let (l, s, e, ev) = (z.l, z.s, z.e, z.ev);
    let p = d.staging(KERNEL_SLOTS, 4 * z.batch * l * s)?;
    let dp = d.staging(KERNEL_SLOTS + 1, 4 * z.batch * l * s)?;
    let [dout, q, k, v, lse] = [io.ins[0], io.ins[1], io.ins[2], io.ins[3], io.ins[5]];
    let [dq, dk, dv] = [io.outs[0], io.outs[1], io.outs[2]];
    probabilities(d, z, (q, k), lse, false, p)?;
    products(
        d,
        z,
        (dout, false, l * ev),
        (v, true, s * ev),
        (l, s, ev),
        dp,
    )?;
    let rows = z.batch * l;
    let args = [Arg::Ptr(p), Arg::Ptr(dp), n(rows), n(s), Arg::F32(z.scale)];
    d.launch("sdpa_score_grad", Grid::Rows(rows), &args)?;
    products(
        d,
        z,
        (p, true, l * s),
        (dout, false, l * ev),
        (s, ev, l),
        dv,
    )?;
    products(d, z, (dp, false, l * s), (k, false, s * e), (l, e, s), dq)?;
    products(d, z, (dp, true, l * s), (q, false, l * e), (s, e, l), dk)
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Attention, d: &mut Device, io: Io) -> R {
    let z = k.sizes(io.ops_in);
    if k.backward {
        sdpa_backward(d, &z, io)
    } else {
        sdpa(d, &z, io)
    }
}
