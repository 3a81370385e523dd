//! Convolution (im2col + cuBLAS SGEMM over chunks of images) over `[N, C, H, W]`
//! (`kernels/conv.cu`; the CPU reference is `cpu_backend/conv.rs`, same names).
//!
//! The im2col matrices of a chunk of images live in the device workspace, sized to
//! [`SCRATCH_FLOATS`] (or one image when that is more); `conv2d` and `conv2d_grad_input`
//! run one strided-batched SGEMM per chunk (the weight shared, stride 0),
//! `conv2d_grad_weight` one SGEMM per image accumulating in image order, as the CPU does.
//! The exporter's grouped convolutions and their backward run in one of two ways. Groups of
//! few taps (at most [`DIRECT_TAPS`] input channels x window taps per output: depthwise
//! convolutions, the small groups of RegNet and ResNeXt) run direct kernels, one launch for
//! all groups, each output (or input or weight gradient element) summing its taps itself;
//! per group, the products would be too small for cuBLAS to fill the device, and the
//! gathers, im2col and placements around them are a handful of launches per group (a
//! MobileNet step made thousands). Larger groups run the im2col path per group, each
//! group's channels gathered into staging buffers and placed back. A bias is added (and its
//! gradient summed) by the element-wise family's kernels.

use super::device::{n, Arg, Device, Gemm, Grid, R};
use super::elementwise::{bias_add, bias_add_grad};
use super::launch::{with_ptrs, Io, KERNEL_SLOTS};
use super::shape::{columns, slice};
use crate::error::KernelError;
use crate::ops::conv::Conv;
use crate::window::Groups;

/// Workspace target of the im2col chunks, in floats (64 MiB).
const SCRATCH_FLOATS: usize = 16 << 20;

/// The most taps (a group's input channels times the window's) a grouped convolution runs
/// with the direct kernels: a 3x3 window over up to 28 channels per group.
const DIRECT_TAPS: usize = 256;

/// Whether grouped convolution `p` runs the direct kernels (see the module doc).
fn direct(p: &Groups) -> bool {
    p.groups > 1 && p.cg * p.g.kh * p.g.kw <= DIRECT_TAPS
}

/// Launches direct kernel `name` (`conv_direct*`) with pointers `ptrs` over `grid`.
fn launch_direct(d: &Device, name: &'static str, ptrs: [u64; 3], grid: Grid, p: &Groups) -> R {
    let mut args = with_ptrs(&ptrs, p.g.args(p.g.n));
    args.extend([n(p.o), n(p.groups)]);
    d.launch(name, grid, &args)
}

use crate::window::Window;

impl Window {
    /// Images per im2col chunk.
    fn chunk(&self) -> usize {
        let per = (self.col_rows() * self.col_cols()).max(1);
        (SCRATCH_FLOATS / per).clamp(1, self.n.max(1))
    }

    /// The kernel arguments after the two pointers: `images, c, h, w, kh, kw, stride,
    /// pad_h, pad_w, ho, wo`.
    fn args(&self, images: usize) -> [Arg; 11] {
        [
            n(images),
            n(self.c),
            n(self.h),
            n(self.w),
            n(self.kh),
            n(self.kw),
            n(self.stride),
            n(self.pad[0]),
            n(self.pad[1]),
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
        Conv::ConvGrouped { groups, bias, .. } => {
            let bias = bias.then(|| ins[2]);
            conv_grouped(
                d,
                ins[0],
                ins[1],
                bias,
                outs[0],
                &Groups::of(&g(), w, *groups),
            )
        }
        Conv::ConvBackward { groups, mask, .. } => {
            let o = io.ops_in[2].shape[0];
            let p = Groups::of(&g(), o, *groups);
            conv_backward(d, [ins[0], ins[1], ins[2]], outs, *mask, &p)
        }
        Conv::ConvTransposed { bias, .. } => {
            let g = g();
            conv2d_grad_input(d, ins[0], ins[1], outs[0], &g, w)?;
            match bias {
                true => bias_add(d, outs[0], ins[2], outs[0], &[g.n, g.c, g.h * g.w], 1),
                false => Ok(()),
            }
        }
        Conv::ConvTransposedBackward { mask, .. } => {
            let o = io.ops_in[2].shape[0];
            conv_transposed_backward(d, [ins[0], ins[1], ins[2]], outs, *mask, (&g(), o))
        }
    }
}

/// The transposed convolution's backward, `(dy, x, w)` -> the masked `(dx, dw, dbias)`:
/// the plain convolution of `dy` (window `g`, `o = Ci` channels) gives `dx`, the plain
/// weight gradient with `dy` as the image and `x` as the output gradient gives `dw`.
fn conv_transposed_backward(
    d: &mut Device,
    [dy, x, w]: [u64; 3],
    outs: &[u64],
    mask: [bool; 3],
    (g, o): (&Window, usize),
) -> R {
    let mut outs = outs.iter().copied();
    let mut next = |want: bool| if want { outs.next() } else { None };
    if let Some(dx) = next(mask[0]) {
        conv2d(d, dy, w, dx, g, o)?;
    }
    if let Some(dw) = next(mask[1]) {
        conv2d_grad_weight(d, dy, x, dw, g, o)?;
    }
    match next(mask[2]) {
        Some(db) => bias_add_grad(d, dy, db, &[g.n, g.c, g.h * g.w], 1),
        None => Ok(()),
    }
}

/// Channels `[grp * c, (grp + 1) * c)` of every image of `x [images, total, plane]` into
/// staging slot `slot`, contiguous: its address.
fn gather(
    d: &mut Device,
    x: u64,
    slot: usize,
    (images, total, plane): (usize, usize, usize),
    c: usize,
    grp: usize,
) -> Result<u64, KernelError> {
    let part = d.staging(KERNEL_SLOTS + slot, 4 * images * c * plane)?;
    let shape = [images, total, plane];
    slice(d, (x, part), &shape, 1, (grp * c, (grp + 1) * c, 1))?;
    Ok(part)
}

/// The inverse of [`gather`]: `part [images, c, plane]` written into its channels of
/// `y [images, total, plane]`.
fn place(
    d: &Device,
    part: u64,
    y: u64,
    (images, total, plane): (usize, usize, usize),
    c: usize,
    grp: usize,
) -> R {
    let (chunk, row) = (c * plane, total * plane);
    columns(d, "concat", (part, y), (images, row), chunk, grp * chunk)
}

/// `convolution` in groups (per group, `conv2d` over its channels, gathered into staging
/// buffers and placed back) with an optional bias added after.
fn conv_grouped(d: &mut Device, x: u64, w: u64, bias: Option<u64>, y: u64, p: &Groups) -> R {
    let g = &p.g;
    if p.groups == 1 {
        conv2d(d, x, w, y, g, p.o)?;
    } else if direct(p) {
        let outputs = g.n * p.o * p.pout;
        launch_direct(d, "conv_direct", [x, w, y], Grid::Elements(outputs), p)?;
    } else {
        for grp in 0..p.groups {
            let xs = gather(d, x, 0, (g.n, g.c, p.pin), p.cg, grp)?;
            let ys = d.staging(KERNEL_SLOTS + 1, 4 * g.n * p.og * p.pout)?;
            conv2d(d, xs, at(w, grp * p.wlen), ys, &p.gw, p.og)?;
            place(d, ys, y, (g.n, p.o, p.pout), p.og, grp)?;
        }
    }
    match bias {
        Some(b) => bias_add(d, y, b, y, &[g.n, p.o, p.pout], 1),
        None => Ok(()),
    }
}

/// `convolution_backward`: `(dy, x, w)` -> the masked results of `(dx, dw, dbias)`, per
/// group when `groups > 1`.
fn conv_backward(
    d: &mut Device,
    [dy, x, w]: [u64; 3],
    outs: &[u64],
    mask: [bool; 3],
    p: &Groups,
) -> R {
    let (g, o) = (&p.g, p.o);
    let mut outs = outs.iter().copied();
    let mut next = |want: bool| if want { outs.next() } else { None };
    if let Some(dx) = next(mask[0]) {
        if p.groups == 1 {
            conv2d_grad_input(d, dy, w, dx, g, o)?;
        } else if direct(p) {
            let inputs = g.n * g.image();
            launch_direct(d, "conv_direct_grad_input", [dy, w, dx], Grid::Elements(inputs), p)?;
        } else {
            for grp in 0..p.groups {
                let dys = gather(d, dy, 0, (g.n, o, p.pout), p.og, grp)?;
                let dxs = d.staging(KERNEL_SLOTS + 1, 4 * g.n * p.cg * p.pin)?;
                conv2d_grad_input(d, dys, at(w, grp * p.wlen), dxs, &p.gw, p.og)?;
                place(d, dxs, dx, (g.n, g.c, p.pin), p.cg, grp)?;
            }
        }
    }
    if let Some(dw) = next(mask[1]) {
        if p.groups == 1 {
            conv2d_grad_weight(d, x, dy, dw, g, o)?;
        } else if direct(p) {
            let weights = o * p.cg * g.kh * g.kw;
            launch_direct(d, "conv_direct_grad_weight", [x, dy, dw], Grid::Rows(weights), p)?;
        } else {
            for grp in 0..p.groups {
                let xs = gather(d, x, 0, (g.n, g.c, p.pin), p.cg, grp)?;
                let dys = gather(d, dy, 1, (g.n, o, p.pout), p.og, grp)?;
                conv2d_grad_weight(d, xs, dys, at(dw, grp * p.wlen), &p.gw, p.og)?;
            }
        }
    }
    match next(mask[2]) {
        Some(db) => bias_add_grad(d, dy, db, &[g.n, o, p.pout], 1),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Launches of a grouped convolution's forward and backward (input and weight
    /// gradients) over `[2, c, 8, 8]` in groups of `cg` channels, 3x3, on the emulated device.
    fn launches(c: usize, cg: usize) -> u64 {
        let mut d = Device::emulated(0).expect("the emulated device opens");
        let g = Window::conv(&[2, c, 8, 8], &[c, cg, 3, 3], &[2, c, 8, 8], 1, [1, 1]);
        let p = Groups::of(&g, c, c / cg);
        let mut buffer = |floats: usize| {
            let bytes: Vec<u8> = (0..floats).flat_map(|i| (i as f32 * 0.01).to_ne_bytes()).collect();
            let at = d.engine().alloc(4 * floats, false).expect("alloc");
            d.engine().write(at, &bytes).expect("write");
            at
        };
        let (x, w, y, dx, dw) = (
            buffer(2 * c * 64),
            buffer(c * cg * 9),
            buffer(2 * c * 64),
            buffer(2 * c * 64),
            buffer(c * cg * 9),
        );
        let before = d.launched();
        conv_grouped(&mut d, x, w, None, y, &p).expect("forward");
        conv_backward(&mut d, [y, x, w], &[dx, dw], [true, true, false], &p).expect("backward");
        d.engine().synchronize().expect("the queued work ends");
        d.launched() - before
    }

    /// Depthwise and small-group convolutions take one launch per direction whatever the
    /// number of groups; the im2col path takes launches per group.
    #[test]
    fn small_groups_launch_once_for_all_groups() {
        assert_eq!(launches(8, 1), 3);
        assert_eq!(launches(64, 1), 3);
        assert_eq!(launches(64, 2), 3);
        let large = DIRECT_TAPS / 9 + 1;
        assert!(launches(4 * large, large) > launches(2 * large, large));
    }
}
