//! Normalisations, softmax and cross-entropy: reductions in f64, in a fixed order.

use super::Indices;
use crate::KernelError;

/// Layout of a norm: `outer x feat x inner` for batch norm (features on axis 1, stats over
/// outer and inner), `rows x feat` with `inner = 1` per row for layer norm.
#[derive(Clone, Copy)]
pub(crate) struct NormDims {
    pub outer: usize,
    pub feat: usize,
    pub inner: usize,
}

/// `batch_norm`: per channel `c`, statistics over `outer * inner` values.
pub(crate) fn batch_norm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    d: NormDims,
    out: &mut [&mut [f32]],
) {
    let m = (d.outer * d.inner) as f64;
    for c in 0..d.feat {
        let vals = || {
            (0..d.outer)
                .flat_map(move |o| (0..d.inner).map(move |i| (o * d.feat + c) * d.inner + i))
        };
        let mean = vals().map(|i| x[i] as f64).sum::<f64>() / m;
        let var = vals().map(|i| (x[i] as f64 - mean).powi(2)).sum::<f64>() / m;
        let invstd = (1.0 / (var + eps as f64).sqrt()) as f32;
        let mean = mean as f32;
        for i in vals() {
            out[0][i] = (x[i] - mean) * invstd * gamma[c] + beta[c];
        }
        out[1][c] = mean;
        out[2][c] = invstd;
    }
}

/// `batch_norm_grad`: `dx = gamma*invstd/M * (M*dy - sum dy - xhat * sum dy*xhat)`.
pub(crate) fn batch_norm_grad(ins: [&[f32]; 5], d: NormDims, out: &mut [&mut [f32]]) {
    let [x, gamma, mean, invstd, dy] = ins;
    let m = (d.outer * d.inner) as f64;
    for c in 0..d.feat {
        let vals = || {
            (0..d.outer)
                .flat_map(move |o| (0..d.inner).map(move |i| (o * d.feat + c) * d.inner + i))
        };
        let xhat = |i: usize| ((x[i] - mean[c]) * invstd[c]) as f64;
        let dbeta: f64 = vals().map(|i| dy[i] as f64).sum();
        let dgamma: f64 = vals().map(|i| dy[i] as f64 * xhat(i)).sum();
        let k = gamma[c] as f64 * invstd[c] as f64 / m;
        for i in vals() {
            out[0][i] = (k * (m * dy[i] as f64 - dbeta - xhat(i) * dgamma)) as f32;
        }
        out[1][c] = dgamma as f32;
        out[2][c] = dbeta as f32;
    }
}

/// `layer_norm` over rows of `feat` values.
pub(crate) fn layer_norm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    feat: usize,
    out: &mut [&mut [f32]],
) {
    let rows = x.len().checked_div(feat).unwrap_or(0);
    for r in 0..rows {
        let row = &x[r * feat..(r + 1) * feat];
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / feat as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / feat as f64;
        let rstd = (1.0 / (var + eps as f64).sqrt()) as f32;
        let mean = mean as f32;
        for (j, &v) in row.iter().enumerate() {
            out[0][r * feat + j] = (v - mean) * rstd * gamma[j] + beta[j];
        }
        out[1][r] = mean;
        out[2][r] = rstd;
    }
}

/// `layer_norm_grad`: per row, `dx = rstd/D * (D*g - sum g - xhat * sum g*xhat)` with
/// `g = dy * gamma`; `dgamma`, `dbeta` summed over rows in order.
pub(crate) fn layer_norm_grad(ins: [&[f32]; 5], feat: usize, out: &mut [&mut [f32]]) {
    let [x, gamma, mean, rstd, dy] = ins;
    let rows = x.len().checked_div(feat).unwrap_or(0);
    let mut dgamma = vec![0f64; feat];
    let mut dbeta = vec![0f64; feat];
    let dd = feat as f64;
    for r in 0..rows {
        let at = |j: usize| r * feat + j;
        let xhat = |j: usize| ((x[at(j)] - mean[r]) * rstd[r]) as f64;
        let g = |j: usize| dy[at(j)] as f64 * gamma[j] as f64;
        let sg: f64 = (0..feat).map(g).sum();
        let sgx: f64 = (0..feat).map(|j| g(j) * xhat(j)).sum();
        for j in 0..feat {
            out[0][at(j)] = (rstd[r] as f64 / dd * (dd * g(j) - sg - xhat(j) * sgx)) as f32;
            dgamma[j] += dy[at(j)] as f64 * xhat(j);
            dbeta[j] += dy[at(j)] as f64;
        }
    }
    for j in 0..feat {
        out[1][j] = dgamma[j] as f32;
        out[2][j] = dbeta[j] as f32;
    }
}

/// `softmax` of `scale * x` over rows of `n`; with `causal`, row `q` of each `n x n`
/// block keeps keys `0..=q` only (the others get probability 0).
pub(crate) fn softmax(x: &[f32], y: &mut [f32], n: usize, scale: f32, causal: bool) {
    let rows = x.len().checked_div(n).unwrap_or(0);
    for r in 0..rows {
        let keep = if causal { (r % n) + 1 } else { n };
        let (xr, yr) = (&x[r * n..(r + 1) * n], &mut y[r * n..(r + 1) * n]);
        let max = xr[..keep]
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| m.max(scale * v));
        let mut sum = 0f64;
        for j in 0..keep {
            let e = (scale * xr[j] - max).exp();
            yr[j] = e;
            sum += e as f64;
        }
        let inv = (1.0 / sum) as f32;
        yr[..keep].iter_mut().for_each(|v| *v *= inv);
        yr[keep..].fill(0.0);
    }
}

/// `softmax_grad`: `scale * y * (dy - sum(dy * y))` per row.
pub(crate) fn softmax_grad(y: &[f32], dy: &[f32], dx: &mut [f32], n: usize, scale: f32) {
    let rows = y.len().checked_div(n).unwrap_or(0);
    for r in 0..rows {
        let s = r * n..(r + 1) * n;
        let dot: f64 = y[s.clone()]
            .iter()
            .zip(&dy[s.clone()])
            .map(|(a, b)| (a * b) as f64)
            .sum();
        for i in s {
            dx[i] = scale * y[i] * (dy[i] - dot as f32);
        }
    }
}

/// Log-sum-exp of one row and its maximum.
fn lse(row: &[f32]) -> (f32, f64) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let s: f64 = row.iter().map(|&v| ((v - max) as f64).exp()).sum();
    (max, s.ln() + max as f64)
}

/// `cross_entropy`: mean over rows of `lse(row) - row[label]`.
pub(crate) fn cross_entropy(
    logits: &[f32],
    labels: &Indices,
    loss: &mut [f32],
    c: usize,
) -> Result<(), KernelError> {
    let rows = labels.len();
    let mut total = 0f64;
    for r in 0..rows {
        let row = &logits[r * c..(r + 1) * c];
        let l = labels.get(r, c)?;
        total += lse(row).1 - row[l] as f64;
    }
    loss[0] = (total / rows.max(1) as f64) as f32;
    Ok(())
}

/// `cross_entropy_grad`: `(softmax(row) - onehot(label)) / rows`.
pub(crate) fn cross_entropy_grad(
    logits: &[f32],
    labels: &Indices,
    dx: &mut [f32],
    c: usize,
) -> Result<(), KernelError> {
    let rows = labels.len();
    for r in 0..rows {
        let row = &logits[r * c..(r + 1) * c];
        let l = labels.get(r, c)?;
        let (_, lse) = lse(row);
        for j in 0..c {
            let p = ((row[j] as f64) - lse).exp();
            let t = if j == l { 1.0 } else { 0.0 };
            dx[r * c + j] = ((p - t) / rows as f64) as f32;
        }
    }
    Ok(())
}
