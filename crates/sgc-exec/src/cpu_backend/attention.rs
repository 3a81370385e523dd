//! Scaled dot-product attention ([`crate::ops::attention`]): the products through
//! [`gemm`], the row softmax and its gradient in f64 sums of a fixed order.

use super::linalg::{gemm, Mat};
use super::{f, Io, R};
use crate::error::KernelError;
use crate::ops::attention::{Attention, Sdpa};

/// `P = exp(scale * Q K^T - lse)` of one problem into `p [l, s]`: the scores, then each
/// row's log-sum-exp written to `lse` (`fresh`) or read from it (a recomputation).
fn probabilities(z: &Sdpa, q: &[f32], k: &[f32], lse: &mut [f32], fresh: bool, p: &mut [f32]) {
    gemm(
        z.l,
        z.e,
        z.s,
        Mat::new(q, z.e, false),
        Mat::new(k, z.e, true),
        0.0,
        p,
    );
    for (i, row) in p.chunks_mut(z.s).enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = if z.masked(i, j) {
                f32::NEG_INFINITY
            } else {
                *v * z.scale
            };
        }
        if fresh {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|&v| f64::from((v - max).exp())).sum();
            lse[i] = max + sum.ln() as f32;
        }
        for v in row.iter_mut() {
            *v = (*v - lse[i]).exp();
        }
    }
}

/// The forward: `(q, k, v) -> (out, lse)`.
pub(crate) fn sdpa(
    z: &Sdpa,
    (q, k, v): (&[f32], &[f32], &[f32]),
    out: &mut [f32],
    lse: &mut [f32],
) {
    let mut p = vec![0.0f32; z.l * z.s];
    for b in 0..z.batch {
        let qb = &q[b * z.l * z.e..(b + 1) * z.l * z.e];
        let kb = &k[b * z.s * z.e..(b + 1) * z.s * z.e];
        let vb = &v[b * z.s * z.ev..(b + 1) * z.s * z.ev];
        let lb = &mut lse[b * z.l..(b + 1) * z.l];
        probabilities(z, qb, kb, lb, true, &mut p);
        let ob = &mut out[b * z.l * z.ev..(b + 1) * z.l * z.ev];
        gemm(
            z.l,
            z.s,
            z.ev,
            Mat::new(&p, z.s, false),
            Mat::new(vb, z.ev, false),
            0.0,
            ob,
        );
    }
}

/// `dS = P * (dP - rowsum(P * dP)) * scale`, in place of `dp`.
fn score_grad(z: &Sdpa, p: &[f32], dp: &mut [f32]) {
    for (pr, dr) in p.chunks(z.s).zip(dp.chunks_mut(z.s)) {
        let dot: f64 = pr
            .iter()
            .zip(dr.iter())
            .map(|(&a, &b)| f64::from(a * b))
            .sum();
        for (d, &pv) in dr.iter_mut().zip(pr) {
            *d = pv * (*d - dot as f32) * z.scale;
        }
    }
}

/// The backward: `(d_out, q, k, v, lse) -> (dq, dk, dv)`.
pub(crate) fn sdpa_backward(
    z: &Sdpa,
    (dout, q, k, v, lse): (&[f32], &[f32], &[f32], &[f32], &[f32]),
    [dq, dk, dv]: [&mut [f32]; 3],
) {
    let (mut p, mut dp) = (vec![0.0f32; z.l * z.s], vec![0.0f32; z.l * z.s]);
    let (qe, ke, ve, oe) = (z.l * z.e, z.s * z.e, z.s * z.ev, z.l * z.ev);
    for b in 0..z.batch {
        let (qb, kb) = (&q[b * qe..(b + 1) * qe], &k[b * ke..(b + 1) * ke]);
        let (vb, gb) = (&v[b * ve..(b + 1) * ve], &dout[b * oe..(b + 1) * oe]);
        let mut lb = lse[b * z.l..(b + 1) * z.l].to_vec();
        probabilities(z, qb, kb, &mut lb, false, &mut p);
        let mat = |d, cols, t| Mat::new(d, cols, t);
        gemm(
            z.l,
            z.ev,
            z.s,
            mat(gb, z.ev, false),
            mat(vb, z.ev, true),
            0.0,
            &mut dp,
        );
        score_grad(z, &p, &mut dp);
        let dvb = &mut dv[b * ve..(b + 1) * ve];
        gemm(
            z.s,
            z.l,
            z.ev,
            mat(&p, z.s, true),
            mat(gb, z.ev, false),
            0.0,
            dvb,
        );
        let dqb = &mut dq[b * qe..(b + 1) * qe];
        gemm(
            z.l,
            z.s,
            z.e,
            mat(&dp, z.s, false),
            mat(kb, z.e, false),
            0.0,
            dqb,
        );
        let dkb = &mut dk[b * ke..(b + 1) * ke];
        gemm(
            z.s,
            z.l,
            z.e,
            mat(&dp, z.s, true),
            mat(qb, z.e, false),
            0.0,
            dkb,
        );
    }
}

/// The error of a launch without `n` outputs (the checks before the first step refuse it).
fn outputs(n: usize) -> KernelError {
    KernelError::Operands(format!("attention writes {n} outputs"))
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Attention, io: Io) -> R {
    let z = k.sizes(io.ops_in);
    let x = |i: usize| f(&io.ins[i]);
    if k.backward {
        let ins = (x(0)?, x(1)?, x(2)?, x(3)?, x(5)?);
        let [dq, dk, dv] = io.outs else {
            return Err(outputs(3));
        };
        sdpa_backward(&z, ins, [dq, dk, dv]);
    } else {
        let [out, lse] = io.outs else {
            return Err(outputs(2));
        };
        sdpa(&z, (x(0)?, x(1)?, x(2)?), out, lse);
    }
    Ok(())
}
