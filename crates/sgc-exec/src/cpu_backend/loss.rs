//! Losses: cross-entropy over logits, negative log-likelihood over log-probabilities;
//! sums in f64, in row order.

use super::{f, idx, last, Indices, Io, R};
use crate::ops::loss::{classes, Loss};

/// Log-sum-exp of one row and its maximum.
fn lse(row: &[f32]) -> (f32, f64) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let s: f64 = row.iter().map(|&v| ((v - max) as f64).exp()).sum();
    (max, s.ln() + max as f64)
}

/// `cross_entropy`: mean over rows of `lse(row) - row[label]`.
pub(crate) fn cross_entropy(logits: &[f32], labels: &Indices, loss: &mut [f32], c: usize) -> R {
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
pub(crate) fn cross_entropy_grad(logits: &[f32], labels: &Indices, dx: &mut [f32], c: usize) -> R {
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

/// Element of `logp [N, C, inner]` of target position `r` (of `[N, inner]`) and class `l`.
fn at((c, inner): (usize, usize), r: usize, l: usize) -> usize {
    (r / inner * c + l) * inner + r % inner
}

/// `nll_loss_forward`, mean reduction: `(loss, total_weight)`.
pub(crate) fn nll_loss(
    logp: &[f32],
    t: &Indices,
    outs: &mut [&mut [f32]],
    (c, inner): (usize, usize),
    ignore: i64,
) -> R {
    let (mut s, mut count) = (0.0f64, 0usize);
    for r in 0..t.len() {
        if t.raw(r) == ignore {
            continue;
        }
        s -= f64::from(logp[at((c, inner), r, t.get(r, c)?)]);
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
    (c, inner): (usize, usize),
    ignore: i64,
) -> R {
    dx.fill(0.0);
    let g = -dloss[0] / total[0];
    for r in 0..t.len() {
        if t.raw(r) != ignore {
            dx[at((c, inner), r, t.get(r, c)?)] = g;
        }
    }
    Ok(())
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Loss, io: Io) -> R {
    let sh = |i: usize| io.ops_in[i].shape.as_slice();
    match k {
        Loss::CrossEntropy => {
            cross_entropy(f(&io.ins[0])?, idx(&io.ins[1])?, io.outs[0], last(sh(0)))
        }
        Loss::CrossEntropyGrad => {
            cross_entropy_grad(f(&io.ins[0])?, idx(&io.ins[1])?, io.outs[0], last(sh(0)))
        }
        Loss::NllLoss { ignore_index } => nll_loss(
            f(&io.ins[0])?,
            idx(&io.ins[1])?,
            io.outs,
            classes(sh(0)),
            *ignore_index,
        ),
        Loss::NllLossBackward { ignore_index } => {
            let (dl, t, tw) = (f(&io.ins[0])?, idx(&io.ins[2])?, f(&io.ins[3])?);
            nll_loss_backward(dl, t, tw, io.outs[0], classes(sh(1)), *ignore_index)
        }
    }
}
