//! Core ATen's math functions (`ops::math`): one pass over the elements, the binary ones
//! over both operands broadcast to the output first.

use super::shape::expand_pair;
use super::{f, Host, Io, R};
use crate::ops::math::{clamp, Math};

pub(super) fn run<T: Host>(k: &Math, io: Io<T>) -> R {
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
            let (a, b) = expand_pair(
                (f(&io.ins[0])?, &io.ops_in[0].shape),
                (f(&io.ins[1])?, &io.ops_in[1].shape),
                &io.ops_out[0].shape,
            );
            for ((o, a), b) in io.outs[0].iter_mut().zip(a).zip(b) {
                *o = op.apply(a, b);
            }
        }
    }
    Ok(())
}
