//! Convolution (im2col + cuBLAS SGEMM over chunks of images) over `[N, C, H, W]`
//! (`kernels/conv.cu`; the CPU reference is `cpu_backend/conv.rs`, same names).
//!
//! The im2col matrices of a chunk of images live in the device workspace, sized to
//! [`SCRATCH_FLOATS`] (or one image when that is more); `conv2d` and `conv2d_grad_input`
//! run one strided-batched SGEMM per chunk (the weight shared, stride 0),
//! `conv2d_grad_weight` one SGEMM per image accumulating in image order, as the CPU does.

use super::device::{n, Arg, Device, Gemm, Grid, R};
use super::launch::{no_kernel, with_ptrs, Io};
use crate::ops::conv::Conv;

/// Workspace target of the im2col chunks, in floats (64 MiB).
const SCRATCH_FLOATS: usize = 16 << 20;

use crate::window::Window;

impl Window {
    /// Images per im2col chunk.
    fn chunk(&self) -> usize {
        let per = (self.col_rows() * self.col_cols()).max(1);
        (SCRATCH_FLOATS / per).clamp(1, self.n.max(1))
    }

    /// The kernel arguments after the two pointers: `images, c, h, w, kh, kw, stride,
    /// pad, ho, wo`.
    fn args(&self, images: usize) -> [Arg; 10] {
        [
            n(images),
            n(self.c),
            n(self.h),
            n(self.w),
            n(self.kh),
            n(self.kw),
            n(self.stride),
            n(self.pad),
            n(self.ho),
            n(self.wo),
        ]
    }
}

/// Address `elems` floats past `p`.
fn at(p: u64, elems: usize) -> u64 {
    p + 4 * elems as u64
}

/// Unfolds `images` images starting at `x` into `col`.
fn im2col(d: &Device, x: u64, col: u64, g: &Window, images: usize) -> R {
    let total = images * g.col_rows() * g.col_cols();
    d.launch(
        "im2col",
        Grid::Elements(total),
        &with_ptrs(&[x, col], g.args(images)),
    )
}

/// `conv2d`: per chunk, `y[n] [O, Ho*Wo] = w [O, C*kh*kw] @ im2col(x[n])`.
pub(crate) fn conv2d(d: &mut Device, x: u64, w: u64, y: u64, g: &Window, o: usize) -> R {
    let (rows, cols, chunk) = (g.col_rows(), g.col_cols(), g.chunk());
    for n0 in (0..g.n).step_by(chunk) {
        let b = chunk.min(g.n - n0);
        let col = d.scratch(4 * b * rows * cols)?;
        im2col(d, at(x, n0 * g.image()), col, g, b)?;
        d.gemm(&Gemm {
            m: o,
            n: cols,
            k: rows,
            a: w,
            trans_a: false,
            b: col,
            trans_b: false,
            c: at(y, n0 * o * cols),
            beta: 0.0,
            batch: b,
            stride_a: 0,
            stride_b: rows * cols,
        })?;
    }
    Ok(())
}

/// `conv2d_grad_input`: per chunk, `col = w^T @ dy[n]`, folded back with col2im.
pub(crate) fn conv2d_grad_input(
    d: &mut Device,
    dy: u64,
    w: u64,
    dx: u64,
    g: &Window,
    o: usize,
) -> R {
    let (rows, cols, chunk) = (g.col_rows(), g.col_cols(), g.chunk());
    for n0 in (0..g.n).step_by(chunk) {
        let b = chunk.min(g.n - n0);
        let col = d.scratch(4 * b * rows * cols)?;
        d.gemm(&Gemm {
            m: rows,
            n: cols,
            k: o,
            a: w,
            trans_a: true,
            b: at(dy, n0 * o * cols),
            trans_b: false,
            c: col,
            beta: 0.0,
            batch: b,
            stride_a: 0,
            stride_b: o * cols,
        })?;
        let args = with_ptrs(&[col, at(dx, n0 * g.image())], g.args(b));
        d.launch("col2im", Grid::Elements(b * g.image()), &args)?;
    }
    Ok(())
}

/// `conv2d_grad_weight`: `dw = sum over n of dy[n] @ im2col(x[n])^T`, images in order.
pub(crate) fn conv2d_grad_weight(
    d: &mut Device,
    x: u64,
    dy: u64,
    dw: u64,
    g: &Window,
    o: usize,
) -> R {
    let (rows, cols, chunk) = (g.col_rows(), g.col_cols(), g.chunk());
    let product = |a: u64, b: u64, beta: f32, k: usize| Gemm {
        m: o,
        n: rows,
        k,
        a,
        trans_a: false,
        b,
        trans_b: true,
        c: dw,
        beta,
        batch: 1,
        stride_a: 0,
        stride_b: 0,
    };
    if g.n == 0 {
        // No image: an empty sum, written as zeros.
        return d.gemm(&product(dy, x, 0.0, 0));
    }
    for n0 in (0..g.n).step_by(chunk) {
        let b = chunk.min(g.n - n0);
        let col = d.scratch(4 * b * rows * cols)?;
        im2col(d, at(x, n0 * g.image()), col, g, b)?;
        for i in 0..b {
            let beta = if n0 + i == 0 { 0.0 } else { 1.0 };
            let dyn_ = at(dy, (n0 + i) * o * cols);
            d.gemm(&product(dyn_, at(col, i * rows * cols), beta, cols))?;
        }
    }
    Ok(())
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Conv, d: &mut Device, io: Io) -> R {
    let Io { ins, outs, .. } = io;
    let g = || k.window(io.ops_in, io.ops_out);
    let w = io.ops_in[1].shape[0];
    match k {
        Conv::Conv2d { .. } => conv2d(d, ins[0], ins[1], outs[0], &g(), w),
        Conv::Conv2dGradInput { .. } => conv2d_grad_input(d, ins[0], ins[1], outs[0], &g(), w),
        // `dy [N, O, Ho, Wo]`: its channels are the outputs'.
        Conv::Conv2dGradWeight { .. } => {
            let o = io.ops_in[1].shape[1];
            conv2d_grad_weight(d, ins[0], ins[1], outs[0], &g(), o)
        }
        Conv::ConvGrouped { .. } | Conv::ConvBackward { .. } => Err(no_kernel()),
    }
}
