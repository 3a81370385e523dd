//! Convolution (im2col + sgemm), pooling and nearest upsampling over `[N, C, H, W]`.

use super::linalg::{gemm, Mat};

pub(crate) use crate::window::Window;

impl Window {
    /// Input row/column of output position `o` and kernel tap `k`, if inside the image.
    fn src(&self, o: usize, k: usize, len: usize) -> Option<usize> {
        (o * self.stride + k)
            .checked_sub(self.pad)
            .filter(|&i| i < len)
    }
}

/// Unfolds image `x` (`[C, H, W]`) into `col` (`[C*kh*kw, Ho*Wo]`), zeros for padding.
fn im2col(x: &[f32], g: &Window, col: &mut [f32]) {
    let cols = g.col_cols();
    for c in 0..g.c {
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = (c * g.kh + ki) * g.kw + kj;
                for oi in 0..g.ho {
                    for oj in 0..g.wo {
                        let v = match (g.src(oi, ki, g.h), g.src(oj, kj, g.w)) {
                            (Some(i), Some(j)) => x[(c * g.h + i) * g.w + j],
                            _ => 0.0,
                        };
                        col[row * cols + oi * g.wo + oj] = v;
                    }
                }
            }
        }
    }
}

/// Folds `col` back onto image `dx` (`[C, H, W]`), summing overlaps in a fixed order.
fn col2im(col: &[f32], g: &Window, dx: &mut [f32]) {
    let cols = g.col_cols();
    dx.fill(0.0);
    for c in 0..g.c {
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = (c * g.kh + ki) * g.kw + kj;
                for oi in 0..g.ho {
                    for oj in 0..g.wo {
                        if let (Some(i), Some(j)) = (g.src(oi, ki, g.h), g.src(oj, kj, g.w)) {
                            dx[(c * g.h + i) * g.w + j] += col[row * cols + oi * g.wo + oj];
                        }
                    }
                }
            }
        }
    }
}

/// `conv2d`: per image, `y[n] [O, Ho*Wo] = w [O, C*kh*kw] @ im2col(x[n])`.
pub(crate) fn conv2d(x: &[f32], w: &[f32], y: &mut [f32], g: &Window, o: usize) {
    let (rows, cols) = (g.col_rows(), g.col_cols());
    let mut col = vec![0.0; rows * cols];
    for n in 0..g.n {
        im2col(&x[n * g.c * g.h * g.w..], g, &mut col);
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
pub(crate) fn conv2d_grad_input(dy: &[f32], w: &[f32], dx: &mut [f32], g: &Window, o: usize) {
    let (rows, cols) = (g.col_rows(), g.col_cols());
    let mut col = vec![0.0; rows * cols];
    let img = g.c * g.h * g.w;
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
pub(crate) fn conv2d_grad_weight(x: &[f32], dy: &[f32], dw: &mut [f32], g: &Window, o: usize) {
    let (rows, cols) = (g.col_rows(), g.col_cols());
    let mut col = vec![0.0; rows * cols];
    dw.fill(0.0);
    for n in 0..g.n {
        im2col(&x[n * g.c * g.h * g.w..], g, &mut col);
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

/// The input positions `(row, column)` of window `(oi, oj)` that lie inside the image.
pub(crate) fn taps(g: &Window, oi: usize, oj: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    (0..g.kh).flat_map(move |ki| {
        (0..g.kw).filter_map(move |kj| Some((g.src(oi, ki, g.h)?, g.src(oj, kj, g.w)?)))
    })
}

/// Flat index of the first maximum of window `(plane, oi, oj)`, if any tap is inside.
pub(crate) fn argmax(x: &[f32], g: &Window, plane: usize, oi: usize, oj: usize) -> Option<usize> {
    let mut best: Option<usize> = None;
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            if let (Some(i), Some(j)) = (g.src(oi, ki, g.h), g.src(oj, kj, g.w)) {
                let idx = (plane * g.h + i) * g.w + j;
                if best.is_none_or(|b| x[idx] > x[b]) {
                    best = Some(idx);
                }
            }
        }
    }
    best
}

/// `max_pool2d` (padding counts as -infinity).
pub(crate) fn max_pool2d(x: &[f32], y: &mut [f32], g: &Window) {
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                let v = argmax(x, g, plane, oi, oj).map_or(f32::NEG_INFINITY, |i| x[i]);
                y[(plane * g.ho + oi) * g.wo + oj] = v;
            }
        }
    }
}

/// `max_pool2d_grad`: each window's gradient goes to its first maximum.
pub(crate) fn max_pool2d_grad(x: &[f32], dy: &[f32], dx: &mut [f32], g: &Window) {
    dx.fill(0.0);
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                if let Some(i) = argmax(x, g, plane, oi, oj) {
                    dx[i] += dy[(plane * g.ho + oi) * g.wo + oj];
                }
            }
        }
    }
}

/// `global_avg_pool`: the mean of each `H*W` plane, accumulated in f64.
pub(crate) fn global_avg_pool(x: &[f32], y: &mut [f32], hw: usize) {
    for (p, y) in y.iter_mut().enumerate() {
        let s: f64 = x[p * hw..(p + 1) * hw].iter().map(|&v| f64::from(v)).sum();
        *y = (s / hw as f64) as f32;
    }
}

/// `global_avg_pool_grad`: `dy / (H*W)` spread over each plane.
pub(crate) fn global_avg_pool_grad(dy: &[f32], dx: &mut [f32], hw: usize) {
    for (p, g) in dy.iter().enumerate() {
        dx[p * hw..(p + 1) * hw].fill(g / hw as f32);
    }
}

/// `upsample_nearest2x` of planes `h x w`.
pub(crate) fn upsample_nearest2x(x: &[f32], y: &mut [f32], h: usize, w: usize) {
    let planes = x.len().checked_div(h * w).unwrap_or(0);
    for p in 0..planes {
        for i in 0..2 * h {
            for j in 0..2 * w {
                y[(p * 2 * h + i) * 2 * w + j] = x[(p * h + i / 2) * w + j / 2];
            }
        }
    }
}

/// `upsample_nearest2x_grad`: sum of each 2x2 block, into planes `h x w`.
pub(crate) fn upsample_nearest2x_grad(dy: &[f32], dx: &mut [f32], h: usize, w: usize) {
    let planes = dx.len().checked_div(h * w).unwrap_or(0);
    for p in 0..planes {
        for i in 0..h {
            for j in 0..w {
                let at = |a: usize, b: usize| dy[(p * 2 * h + 2 * i + a) * 2 * w + 2 * j + b];
                dx[(p * h + i) * w + j] = at(0, 0) + at(0, 1) + at(1, 0) + at(1, 1);
            }
        }
    }
}
