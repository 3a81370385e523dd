//! Scaled dot-product attention (`kernels/attention.cu`; the CPU reference is
//! `cpu_backend/attention.rs`): every product one strided-batched cuBLAS GEMM over the
//! batch, the row softmax and its gradient one block per row. The scores `[batch, l, s]`
//! and their gradient live in staging buffers.
//!
//! Grouped-query attention (`group` query heads per key/value head): the keys and values
//! are first repeated per query head into staging (`expanded`), so every product stays one
//! strided batch; the backward's per-query-head `dK` and `dV` are then summed over each
//! group (`reduce_sum` over the group axis) into the key/value heads' gradients.

use super::device::{n, Arg, Device, Gemm, Grid, R};
use super::launch::{Io, KERNEL_SLOTS};
use super::shape::strided;
use crate::error::KernelError;
use crate::ops::attention::{Attention, Sdpa};

/// `x [batch / group, per]` repeated `group` times per row into staging `slot`:
/// `[batch, per]`, query problem `b` reading key/value problem `b / group`. `x` itself
/// without groups.
fn expanded(d: &mut Device, z: &Sdpa, x: u64, per: usize, slot: usize) -> Result<u64, KernelError> {
    if z.group == 1 {
        return Ok(x);
    }
    let y = d.staging(slot, 4 * z.batch * per)?;
    strided(d, x, y, &[z.batch / z.group, z.group, per], &[per, 0, 1])?;
    Ok(y)
}

/// Where a key/value gradient of `per` elements per problem is computed: the output
/// itself, or with groups a staging buffer of one per query head (summed by `grouped_sum`).
fn per_query_head(d: &mut Device, z: &Sdpa, out: u64, per: usize, slot: usize) -> Result<u64, KernelError> {
    if z.group == 1 {
        return Ok(out);
    }
    d.staging(slot, 4 * z.batch * per)
}

/// `full [batch, per]` summed over each group of `group` query heads into `out`.
fn grouped_sum(d: &Device, z: &Sdpa, full: u64, out: u64, per: usize) -> R {
    if z.group == 1 {
        return Ok(());
    }
    let outer = z.batch / z.group;
    let args = [
        Arg::Ptr(full),
        Arg::Ptr(out),
        n(outer),
        n(z.group),
        n(per),
        Arg::I32(0),
    ];
    d.launch("reduce_sum", Grid::Elements(outer * per), &args)
}

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
        Arg::F32(z.scale_in::<f32>()),
        Arg::I32(i32::from(z.causal)),
        Arg::I32(i32::from(fresh)),
    ];
    d.launch("sdpa_probs", Grid::Rows(rows), &args)
}

/// The forward: `(q, k, v) -> (out, lse)`.
fn sdpa(d: &mut Device, z: &Sdpa, io: Io) -> R {
    let p = d.staging(KERNEL_SLOTS, 4 * z.batch * z.l * z.s)?;
    let q = io.ins[0];
    let k = expanded(d, z, io.ins[1], z.s * z.e, KERNEL_SLOTS + 2)?;
    let v = expanded(d, z, io.ins[2], z.s * z.ev, KERNEL_SLOTS + 3)?;
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
    let [dout, q, lse] = [io.ins[0], io.ins[1], io.ins[5]];
    let k = expanded(d, z, io.ins[2], s * e, KERNEL_SLOTS + 2)?;
    let v = expanded(d, z, io.ins[3], s * ev, KERNEL_SLOTS + 3)?;
    let dq = io.outs[0];
    let dk = per_query_head(d, z, io.outs[1], s * e, KERNEL_SLOTS + 4)?;
    let dv = per_query_head(d, z, io.outs[2], s * ev, KERNEL_SLOTS + 5)?;
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
    let args = [Arg::Ptr(p), Arg::Ptr(dp), n(rows), n(s), Arg::F32(z.scale_in::<f32>())];
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
    products(d, z, (dp, true, l * s), (q, false, l * e), (s, e, l), dk)?;
    grouped_sum(d, z, dk, io.outs[1], s * e)?;
    grouped_sum(d, z, dv, io.outs[2], s * ev)
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
