//! Normalisations and softmax (`kernels/norm.cu`; the CPU reference is
//! `cpu_backend/norm.rs`, same names): one block per channel or row, f64 sums in a fixed
//! tree order.

use super::device::{n, Arg, Device, Grid, R};
use super::launch::{last, rows as rows_of, with_ptrs, Io, KERNEL_SLOTS};
use super::shape::transpose;
use crate::error::KernelError;
use crate::ops::norm::{axis_last, inverse, Norm};

/// Layout of a norm: `outer x feat x inner` (batch norm: features on axis 1).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NormDims {
    pub outer: usize,
    pub feat: usize,
    pub inner: usize,
}

fn ptrs(p: &[u64]) -> impl Iterator<Item = Arg> + '_ {
    p.iter().map(|&v| Arg::Ptr(v))
}

/// `batch_norm`: `(x, gamma, beta)` -> `[y, mean, invstd]`.
pub(crate) fn batch_norm(d: &Device, ins: [u64; 3], eps: f32, s: NormDims, outs: [u64; 3]) -> R {
    let args: Vec<Arg> = ptrs(&ins)
        .chain([Arg::F32(eps)])
        .chain(ptrs(&outs))
        .chain([n(s.outer), n(s.feat), n(s.inner)])
        .collect();
    d.launch("batch_norm", Grid::Rows(s.feat), &args)
}

/// `batch_norm_grad`: `(x, gamma, mean, invstd, dy)` -> `[dx, dgamma, dbeta]`.
pub(crate) fn batch_norm_grad(d: &Device, ins: [u64; 5], s: NormDims, outs: [u64; 3]) -> R {
    let args: Vec<Arg> = ptrs(&ins)
        .chain(ptrs(&outs))
        .chain([n(s.outer), n(s.feat), n(s.inner)])
        .collect();
    d.launch("batch_norm_grad", Grid::Rows(s.feat), &args)
}

/// `layer_norm` over `rows` rows of `feat` values.
pub(crate) fn layer_norm(
    d: &Device,
    ins: [u64; 3],
    eps: f32,
    rows: usize,
    feat: usize,
    outs: [u64; 3],
) -> R {
    let args: Vec<Arg> = ptrs(&ins)
        .chain([Arg::F32(eps)])
        .chain(ptrs(&outs))
        .chain([n(rows), n(feat)])
        .collect();
    d.launch("layer_norm", Grid::Rows(rows), &args)
}

/// `layer_norm_grad`: `dx` one block per row, then `dgamma`, `dbeta` one thread per
/// feature summing the rows in order.
pub(crate) fn layer_norm_grad(
    d: &Device,
    ins: [u64; 5],
    rows: usize,
    feat: usize,
    outs: [u64; 3],
) -> R {
    let [x, gamma, mean, rstd, dy] = ins;
    let [dx, dgamma, dbeta] = outs;
    let args: Vec<Arg> = ptrs(&[x, gamma, mean, rstd, dy, dx])
        .chain([n(rows), n(feat)])
        .collect();
    d.launch("layer_norm_grad", Grid::Rows(rows), &args)?;
    let args: Vec<Arg> = ptrs(&[x, mean, rstd, dy, dgamma, dbeta])
        .chain([n(rows), n(feat)])
        .collect();
    d.launch("layer_norm_grad_params", Grid::Elements(feat), &args)
}

/// `softmax` of `scale * x` over rows of `len`, optionally causal.
pub(crate) fn softmax(
    d: &Device,
    x: u64,
    y: u64,
    rows: usize,
    len: usize,
    scale: f32,
    causal: bool,
) -> R {
    if len == 0 {
        return Ok(()); // empty rows: nothing to write (and `r % len` would divide by 0)
    }
    let args = with_ptrs(
        &[x, y],
        [n(rows), n(len), Arg::F32(scale), Arg::I32(causal as i32)],
    );
    d.launch("softmax", Grid::Rows(rows), &args)
}

/// `softmax_grad`: `scale * y * (dy - sum(dy * y))` per row.
pub(crate) fn softmax_grad(
    d: &Device,
    y: u64,
    dy: u64,
    dx: u64,
    rows: usize,
    len: usize,
    scale: f32,
) -> R {
    let args = with_ptrs(&[y, dy, dx], [n(rows), n(len), Arg::F32(scale)]);
    d.launch("softmax_grad", Grid::Rows(rows), &args)
}

/// Row kernel `name` (`(inputs.., output, rows, c)` over the last axis) run over `axis`
/// of operands of shape `shape`: when `axis` is not last, on staged copies with it moved
/// last, the result moved back.
fn along(
    d: &mut Device,
    name: &'static str,
    axis: usize,
    shape: &[usize],
    ins: &[u64],
    y: u64,
) -> R {
    let len: usize = shape.iter().product();
    let c = shape.get(axis).copied().unwrap_or(1);
    let rows = len.checked_div(c).unwrap_or(0);
    let launch = |d: &Device, ins: &[u64], y: u64| {
        let args = with_ptrs(&[ins, &[y]].concat(), [n(rows), n(c)]);
        d.launch(name, Grid::Rows(rows), &args)
    };
    let Some(perm) = axis_last(axis, shape.len()) else {
        return launch(d, ins, y);
    };
    let mut moved = Vec::new();
    for (i, &x) in ins.iter().enumerate() {
        let m = d.staging(KERNEL_SLOTS + i, 4 * len)?;
        transpose(d, x, m, shape, &perm)?;
        moved.push(m);
    }
    let out = d.staging(KERNEL_SLOTS + ins.len(), 4 * len)?;
    launch(d, &moved, out)?;
    let moved_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    transpose(d, out, y, &moved_shape, &inverse(&perm))
}

/// Elements of the last `axes` axes of `shape` (1 for none).
fn trailing(shape: &[usize], axes: usize) -> usize {
    shape[shape.len().saturating_sub(axes)..].iter().product()
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Norm, d: &mut Device, io: Io) -> R {
    let x = io.ops_in[0].shape.as_slice();
    let rows = || rows_of(&io.ops_in[0]);
    match k {
        Norm::BatchNorm { eps } => {
            let three = [io.ins[0], io.ins[1], io.ins[2]];
            batch_norm(d, three, *eps as f32, bn_dims(x), out3(io.outs))
        }
        Norm::BatchNormGrad => batch_norm_grad(d, in5(io.ins), bn_dims(x), out3(io.outs)),
        // Over the last `axes` axes: rows of their product (the operands are contiguous).
        Norm::LayerNorm { eps, axes } => {
            let three = [io.ins[0], io.ins[1], io.ins[2]];
            let feat = trailing(x, *axes);
            let rows = io.ops_in[0].numel().checked_div(feat).unwrap_or(0);
            layer_norm(d, three, *eps as f32, rows, feat, out3(io.outs))
        }
        Norm::LayerNormGrad => layer_norm_grad(d, in5(io.ins), rows(), last(x), out3(io.outs)),
        Norm::Softmax { scale, causal } => {
            softmax(d, io.ins[0], io.outs[0], rows(), last(x), *scale as f32, *causal)
        }
        Norm::SoftmaxGrad { scale } => {
            softmax_grad(d, io.ins[0], io.ins[1], io.outs[0], rows(), last(x), *scale as f32)
        }
        Norm::BatchNormBackward { mask } => {
            let [dy, x, gamma, mean, invstd] = in5(io.ins);
            let s = bn_dims(&io.ops_in[1].shape);
            let sizes = [s.outer * s.feat * s.inner, s.feat, s.feat];
            let outs = masked(d, *mask, sizes, io.outs)?;
            batch_norm_grad(d, [x, gamma, mean, invstd, dy], s, outs)
        }
        Norm::LayerNormBackward { mask, axes } => {
            let [dy, x, mean, rstd, gamma] = in5(io.ins);
            let x_op = &io.ops_in[1];
            let feat = trailing(&x_op.shape, *axes);
            let rows = x_op.numel().checked_div(feat).unwrap_or(0);
            let outs = masked(d, *mask, [x_op.numel(), feat, feat], io.outs)?;
            layer_norm_grad(d, [x, gamma, mean, rstd, dy], rows, feat, outs)
        }
        Norm::BatchNormUpdateStats {
            momentum,
            eps,
            count,
        } => {
            let c = io.ops_in[0].numel();
            let args: Vec<Arg> = ptrs(&io.ins[..4])
                .chain(ptrs(&io.outs[..2]))
                .chain([
                    Arg::F32(*momentum as f32),
                    Arg::F32(*eps as f32),
                    n(*count as usize),
                    n(c),
                ])
                .collect();
            d.launch("batch_norm_update_stats", Grid::Elements(c), &args)
        }
        Norm::SoftmaxBackward => {
            softmax_grad(d, io.ins[1], io.ins[0], io.outs[0], rows(), last(x), 1.0)
        }
        Norm::LogSoftmax { axis } => along(d, "log_softmax", *axis, x, &io.ins[..1], io.outs[0]),
        Norm::LogSoftmaxBackward { axis } => along(
            d,
            "log_softmax_backward",
            *axis,
            x,
            &io.ins[..2],
            io.outs[0],
        ),
    }
}

/// The three results `(dx, dgamma, dbeta)` of a norm's backward: the outputs `mask` asks
/// for, in order, and staging buffers (of `sizes` floats) for the others, discarded.
fn masked(
    d: &mut Device,
    mask: [bool; 3],
    sizes: [usize; 3],
    outs: &[u64],
) -> Result<[u64; 3], KernelError> {
    let mut given = outs.iter();
    let mut all = [0u64; 3];
    for (i, a) in all.iter_mut().enumerate() {
        *a = match mask[i] {
            true => *given
                .next()
                .ok_or_else(|| KernelError::Operands("fewer outputs than the mask".into()))?,
            false => d.staging(KERNEL_SLOTS + i, 4 * sizes[i])?,
        };
    }
    Ok(all)
}

fn in5(ins: &[u64]) -> [u64; 5] {
    [ins[0], ins[1], ins[2], ins[3], ins[4]]
}

fn out3(outs: &[u64]) -> [u64; 3] {
    [outs[0], outs[1], outs[2]]
}

fn bn_dims(x: &[usize]) -> NormDims {
    NormDims {
        outer: x[0],
        feat: x[1],
        inner: x[2..].iter().product(),
    }
}
