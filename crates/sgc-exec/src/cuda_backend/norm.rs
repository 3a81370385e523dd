//! Normalisations, softmax and cross-entropy (`kernels/norm.cu`; the CPU reference is
//! `cpu_backend/norm.rs`, same names): one block per channel or row, f64 sums in a fixed
//! tree order.

use super::device::{n, Arg, Device, Grid, R};

/// Layout of a norm: `outer x feat x inner` (batch norm: features on axis 1).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NormDims {
    pub outer: usize,
    pub feat: usize,
    pub inner: usize,
}

/// An index operand: its address and whether it holds i64 (else i32).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Idx {
    pub ptr: u64,
    pub is_i64: bool,
}

impl Idx {
    fn args(self) -> [Arg; 2] {
        [Arg::Ptr(self.ptr), Arg::I32(self.is_i64 as i32)]
    }
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
    let args = [
        Arg::Ptr(x),
        Arg::Ptr(y),
        n(rows),
        n(len),
        Arg::F32(scale),
        Arg::I32(causal as i32),
    ];
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
    let args = [
        Arg::Ptr(y),
        Arg::Ptr(dy),
        Arg::Ptr(dx),
        n(rows),
        n(len),
        Arg::F32(scale),
    ];
    d.launch("softmax_grad", Grid::Rows(rows), &args)
}

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
    let args: Vec<Arg> = [Arg::Ptr(logits)]
        .into_iter()
        .chain(labels.args())
        .chain([Arg::Ptr(per_row), n(rows), n(c), d.flag()])
        .collect();
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
    let args: Vec<Arg> = [Arg::Ptr(logits)]
        .into_iter()
        .chain(labels.args())
        .chain([Arg::Ptr(dx), n(rows), n(c), d.flag()])
        .collect();
    d.launch("cross_entropy_grad", Grid::Rows(rows), &args)?;
    d.check_flag()
}
