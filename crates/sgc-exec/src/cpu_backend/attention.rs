//! Scaled dot-product attention ([`crate::ops::attention`]): the products through
//! [`gemm`], the row softmax and its gradient in f64 sums of a fixed order.

use super::linalg::{gemm, Mat};
use super::{f, Host, Io, R};
use crate::error::KernelError;
use crate::ops::attention::{Attention, Sdpa};
use crate::real::Real;

/// `P = exp(scale * Q K^T - lse)` of one problem into `p [l, s]`: the scores, then each
/// row's log-sum-exp written to `lse` (`fresh`) or read from it (a recomputation).
fn probabilities<T: Real>(z: &Sdpa, q: &[T], k: &[T], lse: &mut [T], fresh: bool, p: &mut [T]) {
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
                T::neg_infinity()
            } else {
                *v * z.scale_in::<T>()
            };
        }
        if fresh {
            let max = row.iter().copied().fold(T::neg_infinity(), T::max);
            let sum: f64 = row.iter().map(|&v| (v - max).exp().f64()).sum();
            lse[i] = max + T::of(sum.ln());
        }
        for v in row.iter_mut() {
            *v = (*v - lse[i]).exp();
        }
    }
}

/// The forward: `(q, k, v) -> (out, lse)`.
pub(crate) fn sdpa<T: Real>(z: &Sdpa, (q, k, v): (&[T], &[T], &[T]), out: &mut [T], lse: &mut [T]) {
    let mut p = vec![T::zero(); z.l * z.s];
    for b in 0..z.batch {
        let kv = b / z.group;
        let qb = &q[b * z.l * z.e..(b + 1) * z.l * z.e];
        let kb = &k[kv * z.s * z.e..(kv + 1) * z.s * z.e];
        let vb = &v[kv * z.s * z.ev..(kv + 1) * z.s * z.ev];
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
fn score_grad<T: Real>(z: &Sdpa, p: &[T], dp: &mut [T]) {
    for (pr, dr) in p.chunks(z.s).zip(dp.chunks_mut(z.s)) {
        let dot: f64 = pr.iter().zip(dr.iter()).map(|(&a, &b)| (a * b).f64()).sum();
        for (d, &pv) in dr.iter_mut().zip(pr) {
            *d = pv * (*d - T::of(dot)) * z.scale_in::<T>();
        }
    }
}

/// The backward: `(d_out, q, k, v, lse) -> (dq, dk, dv)`; a grouped attention's `dk` and
/// `dv` are each group's sums, in head order.
pub(crate) fn sdpa_backward<T: Real>(
    z: &Sdpa,
    [dout, q, k, v, lse]: [&[T]; 5],
    [dq, dk, dv]: [&mut [T]; 3],
) {
    let (ke, ve) = (z.s * z.e, z.s * z.ev);
    if z.group == 1 {
        return problems_backward(z, [dout, q, k, v, lse], [dq, dk, dv]);
    }
    let (mut dkb, mut dvb) = (vec![T::zero(); z.batch * ke], vec![T::zero(); z.batch * ve]);
    problems_backward(z, [dout, q, k, v, lse], [dq, &mut dkb, &mut dvb]);
    for (sum, parts) in [(dk, (&dkb, ke)), (dv, (&dvb, ve))] {
        let (parts, size) = parts;
        sum.fill(T::zero());
        for (b, part) in parts.chunks(size).enumerate() {
            let kv = b / z.group;
            for (s, &x) in sum[kv * size..(kv + 1) * size].iter_mut().zip(part) {
                *s += x;
            }
        }
    }
}

/// The backward of each query problem: `dk` and `dv` per query problem (`z.batch` of
/// them), keys and values read at `b / z.group`.
fn problems_backward<T: Real>(
    z: &Sdpa,
    [dout, q, k, v, lse]: [&[T]; 5],
    [dq, dk, dv]: [&mut [T]; 3],
) {
    let (mut p, mut dp) = (vec![T::zero(); z.l * z.s], vec![T::zero(); z.l * z.s]);
    let (qe, ke, ve, oe) = (z.l * z.e, z.s * z.e, z.s * z.ev, z.l * z.ev);
    for b in 0..z.batch {
        let kv = b / z.group;
        let (qb, kb) = (&q[b * qe..(b + 1) * qe], &k[kv * ke..(kv + 1) * ke]);
        let (vb, gb) = (&v[kv * ve..(kv + 1) * ve], &dout[b * oe..(b + 1) * oe]);
        let mut lb = lse[b * z.l..(b + 1) * z.l].to_vec();
        probabilities(z, qb, kb, &mut lb, false, &mut p);
        let mat = |d, cols, t| Mat::new(d, cols, t);
        let prod = |(m, k, n), a, b, c: &mut [T]| gemm(m, k, n, a, b, 0.0, c);
        prod(
            (z.l, z.ev, z.s),
            mat(gb, z.ev, false),
            mat(vb, z.ev, true),
            &mut dp,
        );
        score_grad(z, &p, &mut dp);
        let (dps, ps) = (mat(&dp, z.s, false), mat(&p, z.s, true));
        let dvb = &mut dv[b * ve..(b + 1) * ve];
        prod((z.s, z.l, z.ev), ps, mat(gb, z.ev, false), dvb);
        prod(
            (z.l, z.s, z.e),
            dps,
            mat(kb, z.e, false),
            &mut dq[b * qe..(b + 1) * qe],
        );
        let dst = mat(&dp, z.s, true);
        prod(
            (z.s, z.l, z.e),
            dst,
            mat(qb, z.e, false),
            &mut dk[b * ke..(b + 1) * ke],
        );
    }
}

/// The error of a launch without `n` outputs (the checks before the first step refuse it).
fn outputs(n: usize) -> KernelError {
    KernelError::Operands(format!("attention writes {n} outputs"))
}

/// Runs a kernel of the family.
pub(super) fn run<T: Host>(k: &Attention, io: Io<T>) -> R {
    let z = k.sizes(io.ops_in);
    let x = |i: usize| f(&io.ins[i]);
    if k.backward {
        let ins = [x(0)?, x(1)?, x(2)?, x(3)?, x(5)?];
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in `[-1, 1)` (xorshift).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn sizes(causal: bool) -> Sdpa {
        Sdpa {
            batch: 2,
            l: 3,
            s: 4,
            e: 5,
            ev: 2,
            scale: Some(0.7),
            causal,
            group: 1,
        }
    }

    /// `(out, lse)` of the forward.
    fn forward(z: &Sdpa, q: &[f32], k: &[f32], v: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut out = vec![0.0; z.batch * z.l * z.ev];
        let mut lse = vec![0.0; z.batch * z.l];
        sdpa(z, (q, k, v), &mut out, &mut lse);
        (out, lse)
    }

    /// The forward against softmax written out in f64, element by element.
    #[test]
    fn forward_matches_the_definition() {
        for causal in [false, true] {
            let z = sizes(causal);
            let (q, k, v) = (values(30, 1), values(40, 2), values(16, 3));
            let (out, lse) = forward(&z, &q, &k, &v);
            for b in 0..z.batch {
                for i in 0..z.l {
                    let score = |j: usize| {
                        let dot: f64 = (0..z.e)
                            .map(|c| {
                                f64::from(q[(b * z.l + i) * z.e + c] * k[(b * z.s + j) * z.e + c])
                            })
                            .sum();
                        dot * f64::from(z.scale_in::<f32>())
                    };
                    let seen: Vec<usize> = (0..z.s).filter(|&j| !z.masked(i, j)).collect();
                    let sum: f64 = seen.iter().map(|&j| score(j).exp()).sum();
                    let at = b * z.l + i;
                    assert!((f64::from(lse[at]) - sum.ln()).abs() < 1e-5, "lse {at}");
                    for c in 0..z.ev {
                        let want: f64 = seen
                            .iter()
                            .map(|&j| score(j).exp() / sum * f64::from(v[(b * z.s + j) * z.ev + c]))
                            .sum();
                        let got = f64::from(out[at * z.ev + c]);
                        assert!((got - want).abs() < 1e-5, "out {at},{c}: {got} vs {want}");
                    }
                }
            }
        }
    }

    /// Grouped-query attention is the ungrouped one on keys and values repeated for each
    /// query head of their group (`repeat_interleave`), its `dk`/`dv` the group's sums.
    #[test]
    fn grouped_attention_is_attention_on_repeated_keys() {
        let group = 3;
        let flat = Sdpa {
            batch: 6,
            ..sizes(true)
        };
        let grouped = Sdpa { group, ..flat };
        let (q, k, v) = (values(6 * 15, 8), values(2 * 20, 9), values(2 * 8, 10));
        let repeat = |x: &[f32], size: usize| -> Vec<f32> {
            (0..6)
                .flat_map(|b| x[(b / group) * size..(b / group + 1) * size].to_vec())
                .collect()
        };
        let (kr, vr) = (repeat(&k, 20), repeat(&v, 8));
        let (out, lse) = forward(&flat, &q, &kr, &vr);
        assert_eq!(forward(&grouped, &q, &k, &v), (out.clone(), lse.clone()));

        let w = values(out.len(), 11);
        let mut want = [vec![0.0; q.len()], vec![0.0; kr.len()], vec![0.0; vr.len()]];
        let [dq, dk, dv] = &mut want;
        sdpa_backward(&flat, [&w, &q, &kr, &vr, &lse], [dq, dk, dv]);
        let mut got = [vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]];
        let [gq, gk, gv] = &mut got;
        sdpa_backward(&grouped, [&w, &q, &k, &v, &lse], [gq, gk, gv]);
        assert_eq!(got[0], want[0]);
        for (t, size) in [(1, 20), (2, 8)] {
            let mut sums = vec![0.0f32; got[t].len()];
            for (b, part) in want[t].chunks(size).enumerate() {
                for (s, &x) in sums[(b / group) * size..].iter_mut().zip(part) {
                    *s += x;
                }
            }
            assert_eq!(got[t], sums, "input {t}");
        }
    }

    /// The backward against central differences of `sum(out * w)` in each of q, k, v.
    #[test]
    fn backward_matches_finite_differences() {
        for causal in [false, true] {
            let z = sizes(causal);
            let mut ins = [values(30, 4), values(40, 5), values(16, 6)];
            let w = values(z.batch * z.l * z.ev, 7);
            let loss = |ins: &[Vec<f32>; 3]| -> f64 {
                let (out, _) = forward(&z, &ins[0], &ins[1], &ins[2]);
                out.iter()
                    .zip(&w)
                    .map(|(&o, &g)| f64::from(o) * f64::from(g))
                    .sum()
            };
            let (_, lse) = forward(&z, &ins[0], &ins[1], &ins[2]);
            let mut grads = [vec![0.0; 30], vec![0.0; 40], vec![0.0; 16]];
            let [dq, dk, dv] = &mut grads;
            sdpa_backward(&z, [&w, &ins[0], &ins[1], &ins[2], &lse], [dq, dk, dv]);
            let h = 1e-2f32;
            for t in 0..3 {
                for e in 0..ins[t].len() {
                    let keep = ins[t][e];
                    ins[t][e] = keep + h;
                    let up = loss(&ins);
                    ins[t][e] = keep - h;
                    let down = loss(&ins);
                    ins[t][e] = keep;
                    let fd = (up - down) / (2.0 * f64::from(h));
                    let got = f64::from(grads[t][e]);
                    assert!(
                        (fd - got).abs() <= 1e-3 + 1e-2 * fd.abs(),
                        "causal {causal}, input {t}, element {e}: {got} vs {fd}"
                    );
                }
            }
        }
    }
}
