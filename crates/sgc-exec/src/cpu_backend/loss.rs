//! Losses: cross-entropy over logits, negative log-likelihood over log-probabilities;
//! sums in f64, in row order.

use super::{f, idx, last, Host, Indices, Io, R};
use crate::ops::loss::{classes, Loss};
use crate::real::Real;

/// Log-sum-exp of one row and its maximum.
fn lse<T: Real>(row: &[T]) -> (T, f64) {
    let max = row.iter().fold(T::neg_infinity(), |m, &v| m.max(v));
    let s: f64 = row.iter().map(|&v| (v - max).f64().exp()).sum();
    (max, s.ln() + max.f64())
}

/// `cross_entropy`: mean over rows of `lse(row) - row[label]`.
pub(crate) fn cross_entropy<T: Real>(
    logits: &[T],
    labels: &Indices,
    loss: &mut [T],
    c: usize,
) -> R {
    let rows = labels.len();
    let mut total = 0f64;
    for r in 0..rows {
        let row = &logits[r * c..(r + 1) * c];
        let l = labels.get(r, c)?;
        total += lse(row).1 - row[l].f64();
    }
    loss[0] = T::of(total / rows.max(1) as f64);
    Ok(())
}

/// `cross_entropy_grad`: `(softmax(row) - onehot(label)) / rows`.
pub(crate) fn cross_entropy_grad<T: Real>(
    logits: &[T],
    labels: &Indices,
    dx: &mut [T],
    c: usize,
) -> R {
    let rows = labels.len();
    for r in 0..rows {
        let row = &logits[r * c..(r + 1) * c];
        let l = labels.get(r, c)?;
        let (_, lse) = lse(row);
        for j in 0..c {
            let p = (row[j].f64() - lse).exp();
            let t = if j == l { 1.0 } else { 0.0 };
            dx[r * c + j] = T::of((p - t) / rows as f64);
        }
    }
    Ok(())
}

/// Element of `logp [N, C, inner]` of target position `r` (of `[N, inner]`) and class `l`.
fn at((c, inner): (usize, usize), r: usize, l: usize) -> usize {
    (r / inner * c + l) * inner + r % inner
}

/// `nll_loss_forward`, mean reduction: `(loss, total_weight)`.
pub(crate) fn nll_loss<T: Real>(
    logp: &[T],
    t: &Indices,
    outs: &mut [&mut [T]],
    (c, inner): (usize, usize),
    ignore: i64,
) -> R {
    let (mut s, mut count) = (0.0f64, 0usize);
    for r in 0..t.len() {
        if t.raw(r) == ignore {
            continue;
        }
        s -= logp[at((c, inner), r, t.get(r, c)?)].f64();
        count += 1;
    }
    outs[0][0] = T::of(s / count as f64);
    outs[1][0] = T::of(count as f64);
    Ok(())
}

/// `nll_loss_backward`, mean reduction: `-dloss / total_weight` at each target.
pub(crate) fn nll_loss_backward<T: Real>(
    dloss: &[T],
    t: &Indices,
    total: &[T],
    dx: &mut [T],
    (c, inner): (usize, usize),
    ignore: i64,
) -> R {
    dx.fill(T::zero());
    let g = -dloss[0] / total[0];
    for r in 0..t.len() {
        if t.raw(r) != ignore {
            dx[at((c, inner), r, t.get(r, c)?)] = g;
        }
    }
    Ok(())
}

/// Runs a kernel of the family.
pub(super) fn run<T: Host>(k: &Loss, io: Io<T>) -> R {
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
