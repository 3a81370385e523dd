//! Core ATen's math functions (`ops::math`): one pass over the elements, the binary ones
//! over both operands broadcast to the output first.

use super::shape::expand;
use super::{f, Io, R};
use crate::ops::math::{clamp, Math};

pub(super) fn run(k: &Math, io: Io) -> R {
    match k {
        Math::Of(func) => {
            for (y, &x) in io.outs[0].iter_mut().zip(f(&io.ins[0])?) {
                *y = func.apply(x);
            }
        }
        Math::Clamp { min, max } => {
            for (y, &x) in io.outs[0].iter_mut().zip(f(&io.ins[0])?) {
                *y = clamp(x, *min, *max);
            }
        }
        Math::Binary(op) => {
            let y = &io.ops_out[0].shape;
            let n = io.outs[0].len();
            let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
            expand(f(&io.ins[0])?, &mut a, &io.ops_in[0].shape, y);
            expand(f(&io.ins[1])?, &mut b, &io.ops_in[1].shape, y);
            for ((o, a), b) in io.outs[0].iter_mut().zip(a).zip(b) {
                *o = op.apply(a, b);
            }
        }
    }
    Ok(())
}
