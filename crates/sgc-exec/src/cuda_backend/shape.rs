//! Data movement: embedding lookups, transpose, concat, slice, reshape copies
//! (`kernels/shape.cu`; the CPU reference is `cpu_backend/shape.rs`, same names).

use super::device::{n, Arg, Device, DimsArg, Grid, R};
use super::norm::Idx;
use super::sources::MAX_RANK;
use crate::KernelError;

/// `embedding`: row `ids[r]` of `w [V, D]` into row `r` of the output.
pub(crate) fn embedding(
    d: &mut Device,
    ids: Idx,
    w: u64,
    y: u64,
    rows: usize,
    v: usize,
    dd: usize,
) -> R {
    let args = [
        Arg::Ptr(ids.ptr),
        Arg::I32(ids.is_i64 as i32),
        Arg::Ptr(w),
        Arg::Ptr(y),
        n(rows),
        n(v),
        n(dd),
        d.flag(),
    ];
    d.launch("embedding", Grid::Elements(rows * dd), &args)?;
    d.check_flag()
}

/// `embedding_grad`: `dw[ids[r]] += dy[r]`, rows in order (one thread per column).
pub(crate) fn embedding_grad(
    d: &mut Device,
    ids: Idx,
    dy: u64,
    dw: u64,
    rows: usize,
    v: usize,
    dd: usize,
) -> R {
    let args = [
        Arg::Ptr(ids.ptr),
        Arg::I32(ids.is_i64 as i32),
        Arg::Ptr(dy),
        Arg::Ptr(dw),
        n(rows),
        n(v),
        n(dd),
        d.flag(),
    ];
    d.launch("embedding_grad", Grid::Elements(dd), &args)?;
    d.check_flag()
}

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
