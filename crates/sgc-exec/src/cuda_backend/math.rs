//! Core ATen's math functions (`ops::math`; the CPU reference is `cpu_backend/math.rs`):
//! `math_of` (a function by its index in `MathFn::ALL`), `math_clamp` and the
//! broadcasting `math_binary` (`kernels/math.cu`).

use super::device::{n, Arg, Device, Grid, R};
use super::launch::{broadcast_strides, dims, Io};
use crate::ops::math::{Math, MathBin};

pub(super) fn run(k: &Math, d: &mut Device, io: Io) -> R {
    let len = io.ops_out[0].numel();
    let (x, y) = (Arg::Ptr(io.ins[0]), Arg::Ptr(io.outs[0]));
    match *k {
        Math::Of(f) => d.launch("math_of", Grid::Elements(len), &[x, y, Arg::I32(f.index() as i32), n(len)]),
        Math::Clamp { min, max } => {
            let bound = |b: Option<f64>| [Arg::F32(b.unwrap_or(0.0) as f32), Arg::I32(b.is_some() as i32)];
            let [lo, has_lo] = bound(min);
            let [hi, has_hi] = bound(max);
            let args = [x, y, lo, has_lo, hi, has_hi, n(len)];
            d.launch("math_clamp", Grid::Elements(len), &args)
        }
        Math::Binary(op) => {
            let ys = io.ops_out[0].shape.as_slice();
            let side = |i: usize| dims(ys, &broadcast_strides(&io.ops_in[i].shape, ys));
            let code = match op {
                MathBin::Maximum => 0,
                MathBin::Minimum => 1,
                MathBin::Pow => 2,
            };
            let args = [
                x,
                Arg::Ptr(io.ins[1]),
                y,
                Arg::I32(code),
                n(len),
                Arg::Dims(side(0)?),
                Arg::Dims(side(1)?),
            ];
            d.launch("math_binary", Grid::Elements(len), &args)
        }
    }
}
