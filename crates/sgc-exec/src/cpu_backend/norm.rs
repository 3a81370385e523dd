//! Normalisations, softmax and log-softmax: reductions in f64, in a fixed order.

use super::shape::transpose;
use super::{f, last, trailing, Host, Io, R};
use crate::error::KernelError;
use crate::ops::norm::{axis_last, inverse, Norm};
use crate::real::Real;

/// Layout of a norm: `outer x feat x inner` for batch norm (features on axis 1, stats over
/// outer and inner), `rows x feat` with `inner = 1` per row for layer norm.
#[derive(Clone, Copy)]
pub(crate) struct NormDims {
    pub outer: usize,
    pub feat: usize,
    pub inner: usize,
}

/// `batch_norm`: per channel `c`, statistics over `outer * inner` values. `eps` (here and
/// in the other norms) is rounded to the kernel's type first, as ATen's float kernels take
/// it, then added in f64.
pub(crate) fn batch_norm<T: Real>(
    x: &[T],
    gamma: &[T],
    beta: &[T],
    eps: f64,
    d: NormDims,
    out: &mut [&mut [T]],
) {
    let m = (d.outer * d.inner) as f64;
    for c in 0..d.feat {
        let vals = || {
            (0..d.outer)
                .flat_map(move |o| (0..d.inner).map(move |i| (o * d.feat + c) * d.inner + i))
        };
        let mean = vals().map(|i| x[i].f64()).sum::<f64>() / m;
        let var = vals().map(|i| (x[i].f64() - mean).powi(2)).sum::<f64>() / m;
        let invstd = T::of(1.0 / (var + T::of(eps).f64()).sqrt());
        let mean = T::of(mean);
        for i in vals() {
            out[0][i] = (x[i] - mean) * invstd * gamma[c] + beta[c];
        }
        out[1][c] = mean;
        out[2][c] = invstd;
    }
}

/// `batch_norm_grad`: `dx = gamma*invstd/M * (M*dy - sum dy - xhat * sum dy*xhat)`.
pub(crate) fn batch_norm_grad<T: Real>(ins: [&[T]; 5], d: NormDims, out: &mut [&mut [T]]) {
    let [x, gamma, mean, invstd, dy] = ins;
    let m = (d.outer * d.inner) as f64;
    for c in 0..d.feat {
        let vals = || {
            (0..d.outer)
                .flat_map(move |o| (0..d.inner).map(move |i| (o * d.feat + c) * d.inner + i))
        };
        let xhat = |i: usize| ((x[i] - mean[c]) * invstd[c]).f64();
        let dbeta: f64 = vals().map(|i| dy[i].f64()).sum();
        let dgamma: f64 = vals().map(|i| dy[i].f64() * xhat(i)).sum();
        let k = gamma[c].f64() * invstd[c].f64() / m;
        for i in vals() {
            out[0][i] = T::of(k * (m * dy[i].f64() - dbeta - xhat(i) * dgamma));
        }
        out[1][c] = T::of(dgamma);
        out[2][c] = T::of(dbeta);
    }
}

/// `layer_norm` over rows of `feat` values.
pub(crate) fn layer_norm<T: Real>(
    x: &[T],
    gamma: &[T],
    beta: &[T],
    eps: f64,
    feat: usize,
    out: &mut [&mut [T]],
) {
    let rows = x.len().checked_div(feat).unwrap_or(0);
    for r in 0..rows {
        let row = &x[r * feat..(r + 1) * feat];
        let mean = row.iter().map(|&v| v.f64()).sum::<f64>() / feat as f64;
        let var = row.iter().map(|&v| (v.f64() - mean).powi(2)).sum::<f64>() / feat as f64;
        let rstd = T::of(1.0 / (var + T::of(eps).f64()).sqrt());
        let mean = T::of(mean);
        for (j, &v) in row.iter().enumerate() {
            out[0][r * feat + j] = (v - mean) * rstd * gamma[j] + beta[j];
        }
        out[1][r] = mean;
        out[2][r] = rstd;
    }
}

/// `layer_norm_grad`: per row, `dx = rstd/D * (D*g - sum g - xhat * sum g*xhat)` with
/// `g = dy * gamma`; `dgamma`, `dbeta` summed over rows in order.
pub(crate) fn layer_norm_grad<T: Real>(ins: [&[T]; 5], feat: usize, out: &mut [&mut [T]]) {
    let [x, gamma, mean, rstd, dy] = ins;
    let rows = x.len().checked_div(feat).unwrap_or(0);
    let mut dgamma = vec![0f64; feat];
    let mut dbeta = vec![0f64; feat];
    let dd = feat as f64;
    for r in 0..rows {
        let at = |j: usize| r * feat + j;
        let xhat = |j: usize| ((x[at(j)] - mean[r]) * rstd[r]).f64();
        let g = |j: usize| dy[at(j)].f64() * gamma[j].f64();
        let sg: f64 = (0..feat).map(g).sum();
        let sgx: f64 = (0..feat).map(|j| g(j) * xhat(j)).sum();
        for j in 0..feat {
            out[0][at(j)] = T::of(rstd[r].f64() / dd * (dd * g(j) - sg - xhat(j) * sgx));
            dgamma[j] += dy[at(j)].f64() * xhat(j);
            dbeta[j] += dy[at(j)].f64();
        }
    }
    for j in 0..feat {
        out[1][j] = T::of(dgamma[j]);
        out[2][j] = T::of(dbeta[j]);
    }
}

/// `softmax` of `scale * x` over rows of `n`; with `causal`, row `q` of each `n x n`
/// block keeps keys `0..=q` only (the others get probability 0).
pub(crate) fn softmax<T: Real>(x: &[T], y: &mut [T], n: usize, scale: f64, causal: bool) {
    let scale = T::of(scale);
    let rows = x.len().checked_div(n).unwrap_or(0);
    for r in 0..rows {
        let keep = if causal { (r % n) + 1 } else { n };
        let (xr, yr) = (&x[r * n..(r + 1) * n], &mut y[r * n..(r + 1) * n]);
        let max = xr[..keep]
            .iter()
            .fold(T::neg_infinity(), |m, &v| m.max(scale * v));
        let mut sum = 0f64;
        for j in 0..keep {
            let e = (scale * xr[j] - max).exp();
            yr[j] = e;
            sum += e.f64();
        }
        let inv = T::of(1.0 / sum);
        yr[..keep].iter_mut().for_each(|v| *v *= inv);
        yr[keep..].fill(T::zero());
    }
}

/// `softmax_grad`: `scale * y * (dy - sum(dy * y))` per row.
pub(crate) fn softmax_grad<T: Real>(y: &[T], dy: &[T], dx: &mut [T], n: usize, scale: f64) {
    let scale = T::of(scale);
    let rows = y.len().checked_div(n).unwrap_or(0);
    for r in 0..rows {
        let s = r * n..(r + 1) * n;
        let dot: f64 = y[s.clone()]
            .iter()
            .zip(&dy[s.clone()])
            .map(|(&a, &b)| (a * b).f64())
            .sum();
        for i in s {
            dx[i] = scale * y[i] * (dy[i] - T::of(dot));
        }
    }
}

/// Runs `f` on all three results, the ones `mask` leaves out in scratch buffers.
fn with_masked<T: Real>(
    mask: [bool; 3],
    sizes: [usize; 3],
    outs: &mut [&mut [T]],
    f: impl FnOnce(&mut [&mut [T]]),
) {
    let mut scratch: Vec<Vec<T>> = (0..3)
        .map(|i| vec![T::zero(); if mask[i] { 0 } else { sizes[i] }])
        .collect();
    let mut given = outs.iter_mut();
    let mut all: Vec<&mut [T]> = Vec::with_capacity(3);
    for (i, s) in scratch.iter_mut().enumerate() {
        if mask[i] {
            all.push(given.next().map(|o| &mut **o).unwrap_or(&mut []));
        } else {
            all.push(s.as_mut_slice());
        }
    }
    f(&mut all);
}

/// `sgc.batch_norm_update_stats`: `var = 1/invstd^2 - eps`, unbiased by
/// `count/(count-1)`, each statistic moved `momentum` of the way to the batch's.
pub(crate) fn batch_norm_update_stats<T: Real>(
    ins: [&[T]; 4],
    momentum: f64,
    eps: f64,
    count: u64,
    outs: &mut [&mut [T]],
) {
    let [rm, rv, mean, invstd] = ins;
    let unbias = count as f64 / (count as f64 - 1.0);
    let (m, eps) = (T::of(momentum).f64(), T::of(eps).f64());
    for c in 0..rm.len() {
        let var = 1.0 / (invstd[c].f64() * invstd[c].f64()) - eps;
        outs[0][c] = T::of((1.0 - m) * rm[c].f64() + m * mean[c].f64());
        outs[1][c] = T::of((1.0 - m) * rv[c].f64() + m * var * unbias);
    }
}

/// Log-softmax over rows of `n`.
pub(crate) fn log_softmax<T: Real>(x: &[T], y: &mut [T], n: usize) {
    for (xr, yr) in x.chunks(n.max(1)).zip(y.chunks_mut(n.max(1))) {
        let m = xr.iter().copied().fold(T::neg_infinity(), T::max);
        let s: f64 = xr.iter().map(|&v| (v - m).f64().exp()).sum();
        let lse = T::of(s.ln());
        for (y, &v) in yr.iter_mut().zip(xr) {
            *y = v - m - lse;
        }
    }
}

/// `_log_softmax_backward_data`: `dy - exp(y) * sum(dy)` over rows of `n`.
pub(crate) fn log_softmax_backward<T: Real>(dy: &[T], y: &[T], dx: &mut [T], n: usize) {
    let rows = dy.chunks(n.max(1)).zip(y.chunks(n.max(1)));
    for ((dr, yr), xr) in rows.zip(dx.chunks_mut(n.max(1))) {
        let s: f64 = dr.iter().map(|&v| v.f64()).sum();
        for ((x, &d), &v) in xr.iter_mut().zip(dr).zip(yr) {
            *x = d - T::of(v.f64().exp() * s);
        }
    }
}

/// Runs a kernel of the family.
pub(super) fn run<T: Host>(k: &Norm, io: Io<T>) -> R {
    let sh = |i: usize| io.ops_in[i].shape.as_slice();
    let ins_f =
        |n: usize| -> Result<Vec<&[T]>, KernelError> { io.ins[..n].iter().map(f).collect() };
    match k {
        Norm::BatchNorm { eps } => {
            let d = bn_dims(sh(0));
            batch_norm(
                f(&io.ins[0])?,
                f(&io.ins[1])?,
                f(&io.ins[2])?,
                *eps,
                d,
                io.outs,
            )
        }
        Norm::BatchNormGrad => batch_norm_grad(five(&ins_f(5)?), bn_dims(sh(0)), io.outs),
        Norm::LayerNorm { eps, axes } => {
            let (x, g, b) = (f(&io.ins[0])?, f(&io.ins[1])?, f(&io.ins[2])?);
            layer_norm(x, g, b, *eps, trailing(sh(0), *axes), io.outs)
        }
        Norm::LayerNormGrad => layer_norm_grad(five(&ins_f(5)?), last(sh(0)), io.outs),
        // ATen's backwards: the builder's grads on reordered inputs, absent results
        // computed into scratch and discarded.
        Norm::BatchNormBackward { mask } => {
            let [dy, x, gamma, mean, invstd] = five(&ins_f(5)?);
            let d = bn_dims(sh(1));
            let sizes = [x.len(), d.feat, d.feat];
            let grad = |all: &mut [&mut [T]]| batch_norm_grad([x, gamma, mean, invstd, dy], d, all);
            with_masked(*mask, sizes, io.outs, grad)
        }
        Norm::LayerNormBackward { mask, axes } => {
            let [dy, x, mean, rstd, gamma] = five(&ins_f(5)?);
            let feat = trailing(sh(1), *axes);
            let grad =
                |all: &mut [&mut [T]]| layer_norm_grad([x, gamma, mean, rstd, dy], feat, all);
            with_masked(*mask, [x.len(), feat, feat], io.outs, grad)
        }
        Norm::BatchNormUpdateStats {
            momentum,
            eps,
            count,
        } => {
            let v = ins_f(4)?;
            batch_norm_update_stats([v[0], v[1], v[2], v[3]], *momentum, *eps, *count, io.outs)
        }
        Norm::Softmax { scale, causal } => {
            softmax(f(&io.ins[0])?, io.outs[0], last(sh(0)), *scale, *causal)
        }
        Norm::SoftmaxGrad { scale } => softmax_grad(
            f(&io.ins[0])?,
            f(&io.ins[1])?,
            io.outs[0],
            last(sh(0)),
            *scale,
        ),
        Norm::SoftmaxBackward => {
            softmax_grad(f(&io.ins[1])?, f(&io.ins[0])?, io.outs[0], last(sh(0)), 1.0)
        }
        Norm::LogSoftmax { axis } => {
            along(*axis, sh(0), &[f(&io.ins[0])?], io.outs[0], |x, y, c| {
                log_softmax(x[0], y, c)
            })
        }
        Norm::LogSoftmaxBackward { axis } => {
            let ins = [f(&io.ins[0])?, f(&io.ins[1])?];
            along(*axis, sh(0), &ins, io.outs[0], |x, y, c| {
                log_softmax_backward(x[0], x[1], y, c)
            })
        }
    }
    Ok(())
}

/// `f(inputs, output, c)` of a kernel over the last axis, run over `axis` of operands of
/// shape `shape`: when `axis` is not last, on copies with it moved last, the result moved
/// back.
fn along<T: Real>(
    axis: usize,
    shape: &[usize],
    ins: &[&[T]],
    y: &mut [T],
    f: impl Fn(&[&[T]], &mut [T], usize),
) {
    let Some(perm) = axis_last(axis, shape.len()) else {
        return f(ins, y, last(shape));
    };
    let moved: Vec<Vec<T>> = ins
        .iter()
        .map(|x| {
            let mut m = vec![T::zero(); x.len()];
            transpose(x, &mut m, shape, &perm);
            m
        })
        .collect();
    let views: Vec<&[T]> = moved.iter().map(Vec::as_slice).collect();
    let mut out = vec![T::zero(); y.len()];
    f(&views, &mut out, shape[axis]);
    let moved_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    transpose(&out, y, &moved_shape, &inverse(&perm));
}

fn five<'a, T: Real>(v: &[&'a [T]]) -> [&'a [T]; 5] {
    [v[0], v[1], v[2], v[3], v[4]]
}

fn bn_dims(x: &[usize]) -> NormDims {
    NormDims {
        outer: x[0],
        feat: x[1],
        inner: x[2..].iter().product(),
    }
}
