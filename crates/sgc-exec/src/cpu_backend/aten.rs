//! Kernels of the PyTorch exporter's ops that no builder kernel computes, with ATen's
//! semantics (`aten.convolution_backward`, `native_batch_norm_backward`, the running
//! statistics update, pooling with indices, average pooling, reductions, broadcasting,
//! `addmm`, log-softmax and the negative log-likelihood). Reductions over the batch
//! accumulate in f64 in a fixed order, so a recomputation is bitwise identical.

use super::conv::{self, Window};
use super::linalg;
use super::norm::{self, NormDims};
use super::Indices;
use crate::KernelError;

/// Channels `[grp * c, (grp + 1) * c)` of every image of `x` (`[n, total, plane]`),
/// contiguous.
fn gather(x: &[f32], n: usize, total: usize, c: usize, grp: usize, plane: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * c * plane);
    for img in 0..n {
        let start = (img * total + grp * c) * plane;
        out.extend_from_slice(&x[start..start + c * plane]);
    }
    out
}

/// The inverse of [`gather`]: `part` written back into its channels of `y`.
fn scatter(
    y: &mut [f32],
    part: &[f32],
    n: usize,
    total: usize,
    c: usize,
    grp: usize,
    plane: usize,
) {
    for img in 0..n {
        let start = (img * total + grp * c) * plane;
        y[start..start + c * plane].copy_from_slice(&part[img * c * plane..(img + 1) * c * plane]);
    }
}

/// One group of a grouped convolution: its input and output channels, its window (the
/// group's channels), the input and output plane sizes and its slice of the weight.
struct Groups {
    cg: usize,
    og: usize,
    gw: Window,
    pin: usize,
    pout: usize,
    wlen: usize,
}

impl Groups {
    fn of(g: &Window, o: usize, groups: usize) -> Groups {
        let (cg, og) = (g.c / groups, o / groups);
        Groups {
            cg,
            og,
            gw: Window { c: cg, ..*g },
            pin: g.h * g.w,
            pout: g.ho * g.wo,
            wlen: og * cg * g.kh * g.kw,
        }
    }
}

/// `convolution` with `groups` (each group's output channels see only its input
/// channels; depthwise when `groups` is the channel count) and an optional bias: per group,
/// the builder's `conv2d` over that group's channels.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_grouped(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    g: &Window,
    o: usize,
    groups: usize,
) {
    let Groups {
        cg,
        og,
        gw,
        pin,
        pout,
        wlen,
    } = Groups::of(g, o, groups);
    for grp in 0..groups {
        let xs = gather(x, g.n, g.c, cg, grp, pin);
        let mut ys = vec![0.0; g.n * og * pout];
        conv::conv2d(&xs, &w[grp * wlen..(grp + 1) * wlen], &mut ys, &gw, og);
        scatter(y, &ys, g.n, o, og, grp, pout);
    }
    if let Some(b) = bias {
        for (i, plane) in y.chunks_mut(pout.max(1)).enumerate() {
            let v = b[i % o.max(1)];
            for y in plane {
                *y += v;
            }
        }
    }
}

/// `convolution_backward`: `(dy, x, w)` -> the masked results of `(dx, dw, dbias)`, per
/// group when `groups > 1`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_backward(
    dy: &[f32],
    x: &[f32],
    w: &[f32],
    outs: &mut [&mut [f32]],
    mask: [bool; 3],
    g: &Window,
    o: usize,
    groups: usize,
) {
    let Groups {
        cg,
        og,
        gw,
        pin,
        pout,
        wlen,
    } = Groups::of(g, o, groups);
    let mut slot = 0;
    if mask[0] {
        if groups == 1 {
            conv::conv2d_grad_input(dy, w, outs[slot], g, o);
        } else {
            for grp in 0..groups {
                let dys = gather(dy, g.n, o, og, grp, pout);
                let mut dxs = vec![0.0; g.n * cg * pin];
                conv::conv2d_grad_input(&dys, &w[grp * wlen..(grp + 1) * wlen], &mut dxs, &gw, og);
                scatter(outs[slot], &dxs, g.n, g.c, cg, grp, pin);
            }
        }
        slot += 1;
    }
    if mask[1] {
        if groups == 1 {
            conv::conv2d_grad_weight(x, dy, outs[slot], g, o);
        } else {
            for grp in 0..groups {
                let (xs, dys) = (
                    gather(x, g.n, g.c, cg, grp, pin),
                    gather(dy, g.n, o, og, grp, pout),
                );
                let dw = &mut outs[slot][grp * wlen..(grp + 1) * wlen];
                conv::conv2d_grad_weight(&xs, &dys, dw, &gw, og);
            }
        }
        slot += 1;
    }
    if mask[2] {
        for (c, db) in outs[slot].iter_mut().enumerate() {
            let mut s = 0.0f64;
            for n in 0..g.n {
                let start = (n * o + c) * pout;
                s += dy[start..start + pout]
                    .iter()
                    .map(|&v| f64::from(v))
                    .sum::<f64>();
            }
            *db = s as f32;
        }
    }
}

/// `bernoulli.p`: ones with probability `p`, from the counter-based stream of `seed` at
/// run `run` (SplitMix64; 53 random bits per draw).
pub(crate) fn bernoulli(y: &mut [f32], p: f64, seed: u64, run: u64) {
    let mut rng = crate::init::SplitMix64::new(seed ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for v in y.iter_mut() {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        *v = if u < p { 1.0 } else { 0.0 };
    }
}

/// `native_batch_norm_backward`: `(dy, x, gamma, mean, invstd)` -> the masked results of
/// `(dx, dgamma, dbeta)` (the builder's `batch_norm_grad`, absent results discarded).
pub(crate) fn batch_norm_backward(
    ins: [&[f32]; 5],
    d: NormDims,
    mask: [bool; 3],
    outs: &mut [&mut [f32]],
) {
    let [dy, x, gamma, mean, invstd] = ins;
    let sizes = [x.len(), d.feat, d.feat];
    with_masked(mask, sizes, outs, |all| {
        norm::batch_norm_grad([x, gamma, mean, invstd, dy], d, all)
    });
}

/// `native_layer_norm_backward`: `(dy, x, mean, rstd, gamma)` -> the masked results of
/// `(dx, dgamma, dbeta)` (the builder's `layer_norm_grad`, absent results discarded).
pub(crate) fn layer_norm_backward(
    ins: [&[f32]; 5],
    feat: usize,
    mask: [bool; 3],
    outs: &mut [&mut [f32]],
) {
    let [dy, x, mean, rstd, gamma] = ins;
    let sizes = [x.len(), feat, feat];
    with_masked(mask, sizes, outs, |all| {
        norm::layer_norm_grad([x, gamma, mean, rstd, dy], feat, all)
    });
}

/// Runs `f` on all three results, the ones `mask` leaves out in scratch buffers.
fn with_masked(
    mask: [bool; 3],
    sizes: [usize; 3],
    outs: &mut [&mut [f32]],
    f: impl FnOnce(&mut [&mut [f32]]),
) {
    let mut scratch: Vec<Vec<f32>> = (0..3)
        .map(|i| vec![0.0; if mask[i] { 0 } else { sizes[i] }])
        .collect();
    let mut given = outs.iter_mut();
    let mut all: Vec<&mut [f32]> = Vec::with_capacity(3);
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
pub(crate) fn batch_norm_update_stats(
    ins: [&[f32]; 4],
    momentum: f32,
    eps: f32,
    count: u64,
    outs: &mut [&mut [f32]],
) {
    let [rm, rv, mean, invstd] = ins;
    let unbias = count as f64 / (count as f64 - 1.0);
    let m = f64::from(momentum);
    for c in 0..rm.len() {
        let var = 1.0 / (f64::from(invstd[c]) * f64::from(invstd[c])) - f64::from(eps);
        outs[0][c] = ((1.0 - m) * f64::from(rm[c]) + m * f64::from(mean[c])) as f32;
        outs[1][c] = ((1.0 - m) * f64::from(rv[c]) + m * var * unbias) as f32;
    }
}

pub(crate) fn add_scalar(x: &[f32], y: &mut [f32], v: f32) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = x + v;
    }
}

pub(crate) fn mul_scalar(x: &[f32], y: &mut [f32], v: f32) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = x * v;
    }
}

pub(crate) fn div_scalar(x: &[f32], y: &mut [f32], v: f32) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = x / v;
    }
}

/// `threshold_backward`: `dy` where `x > threshold`, else 0.
pub(crate) fn threshold_backward(dy: &[f32], x: &[f32], dx: &mut [f32], threshold: f32) {
    for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
        *d = if v > threshold { g } else { 0.0 };
    }
}

/// `max_pool2d_with_indices`: each window's maximum (its first, as ATen picks) and the
/// flat index of that maximum in its `H*W` plane.
pub(crate) fn max_pool2d_indices(x: &[f32], y: &mut [f32], idx: &mut [i64], g: &Window) {
    let plane_in = g.h * g.w;
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                let at = (plane * g.ho + oi) * g.wo + oj;
                match conv::argmax(x, g, plane, oi, oj) {
                    Some(i) => {
                        y[at] = x[i];
                        idx[at] = (i - plane * plane_in) as i64;
                    }
                    None => {
                        y[at] = f32::NEG_INFINITY;
                        idx[at] = -1;
                    }
                }
            }
        }
    }
}

/// `max_pool2d_with_indices_backward`: each window's gradient added at its index.
pub(crate) fn max_pool2d_indices_backward(
    dy: &[f32],
    idx: &Indices,
    dx: &mut [f32],
    g: &Window,
) -> Result<(), KernelError> {
    dx.fill(0.0);
    let plane_in = g.h * g.w;
    let plane_out = g.ho * g.wo;
    for (at, &grad) in dy.iter().enumerate() {
        let i = idx.get(at, plane_in)?;
        dx[(at / plane_out) * plane_in + i] += grad;
    }
    Ok(())
}

/// `avg_pool2d` with `count_include_pad`: each window's sum over `k*k`.
pub(crate) fn avg_pool2d(x: &[f32], y: &mut [f32], g: &Window) {
    let div = (g.kh * g.kw) as f32;
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                let mut s = 0.0f32;
                for (i, j) in conv::taps(g, oi, oj) {
                    s += x[(plane * g.h + i) * g.w + j];
                }
                y[(plane * g.ho + oi) * g.wo + oj] = s / div;
            }
        }
    }
}

/// `avg_pool2d_backward`: each window's gradient over `k*k` spread on its taps.
pub(crate) fn avg_pool2d_backward(dy: &[f32], dx: &mut [f32], g: &Window) {
    dx.fill(0.0);
    let div = (g.kh * g.kw) as f32;
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                let grad = dy[(plane * g.ho + oi) * g.wo + oj] / div;
                for (i, j) in conv::taps(g, oi, oj) {
                    dx[(plane * g.h + i) * g.w + j] += grad;
                }
            }
        }
    }
}

/// Sum (or mean) of `x` viewed as `[outer, red, inner]` over `red`, in f64.
pub(crate) fn reduce(x: &[f32], y: &mut [f32], red: usize, inner: usize, mean: bool) {
    for (o, chunk) in y.chunks_mut(inner.max(1)).enumerate() {
        for (i, y) in chunk.iter_mut().enumerate() {
            let s: f64 = (0..red)
                .map(|r| f64::from(x[(o * red + r) * inner + i]))
                .sum();
            *y = if mean { s / red as f64 } else { s } as f32;
        }
    }
}

/// Broadcast `x` (shape `xs`) to `y` (shape `ys`), axes aligned on the right.
pub(crate) fn expand(x: &[f32], y: &mut [f32], xs: &[usize], ys: &[usize]) {
    let lead = ys.len() - xs.len();
    // Stride of each output axis in `x` (0 where `x` broadcasts).
    let mut strides = vec![0usize; ys.len()];
    let mut s = 1;
    for d in (0..xs.len()).rev() {
        strides[lead + d] = if xs[d] == 1 { 0 } else { s };
        s *= xs[d];
    }
    let mut pos = vec![0usize; ys.len()];
    for v in y.iter_mut() {
        *v = x[pos.iter().zip(&strides).map(|(p, s)| p * s).sum::<usize>()];
        for d in (0..ys.len()).rev() {
            pos[d] += 1;
            if pos[d] < ys[d] {
                break;
            }
            pos[d] = 0;
        }
    }
}

/// `addmm`: `a [M, K] @ b [K, N] + bias [N]` (`b [N, K]` when `transpose_b`).
pub(crate) fn addmm(
    bias: &[f32],
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
    k: usize,
    n: usize,
    transpose_b: bool,
) {
    linalg::matmul(a, b, y, k, n, transpose_b);
    for row in y.chunks_mut(n.max(1)) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

/// Log-softmax over rows of `n`.
pub(crate) fn log_softmax(x: &[f32], y: &mut [f32], n: usize) {
    for (xr, yr) in x.chunks(n.max(1)).zip(y.chunks_mut(n.max(1))) {
        let m = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let s: f64 = xr.iter().map(|&v| f64::from(v - m).exp()).sum();
        let lse = s.ln() as f32;
        for (y, &v) in yr.iter_mut().zip(xr) {
            *y = v - m - lse;
        }
    }
}

/// `_log_softmax_backward_data`: `dy - exp(y) * sum(dy)` over rows of `n`.
pub(crate) fn log_softmax_backward(dy: &[f32], y: &[f32], dx: &mut [f32], n: usize) {
    let rows = dy.chunks(n.max(1)).zip(y.chunks(n.max(1)));
    for ((dr, yr), xr) in rows.zip(dx.chunks_mut(n.max(1))) {
        let s: f64 = dr.iter().map(|&v| f64::from(v)).sum();
        for ((x, &d), &v) in xr.iter_mut().zip(dr).zip(yr) {
            *x = d - (f64::from(v).exp() * s) as f32;
        }
    }
}

/// `nll_loss_forward`, mean reduction: `(loss, total_weight)`.
pub(crate) fn nll_loss(
    logp: &[f32],
    t: &Indices,
    outs: &mut [&mut [f32]],
    c: usize,
    ignore: i64,
) -> Result<(), KernelError> {
    let (mut s, mut count) = (0.0f64, 0usize);
    for r in 0..t.len() {
        if t.raw(r) == ignore {
            continue;
        }
        s -= f64::from(logp[r * c + t.get(r, c)?]);
        count += 1;
    }
    outs[0][0] = (s / count as f64) as f32;
    outs[1][0] = count as f32;
    Ok(())
}

/// `nll_loss_backward`, mean reduction: `-dloss / total_weight` at each target.
pub(crate) fn nll_loss_backward(
    dloss: &[f32],
    t: &Indices,
    total: &[f32],
    dx: &mut [f32],
    c: usize,
    ignore: i64,
) -> Result<(), KernelError> {
    dx.fill(0.0);
    let g = -dloss[0] / total[0];
    for r in 0..t.len() {
        if t.raw(r) != ignore {
            dx[r * c + t.get(r, c)?] = g;
        }
    }
    Ok(())
}
