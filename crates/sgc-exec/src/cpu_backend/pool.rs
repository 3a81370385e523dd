//! Pooling (max with the first maximum, with or without indices; average;
//! global average) and nearest 2x upsampling over `[N, C, H, W]`.

use super::conv::Window;
use super::{byte_path, f, idx, CpuBackend, Host, Indices, Io, R};
use crate::backend::{Backend, Operand};
use crate::error::ExecError;
use crate::ops::pool::{adaptive_window, AvgDivisor, Pool};
use crate::real::Real;
use sgc_ir::DType;

/// The input positions `(row, column)` of window `(oi, oj)` that lie inside the image.
pub(crate) fn taps(g: &Window, oi: usize, oj: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    (0..g.kh).flat_map(move |ki| {
        (0..g.kw).filter_map(move |kj| Some((g.src(oi, ki, 0)?, g.src(oj, kj, 1)?)))
    })
}

/// Flat index of the first maximum of window `(plane, oi, oj)`, if any tap is inside.
pub(crate) fn argmax<T: Real>(
    x: &[T],
    g: &Window,
    plane: usize,
    oi: usize,
    oj: usize,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            if let (Some(i), Some(j)) = (g.src(oi, ki, 0), g.src(oj, kj, 1)) {
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
pub(crate) fn max_pool2d<T: Real>(x: &[T], y: &mut [T], g: &Window) {
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                let v = argmax(x, g, plane, oi, oj).map_or(T::neg_infinity(), |i| x[i]);
                y[(plane * g.ho + oi) * g.wo + oj] = v;
            }
        }
    }
}

/// `max_pool2d_grad`: each window's gradient goes to its first maximum.
pub(crate) fn max_pool2d_grad<T: Real>(x: &[T], dy: &[T], dx: &mut [T], g: &Window) {
    dx.fill(T::zero());
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
pub(crate) fn global_avg_pool<T: Real>(x: &[T], y: &mut [T], hw: usize) {
    for (p, y) in y.iter_mut().enumerate() {
        let s: f64 = x[p * hw..(p + 1) * hw].iter().map(|&v| v.f64()).sum();
        *y = T::of(s / hw as f64);
    }
}

/// `global_avg_pool_grad`: `dy / (H*W)` spread over each plane.
pub(crate) fn global_avg_pool_grad<T: Real>(dy: &[T], dx: &mut [T], hw: usize) {
    for (p, &g) in dy.iter().enumerate() {
        dx[p * hw..(p + 1) * hw].fill(g / T::of(hw as f64));
    }
}

/// `upsample_nearest2x` of planes `h x w`.
pub(crate) fn upsample_nearest2x<T: Real>(x: &[T], y: &mut [T], h: usize, w: usize) {
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
pub(crate) fn upsample_nearest2x_grad<T: Real>(dy: &[T], dx: &mut [T], h: usize, w: usize) {
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

/// `max_pool2d_with_indices`: each window's maximum (its first, as ATen picks) and the
/// flat index of that maximum in its `H*W` plane.
pub(crate) fn max_pool2d_indices<T: Real>(x: &[T], y: &mut [T], idx: &mut [i64], g: &Window) {
    let plane_in = g.h * g.w;
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                let at = (plane * g.ho + oi) * g.wo + oj;
                match argmax(x, g, plane, oi, oj) {
                    Some(i) => {
                        y[at] = x[i];
                        idx[at] = (i - plane * plane_in) as i64;
                    }
                    None => {
                        y[at] = T::neg_infinity();
                        idx[at] = -1;
                    }
                }
            }
        }
    }
}

/// `max_pool2d_with_indices_backward`: each window's gradient added at its index.
pub(crate) fn max_pool2d_indices_backward<T: Real>(
    dy: &[T],
    idx: &Indices,
    dx: &mut [T],
    g: &Window,
) -> R {
    dx.fill(T::zero());
    let plane_in = g.h * g.w;
    let plane_out = g.ho * g.wo;
    for (at, &grad) in dy.iter().enumerate() {
        let i = idx.get(at, plane_in)?;
        dx[(at / plane_out) * plane_in + i] += grad;
    }
    Ok(())
}

/// What window `(oi, oj)`'s sum is divided by (ATen's rule, [`AvgDivisor`]): the extent
/// of the window clipped to the padded input (`count_pad`), or to the input itself.
fn avg_divisor<T: Real>(g: &Window, oi: usize, oj: usize, d: AvgDivisor) -> T {
    if let Some(v) = d.value {
        return T::of(v as f64);
    }
    let extent = |o: usize, k: usize, len: usize, pad: usize| {
        let start = (o * g.stride) as i64 - pad as i64;
        let end = (start + k as i64).min((len + pad) as i64);
        if d.count_pad {
            end - start
        } else {
            end.min(len as i64) - start.max(0)
        }
    };
    let rows = extent(oi, g.kh, g.h, g.pad[0]);
    let cols = extent(oj, g.kw, g.w, g.pad[1]);
    T::of((rows * cols).max(1) as f64)
}

/// `avg_pool2d`: each window's sum over its divisor.
pub(crate) fn avg_pool2d<T: Real>(x: &[T], y: &mut [T], g: &Window, d: AvgDivisor) {
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                let mut s = T::zero();
                for (i, j) in taps(g, oi, oj) {
                    s += x[(plane * g.h + i) * g.w + j];
                }
                y[(plane * g.ho + oi) * g.wo + oj] = s / avg_divisor(g, oi, oj, d);
            }
        }
    }
}

/// `avg_pool2d_backward`: each window's gradient over its divisor spread on its taps.
pub(crate) fn avg_pool2d_backward<T: Real>(dy: &[T], dx: &mut [T], g: &Window, d: AvgDivisor) {
    dx.fill(T::zero());
    for plane in 0..g.n * g.c {
        for oi in 0..g.ho {
            for oj in 0..g.wo {
                let grad = dy[(plane * g.ho + oi) * g.wo + oj] / avg_divisor(g, oi, oj, d);
                for (i, j) in taps(g, oi, oj) {
                    dx[(plane * g.h + i) * g.w + j] += grad;
                }
            }
        }
    }
}

/// `_adaptive_avg_pool2d`: `x [planes, h, w] -> y [planes, ho, wo]`, each output the mean of
/// its adaptive window, summed in f32 row by row and divided by the window's height, then
/// its width, as ATen's CPU kernel does.
pub(crate) fn adaptive_avg_pool2d<T: Real>(
    x: &[T],
    y: &mut [T],
    planes: usize,
    (h, w): (usize, usize),
    (ho, wo): (usize, usize),
) {
    for plane in 0..planes {
        for oi in 0..ho {
            let (i0, i1) = adaptive_window(oi, ho, h);
            for oj in 0..wo {
                let (j0, j1) = adaptive_window(oj, wo, w);
                let mut s = T::zero();
                for i in i0..i1 {
                    for j in j0..j1 {
                        s += x[(plane * h + i) * w + j];
                    }
                }
                y[(plane * ho + oi) * wo + oj] = s / size(i1 - i0) / size(j1 - j0);
            }
        }
    }
}

/// `_adaptive_avg_pool2d_backward`: each window's gradient, divided by its height then its
/// width, added to every element of the window (windows overlap where the sizes do not
/// divide).
pub(crate) fn adaptive_avg_pool2d_backward<T: Real>(
    dy: &[T],
    dx: &mut [T],
    planes: usize,
    (h, w): (usize, usize),
    (ho, wo): (usize, usize),
) {
    dx.fill(T::zero());
    for plane in 0..planes {
        for oi in 0..ho {
            let (i0, i1) = adaptive_window(oi, ho, h);
            for oj in 0..wo {
                let (j0, j1) = adaptive_window(oj, wo, w);
                let grad = dy[(plane * ho + oi) * wo + oj] / size(i1 - i0) / size(j1 - j0);
                for i in i0..i1 {
                    for j in j0..j1 {
                        dx[(plane * h + i) * w + j] += grad;
                    }
                }
            }
        }
    }
}

/// A window's extent as a float.
fn size<T: Real>(n: usize) -> T {
    T::of(n as f64)
}

/// Runs a kernel of the family.
pub(super) fn run<T: Host>(k: &Pool, io: Io<T>) -> R {
    let x = f(&io.ins[0])?;
    let out = &mut *io.outs[0];
    if let Some(g) = k.window(io.ops_in, io.ops_out) {
        match k {
            Pool::MaxPool2d { .. } => max_pool2d(x, out, &g),
            Pool::MaxPool2dGrad { .. } => max_pool2d_grad(x, f(&io.ins[1])?, out, &g),
            Pool::MaxPool2dIndicesBackward { .. } => {
                return max_pool2d_indices_backward(x, idx(&io.ins[2])?, out, &g)
            }
            Pool::AvgPool2d { divisor, .. } => avg_pool2d(x, out, &g, *divisor),
            Pool::AvgPool2dBackward { divisor, .. } => avg_pool2d_backward(x, out, &g, *divisor),
            _ => return Err(byte_path()),
        }
        return Ok(());
    }
    let (s, y) = (
        io.ops_in[0].shape.as_slice(),
        io.ops_out[0].shape.as_slice(),
    );
    match k {
        Pool::AdaptiveAvgPool2d { .. } => {
            adaptive_avg_pool2d(x, out, s[0] * s[1], (s[2], s[3]), (y[2], y[3]))
        }
        Pool::AdaptiveAvgPool2dBackward => {
            let x_shape = io.ops_in[1].shape.as_slice();
            adaptive_avg_pool2d_backward(
                x,
                out,
                s[0] * s[1],
                (x_shape[2], x_shape[3]),
                (s[2], s[3]),
            )
        }
        Pool::GlobalAvgPool => global_avg_pool(x, out, s[2] * s[3]),
        Pool::GlobalAvgPoolGrad => global_avg_pool_grad(x, out, y[2] * y[3]),
        Pool::Upsample2x => upsample_nearest2x(x, out, s[2], s[3]),
        _ => upsample_nearest2x_grad(x, out, y[2], y[3]),
    }
    Ok(())
}

/// `max_pool2d` with indices (an i64 output), through copies; `false` for every other
/// kernel.
pub(super) fn launch_bytes(
    be: &mut CpuBackend,
    k: &Pool,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<bool, ExecError> {
    let (Pool::MaxPool2dIndices { .. }, Some(g)) = (k, k.window(inputs, outputs)) else {
        return Ok(false);
    };
    let ib = if inputs[0].dtype == DType::F64 {
        with_indices::<f64>(be, &inputs[0], &outputs[0], &g)?
    } else {
        with_indices::<f32>(be, &inputs[0], &outputs[0], &g)?
    };
    be.write(outputs[1].buffer, outputs[1].offset, &ib)?;
    Ok(true)
}

/// `max_pool2d_with_indices` in `T`: writes `y`, returns the indices' bytes.
fn with_indices<T: Host>(
    be: &mut CpuBackend,
    x: &Operand,
    y: &Operand,
    g: &Window,
) -> Result<Vec<u8>, ExecError> {
    let x = T::read(be, x)?;
    let mut values = vec![T::zero(); y.numel()];
    let mut idx = vec![0i64; y.numel()];
    max_pool2d_indices(&x, &mut values, &mut idx, g);
    be.write_floats(y, &values)?;
    Ok(idx.iter().flat_map(|v| v.to_ne_bytes()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                    / 16_777_216.0
                    - 0.5
            })
            .collect()
    }

    /// ATen's windows: `floor(i * len / out)` to `ceil((i + 1) * len / out)`, overlapping
    /// when `out` does not divide `len`, repeating elements when `out > len`.
    #[test]
    fn adaptive_windows_are_atens() {
        let windows: Vec<_> = (0..3).map(|i| adaptive_window(i, 3, 7)).collect();
        assert_eq!(windows, [(0, 3), (2, 5), (4, 7)]);
        let up: Vec<_> = (0..7).map(|i| adaptive_window(i, 7, 3)).collect();
        assert_eq!(up, [(0, 1), (0, 1), (0, 2), (1, 2), (1, 3), (2, 3), (2, 3)]);
    }

    /// Output size = input size is the identity; output size 1 is the plane's mean; and the
    /// backward is the forward's adjoint: `<y, dy> == <x, dx>` for any `x` and `dy`.
    #[test]
    fn adaptive_average_pooling_and_its_gradient() {
        let (planes, h, w) = (3, 5, 6);
        let x = values(planes * h * w, 7);
        let mut same = vec![0.0; x.len()];
        adaptive_avg_pool2d(&x, &mut same, planes, (h, w), (h, w));
        assert_eq!(same, x);
        let mut mean = vec![0.0; planes];
        adaptive_avg_pool2d(&x, &mut mean, planes, (h, w), (1, 1));
        for (p, m) in mean.iter().enumerate() {
            let want = x[p * h * w..(p + 1) * h * w].iter().sum::<f32>() / h as f32 / w as f32;
            assert!((m - want).abs() < 1e-6, "{m} vs {want}");
        }
        for (ho, wo) in [(7, 7), (2, 4), (3, 6), (4, 1)] {
            let mut y = vec![0.0; planes * ho * wo];
            adaptive_avg_pool2d(&x, &mut y, planes, (h, w), (ho, wo));
            let dy = values(y.len(), 11);
            let mut dx = vec![0.0; x.len()];
            adaptive_avg_pool2d_backward(&dy, &mut dx, planes, (h, w), (ho, wo));
            let dot = |a: &[f32], b: &[f32]| {
                a.iter()
                    .zip(b)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum::<f64>()
            };
            let (lhs, rhs) = (dot(&y, &dy), dot(&x, &dx));
            assert!(
                (lhs - rhs).abs() < 1e-5,
                "{ho}x{wo}: <y, dy> {lhs} vs <x, dx> {rhs}"
            );
        }
    }
}
