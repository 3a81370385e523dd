//! Convolution (im2col + sgemm) over `[N, C, H, W]`, grouped convolution and ATen's
//! `convolution_backward` (per group, over the plain kernels).

use super::linalg::{gemm, Mat};
use super::{f, Host, Io, R};
use crate::ops::conv::Conv;
use crate::real::Real;
use crate::window::Groups;

pub(crate) use crate::window::Window;

impl Window {
    /// Input row (`axis` 0) or column (1) of output position `o` and kernel tap `k`, if
    /// inside the image.
    pub(super) fn src(&self, o: usize, k: usize, axis: usize) -> Option<usize> {
        let len = [self.h, self.w][axis];
        (o * self.stride + k)
            .checked_sub(self.pad[axis])
            .filter(|&i| i < len)
    }
}

/// Every entry of the unfolded matrix (`[C*kh*kw, Ho*Wo]`) of one image `[C, H, W]`, in a
/// fixed order: `f(entry, Some(pixel))` for a tap inside the image, `f(entry, None)` for
/// padding.
fn taps(g: &Window, mut f: impl FnMut(usize, Option<usize>)) {
    let cols = g.col_cols();
    for c in 0..g.c {
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = (c * g.kh + ki) * g.kw + kj;
                for oi in 0..g.ho {
                    for oj in 0..g.wo {
                        let pixel = match (g.src(oi, ki, 0), g.src(oj, kj, 1)) {
                            (Some(i), Some(j)) => Some((c * g.h + i) * g.w + j),
                            _ => None,
                        };
                        f(row * cols + oi * g.wo + oj, pixel);
                    }
                }
            }
        }
    }
}

/// Unfolds image `x` (`[C, H, W]`) into `col` (`[C*kh*kw, Ho*Wo]`), zeros for padding.
fn im2col<T: Real>(x: &[T], g: &Window, col: &mut [T]) {
    taps(g, |entry, pixel| {
        col[entry] = pixel.map_or(T::zero(), |p| x[p])
    });
}

/// Folds `col` back onto image `dx` (`[C, H, W]`), summing overlaps in a fixed order.
fn col2im<T: Real>(col: &[T], g: &Window, dx: &mut [T]) {
    dx.fill(T::zero());
    taps(g, |entry, pixel| {
        if let Some(p) = pixel {
            dx[p] += col[entry];
        }
    });
}

/// `conv2d`: per image, `y[n] [O, Ho*Wo] = w [O, C*kh*kw] @ im2col(x[n])`.
pub(crate) fn conv2d<T: Real>(x: &[T], w: &[T], y: &mut [T], g: &Window, o: usize) {
    let (rows, cols) = (g.col_rows(), g.col_cols());
    let mut col = vec![T::zero(); rows * cols];
    for n in 0..g.n {
        im2col(&x[n * g.image()..], g, &mut col);
        let yn = &mut y[n * o * cols..(n + 1) * o * cols];
        gemm(
            o,
            rows,
            cols,
            Mat::new(w, rows, false),
            Mat::new(&col, cols, false),
            0.0,
            yn,
        );
    }
}

/// `conv2d_grad_input`: per image, `col = w^T @ dy[n]`, folded back with col2im.
pub(crate) fn conv2d_grad_input<T: Real>(dy: &[T], w: &[T], dx: &mut [T], g: &Window, o: usize) {
    let (rows, cols) = (g.col_rows(), g.col_cols());
    let mut col = vec![T::zero(); rows * cols];
    let img = g.image();
    for n in 0..g.n {
        let dyn_ = &dy[n * o * cols..(n + 1) * o * cols];
        gemm(
            rows,
            o,
            cols,
            Mat::new(w, rows, true),
            Mat::new(dyn_, cols, false),
            0.0,
            &mut col,
        );
        col2im(&col, g, &mut dx[n * img..(n + 1) * img]);
    }
}

/// `conv2d_grad_weight`: `dw = sum over n of dy[n] @ im2col(x[n])^T`, images in order.
pub(crate) fn conv2d_grad_weight<T: Real>(x: &[T], dy: &[T], dw: &mut [T], g: &Window, o: usize) {
    let (rows, cols) = (g.col_rows(), g.col_cols());
    let mut col = vec![T::zero(); rows * cols];
    dw.fill(T::zero());
    for n in 0..g.n {
        im2col(&x[n * g.image()..], g, &mut col);
        let dyn_ = &dy[n * o * cols..(n + 1) * o * cols];
        let beta = if n == 0 { 0.0 } else { 1.0 };
        gemm(
            o,
            cols,
            rows,
            Mat::new(dyn_, cols, false),
            Mat::new(&col, cols, true),
            beta,
            dw,
        );
    }
}

/// Channels `[grp * c, (grp + 1) * c)` of every image of `x` (`[n, total, plane]`),
/// contiguous.
fn gather<T: Real>(x: &[T], n: usize, total: usize, c: usize, grp: usize, plane: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(n * c * plane);
    for img in 0..n {
        let start = (img * total + grp * c) * plane;
        out.extend_from_slice(&x[start..start + c * plane]);
    }
    out
}

/// The inverse of [`gather`]: `part` written back into its channels of `y`.
fn scatter<T: Real>(
    y: &mut [T],
    part: &[T],
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

/// Group `grp`'s weights.
fn weights<'w, T: Real>(p: &Groups, w: &'w [T], grp: usize) -> &'w [T] {
    &w[grp * p.wlen..(grp + 1) * p.wlen]
}

/// Per group: `f(grp, its channels of src, its result)`, the result written into the
/// group's channels of `dst`; a side is (channels in all, per group, plane size).
fn map_groups<T: Real>(
    p: &Groups,
    src: &[T],
    (s_all, s_c, s_plane): (usize, usize, usize),
    dst: &mut [T],
    (d_all, d_c, d_plane): (usize, usize, usize),
    f: impl Fn(usize, &[T], &mut [T]),
) {
    let n = p.g.n;
    for grp in 0..p.groups {
        let part = gather(src, n, s_all, s_c, grp, s_plane);
        let mut out = vec![T::zero(); n * d_c * d_plane];
        f(grp, &part, &mut out);
        scatter(dst, &out, n, d_all, d_c, grp, d_plane);
    }
}

/// `convolution` with `groups` (each group's output channels see only its input
/// channels; depthwise when `groups` is the channel count) and an optional bias: per group,
/// the builder's `conv2d` over that group's channels.
pub(crate) fn conv_grouped<T: Real>(x: &[T], w: &[T], bias: Option<&[T]>, y: &mut [T], p: &Groups) {
    map_groups(p, x, p.inputs(), y, p.outputs(), |grp, xs, ys| {
        conv2d(xs, weights(p, w, grp), ys, &p.gw, p.og)
    });
    if let Some(b) = bias {
        add_bias(y, b, p.pout);
    }
}

/// `y [N, C, plane] += b [C]`.
fn add_bias<T: Real>(y: &mut [T], b: &[T], plane: usize) {
    for (i, ys) in y.chunks_mut(plane.max(1)).enumerate() {
        let v = b[i % b.len().max(1)];
        for y in ys {
            *y += v;
        }
    }
}

/// `db [C]` = `dy [N, C, plane]` summed per channel, in f64, images in order.
fn bias_grad<T: Real>(dy: &[T], db: &mut [T], n: usize, plane: usize) {
    let o = db.len();
    for (c, db) in db.iter_mut().enumerate() {
        let mut s = 0.0f64;
        for n in 0..n {
            let start = (n * o + c) * plane;
            s += dy[start..start + plane]
                .iter()
                .map(|&v| v.f64())
                .sum::<f64>();
        }
        *db = T::of(s);
    }
}

/// Transposed convolution: `x` is the output gradient of the plain convolution (window
/// `g`, `o = Ci` output channels) of `y`, so `y` is that convolution's input gradient,
/// plus a bias per channel of `y`.
pub(crate) fn conv_transposed<T: Real>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    y: &mut [T],
    g: &Window,
    o: usize,
) {
    conv2d_grad_input(x, w, y, g, o);
    if let Some(b) = bias {
        add_bias(y, b, g.h * g.w);
    }
}

/// Its backward, `(dy, x, w)` -> the masked `(dx, dw, dbias)`: the plain convolution of
/// `dy` gives `dx`, and the plain weight gradient with `dy` as the image and `x` as the
/// output gradient gives `dw`.
pub(crate) fn conv_transposed_backward<T: Real>(
    [dy, x, w]: [&[T]; 3],
    outs: &mut [&mut [T]],
    mask: [bool; 3],
    g: &Window,
    o: usize,
) {
    let mut outs = outs.iter_mut();
    let mut next = |want: bool| if want { outs.next() } else { None };
    if let Some(dx) = next(mask[0]) {
        conv2d(dy, w, dx, g, o);
    }
    if let Some(dw) = next(mask[1]) {
        conv2d_grad_weight(dy, x, dw, g, o);
    }
    if let Some(db) = next(mask[2]) {
        bias_grad(dy, db, g.n, g.h * g.w);
    }
}

/// `convolution_backward`: `(dy, x, w)` -> the masked results of `(dx, dw, dbias)`, per
/// group when `groups > 1`.
pub(crate) fn conv_backward<T: Real>(
    dy: &[T],
    x: &[T],
    w: &[T],
    outs: &mut [&mut [T]],
    mask: [bool; 3],
    p: &Groups,
) {
    let (g, o, groups) = (&p.g, p.o, p.groups);
    let mut slot = 0;
    if mask[0] {
        if groups == 1 {
            conv2d_grad_input(dy, w, outs[slot], g, o);
        } else {
            map_groups(
                p,
                dy,
                p.outputs(),
                outs[slot],
                p.inputs(),
                |grp, dys, dxs| conv2d_grad_input(dys, weights(p, w, grp), dxs, &p.gw, p.og),
            );
        }
        slot += 1;
    }
    if mask[1] {
        if groups == 1 {
            conv2d_grad_weight(x, dy, outs[slot], g, o);
        } else {
            for grp in 0..groups {
                let (xs, dys) = (
                    gather(x, g.n, g.c, p.cg, grp, p.pin),
                    gather(dy, g.n, o, p.og, grp, p.pout),
                );
                let dw = &mut outs[slot][grp * p.wlen..(grp + 1) * p.wlen];
                conv2d_grad_weight(&xs, &dys, dw, &p.gw, p.og);
            }
        }
        slot += 1;
    }
    if mask[2] {
        bias_grad(dy, outs[slot], g.n, p.pout);
    }
}

/// Runs a kernel of the family.
pub(super) fn run<T: Host>(k: &Conv, io: Io<T>) -> R {
    let g = k.window(io.ops_in, io.ops_out);
    let backward = matches!(
        k,
        Conv::ConvBackward { .. } | Conv::ConvTransposedBackward { .. }
    );
    let w = io.ops_in[if backward { 2 } else { 1 }].shape[0];
    let (a, b) = (f(&io.ins[0])?, f(&io.ins[1])?);
    match k {
        Conv::Conv2d { .. } => conv2d(a, b, io.outs[0], &g, w),
        Conv::Conv2dGradInput { .. } => conv2d_grad_input(a, b, io.outs[0], &g, w),
        // `dy [N, O, Ho, Wo]`: its channels are the outputs'.
        Conv::Conv2dGradWeight { .. } => {
            conv2d_grad_weight(a, b, io.outs[0], &g, io.ops_in[1].shape[1])
        }
        Conv::ConvBackward { groups, mask, .. } => conv_backward(
            a,
            b,
            f(&io.ins[2])?,
            io.outs,
            *mask,
            &Groups::of(&g, w, *groups),
        ),
        Conv::ConvGrouped { groups, bias, .. } => {
            let bias = if *bias { Some(f(&io.ins[2])?) } else { None };
            conv_grouped(a, b, bias, io.outs[0], &Groups::of(&g, w, *groups))
        }
        Conv::ConvTransposed { bias, .. } => {
            let bias = if *bias { Some(f(&io.ins[2])?) } else { None };
            conv_transposed(a, b, bias, io.outs[0], &g, w)
        }
        Conv::ConvTransposedBackward { mask, .. } => {
            conv_transposed_backward([a, b, f(&io.ins[2])?], io.outs, *mask, &g, w)
        }
    }
    Ok(())
}
