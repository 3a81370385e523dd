//! Cross-entropy over logits and the exporter's negative log-likelihood
//! (`kernels/loss.cu`; the CPU reference is `cpu_backend/loss.rs`, same names): one block
//! per row (or one for the whole `nll_loss`), sums in f64.

use super::device::{n, Arg, Device, Grid, Idx, R};
use super::launch::{last, Io};
use crate::ops::loss::{classes, Loss};

/// `cross_entropy`: per-row losses (f64, in the workspace), then their mean.
pub(crate) fn cross_entropy(
    d: &mut Device,
    logits: u64,
    labels: Idx,
    loss: u64,
    rows: usize,
    c: usize,
) -> R {
    let per_row = d.scratch(8 * rows)?;
    let args = row_args(d, logits, labels, per_row, rows, c);
    d.launch("cross_entropy", Grid::Rows(rows), &args)?;
    let args = [Arg::Ptr(per_row), Arg::Ptr(loss), n(rows)];
    d.launch("cross_entropy_mean", Grid::One, &args)?;
    d.check_flag()
}

/// `cross_entropy_grad`: `(softmax(row) - onehot(label)) / rows`.
pub(crate) fn cross_entropy_grad(
    d: &mut Device,
    logits: u64,
    labels: Idx,
    dx: u64,
    rows: usize,
    c: usize,
) -> R {
    let args = row_args(d, logits, labels, dx, rows, c);
    d.launch("cross_entropy_grad", Grid::Rows(rows), &args)?;
    d.check_flag()
}

/// The arguments of the per-row cross-entropy kernels:
/// `(logits, labels, idx64, out, rows, c, flag)`.
fn row_args(d: &Device, logits: u64, labels: Idx, out: u64, rows: usize, c: usize) -> Vec<Arg> {
    [Arg::Ptr(logits)]
        .into_iter()
        .chain(labels.args())
        .chain([Arg::Ptr(out), n(rows), n(c), d.flag()])
        .collect()
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Loss, d: &mut Device, io: Io) -> R {
    let labels = || Idx::of(&io.ops_in[1], io.ins[1]);
    let (c, rows) = (last(&io.ops_in[0].shape), io.ops_in[1].numel());
    match k {
        Loss::CrossEntropy => cross_entropy(d, io.ins[0], labels(), io.outs[0], rows, c),
        Loss::CrossEntropyGrad => cross_entropy_grad(d, io.ins[0], labels(), io.outs[0], rows, c),
        Loss::NllLoss { ignore_index } => {
            let (c, inner) = classes(&io.ops_in[0].shape);
            let args: Vec<Arg> = [Arg::Ptr(io.ins[0])]
                .into_iter()
                .chain(labels().args())
                .chain([
                    Arg::Ptr(io.outs[0]),
                    Arg::Ptr(io.outs[1]),
                    n(rows),
                    n(c),
                    n(inner),
                ])
                .chain([Arg::I64(*ignore_index), d.flag()])
                .collect();
            d.launch("nll_loss", Grid::One, &args)?;
            d.check_flag()
        }
        Loss::NllLossBackward { ignore_index } => {
            let t = Idx::of(&io.ops_in[2], io.ins[2]);
            let ((c, inner), rows) = (classes(&io.ops_in[1].shape), io.ops_in[2].numel());
            let args: Vec<Arg> = [Arg::Ptr(io.ins[0])]
                .into_iter()
                .chain(t.args())
                .chain([
                    Arg::Ptr(io.ins[3]),
                    Arg::Ptr(io.outs[0]),
                    n(rows),
                    n(c),
                    n(inner),
                ])
                .chain([Arg::I64(*ignore_index), d.flag()])
                .collect();
            d.launch("nll_loss_backward", Grid::Elements(rows * c), &args)?;
            d.check_flag()
        }
    }
}
