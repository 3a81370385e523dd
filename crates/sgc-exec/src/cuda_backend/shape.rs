//! Data movement: transpose, concat, slice, reshape copies
//! (`kernels/shape.cu`; the CPU reference is `cpu_backend/shape.rs`, same names).

use super::device::{n, Arg, Device, DimsArg, Grid, R};
use super::launch::{no_kernel, Io};
use super::sources::MAX_RANK;
use crate::ops::shape::Shape;
use crate::error::KernelError;

/// `reshape` into its own storage (a view needs no kernel: the executor skips it).
pub(crate) fn reshape(d: &Device, x: u64, y: u64, len: usize) -> R {
    d.launch(
        "reshape",
        Grid::Elements(len),
        &[Arg::Ptr(x), Arg::Ptr(y), n(len)],
    )
}

/// `transpose`: `y.shape[i] = x.shape[perm[i]]`.
pub(crate) fn transpose(d: &Device, x: u64, y: u64, shape: &[usize], perm: &[usize]) -> R {
    let r = shape.len();
    if r > MAX_RANK || perm.len() != r {
        return Err(KernelError::Operands(format!(
            "rank {r} (perm {perm:?}); at most {MAX_RANK} axes"
        )));
    }
    let mut strides = vec![1usize; r];
    for a in (0..r.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let mut dims = DimsArg {
        rank: r as i64,
        ..DimsArg::default()
    };
    for (i, &p) in perm.iter().enumerate() {
        dims.out_shape[i] = shape[p] as i64;
        dims.src_strides[i] = strides[p] as i64;
    }
    let len: usize = shape.iter().product();
    let args = [Arg::Ptr(x), Arg::Ptr(y), n(len), Arg::Dims(dims)];
    d.launch("transpose", Grid::Elements(len), &args)
}

/// `(outer, inner)` around `axis` of `shape`.
fn around(shape: &[usize], axis: usize) -> (usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis + 1..].iter().product(),
    )
}

/// `concat` along `axis`: operands `(address, shape)`, one launch each.
pub(crate) fn concat(d: &Device, xs: &[(u64, &[usize])], y: u64, axis: usize) -> R {
    let (outer, inner) = around(xs[0].1, axis);
    let row: usize = xs.iter().map(|(_, s)| s[axis] * inner).sum();
    let mut at = 0;
    for (x, s) in xs {
        let chunk = s[axis] * inner;
        let args = [Arg::Ptr(*x), Arg::Ptr(y), n(outer), n(chunk), n(row), n(at)];
        d.launch("concat", Grid::Elements(outer * chunk), &args)?;
        at += chunk;
    }
    Ok(())
}

/// `slice`: `x[.., start..end, ..]` along `axis`.
pub(crate) fn slice(
    d: &Device,
    x: u64,
    y: u64,
    shape: &[usize],
    axis: usize,
    start: usize,
    end: usize,
) -> R {
    let (outer, inner) = around(shape, axis);
    let (row, chunk) = (shape[axis] * inner, (end - start) * inner);
    let args = [
        Arg::Ptr(x),
        Arg::Ptr(y),
        n(outer),
        n(chunk),
        n(row),
        n(start * inner),
    ];
    d.launch("slice", Grid::Elements(outer * chunk), &args)
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Shape, d: &mut Device, io: Io) -> R {
    let x = io.ops_in[0].shape.as_slice();
    match k {
        Shape::Reshape => reshape(d, io.ins[0], io.outs[0], io.ops_in[0].numel()),
        Shape::Transpose { perm } => transpose(d, io.ins[0], io.outs[0], x, perm),
        Shape::Concat { axis } => {
            let xs: Vec<(u64, &[usize])> = io
                .ins
                .iter()
                .zip(io.ops_in)
                .map(|(&p, o)| (p, o.shape.as_slice()))
                .collect();
            concat(d, &xs, io.outs[0], *axis)
        }
        Shape::Slice { axis, start, end } => {
            slice(d, io.ins[0], io.outs[0], x, *axis, *start, *end)
        }
        _ => Err(no_kernel()),
    }
}
