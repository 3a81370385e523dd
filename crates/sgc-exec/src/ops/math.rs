//! Core ATen's math functions: one-tensor functions without a backward op of their own
//! (`neg`, `exp`, `log`, `sqrt`, `rsqrt`, the trigonometric and hyperbolic functions,
//! rounding; autograd writes their derivatives with `mul`, `div`, `cos`, ...), `clamp`
//! by scalar bounds, and the broadcasting `maximum`, `minimum` and `pow` of two tensors.
//!
//! f32, each element computed in f32 by Rust's `f32` functions (libm's for `erf`), which
//! round within an ulp or two of ATen's vectorised ones: values match PyTorch within
//! float32 tolerance, not bit for bit. NaN propagates as in ATen: `maximum`, `minimum`
//! and `clamp` return NaN for a NaN operand; `sign(NaN)` is NaN; `round` rounds half to
//! even. The CUDA kernels (`kernels/math.cu`) number the functions by their index in
//! [`MathFn::ALL`] and use CUDA's f32 functions: the same values within float32
//! tolerance (`tests/cuda_ops.rs`).

use super::check::{broadcasts, eq, expect};
use super::{Cx, Family};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use crate::real::Real;
use serde_json::Value;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: AtenNeg AtenExp AtenExp2 AtenExpm1 AtenLog AtenLog2 AtenLog10 AtenLog1p AtenSqrt
        AtenRsqrt AtenReciprocal AtenAbs AtenSign AtenSin AtenCos AtenTan AtenAsin AtenAcos
        AtenAtan AtenSinh AtenCosh AtenAsinh AtenAcosh AtenAtanh AtenErf AtenFloor AtenCeil
        AtenRound AtenTrunc AtenClamp AtenClampMin AtenClampMax AtenMaximum AtenMinimum
        AtenPowTensor;
    cpu: ;
}

/// A math kernel with its attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Math {
    /// `f(x)` element by element.
    Of(MathFn),
    /// `x` clamped to `[min, max]`, either bound absent.
    Clamp { min: Option<f64>, max: Option<f64> },
    /// `a op b` broadcast to the output (axes aligned on the right).
    Binary(MathBin),
}

/// The functions of [`Math::Of`], one per op kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathFn {
    Neg,
    Exp,
    Exp2,
    Expm1,
    Log,
    Log2,
    Log10,
    Log1p,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Abs,
    Sign,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Erf,
    Floor,
    Ceil,
    Round,
    Trunc,
}

impl MathFn {
    /// Every function with its op kind.
    pub const ALL: &'static [(MathFn, OpKind)] = &[
        (MathFn::Neg, OpKind::AtenNeg),
        (MathFn::Exp, OpKind::AtenExp),
        (MathFn::Exp2, OpKind::AtenExp2),
        (MathFn::Expm1, OpKind::AtenExpm1),
        (MathFn::Log, OpKind::AtenLog),
        (MathFn::Log2, OpKind::AtenLog2),
        (MathFn::Log10, OpKind::AtenLog10),
        (MathFn::Log1p, OpKind::AtenLog1p),
        (MathFn::Sqrt, OpKind::AtenSqrt),
        (MathFn::Rsqrt, OpKind::AtenRsqrt),
        (MathFn::Reciprocal, OpKind::AtenReciprocal),
        (MathFn::Abs, OpKind::AtenAbs),
        (MathFn::Sign, OpKind::AtenSign),
        (MathFn::Sin, OpKind::AtenSin),
        (MathFn::Cos, OpKind::AtenCos),
        (MathFn::Tan, OpKind::AtenTan),
        (MathFn::Asin, OpKind::AtenAsin),
        (MathFn::Acos, OpKind::AtenAcos),
        (MathFn::Atan, OpKind::AtenAtan),
        (MathFn::Sinh, OpKind::AtenSinh),
        (MathFn::Cosh, OpKind::AtenCosh),
        (MathFn::Asinh, OpKind::AtenAsinh),
        (MathFn::Acosh, OpKind::AtenAcosh),
        (MathFn::Atanh, OpKind::AtenAtanh),
        (MathFn::Erf, OpKind::AtenErf),
        (MathFn::Floor, OpKind::AtenFloor),
        (MathFn::Ceil, OpKind::AtenCeil),
        (MathFn::Round, OpKind::AtenRound),
        (MathFn::Trunc, OpKind::AtenTrunc),
    ];

    /// Its index in the table: the CUDA kernels' number for it (`kernels/math.cu`).
    pub fn index(self) -> usize {
        Self::ALL.iter().position(|&(f, _)| f == self).unwrap_or(0)
    }

    pub fn apply<T: Real>(self, x: T) -> T {
        use MathFn as M;
        match self {
            M::Neg => -x,
            M::Exp => x.exp(),
            M::Exp2 => x.exp2(),
            M::Expm1 => x.exp_m1(),
            M::Log => x.ln(),
            M::Log2 => x.log2(),
            M::Log10 => x.log10(),
            M::Log1p => x.ln_1p(),
            M::Sqrt => x.sqrt(),
            M::Rsqrt => T::one() / x.sqrt(),
            M::Reciprocal => T::one() / x,
            M::Abs => x.abs(),
            M::Sign if x.is_nan() || x == T::zero() => x,
            M::Sign => x.signum(),
            M::Sin => x.sin(),
            M::Cos => x.cos(),
            M::Tan => x.tan(),
            M::Asin => x.asin(),
            M::Acos => x.acos(),
            M::Atan => x.atan(),
            M::Sinh => x.sinh(),
            M::Cosh => x.cosh(),
            M::Asinh => x.asinh(),
            M::Acosh => x.acosh(),
            M::Atanh => x.atanh(),
            M::Erf => x.erf(),
            M::Floor => x.floor(),
            M::Ceil => x.ceil(),
            M::Round => x.round_even(),
            M::Trunc => x.trunc(),
        }
    }
}

/// The operations of [`Math::Binary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathBin {
    Maximum,
    Minimum,
    Pow,
}

impl MathBin {
    pub fn apply<T: Real>(self, a: T, b: T) -> T {
        match self {
            MathBin::Maximum if a.is_nan() || b.is_nan() => T::nan(),
            MathBin::Maximum => a.max(b),
            MathBin::Minimum if a.is_nan() || b.is_nan() => T::nan(),
            MathBin::Minimum => a.min(b),
            MathBin::Pow => a.powf(b),
        }
    }
}

/// `x` clamped as ATen does: NaN stays NaN, `min` first, then `max` (so `min > max` gives
/// `max` everywhere). The bounds are attributes, rounded to `T`.
pub fn clamp<T: Real>(x: T, min: Option<f64>, max: Option<f64>) -> T {
    if x.is_nan() {
        return x;
    }
    let x = min.map(T::of).map_or(x, |m| if x < m { m } else { x });
    max.map(T::of).map_or(x, |m| if x > m { m } else { x })
}

pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Math>, ExecError> {
    use OpKind as K;
    Ok(Some(match kind {
        K::AtenClamp => Math::Clamp {
            min: bound(cx, "min")?,
            max: bound(cx, "max")?,
        },
        K::AtenClampMin => Math::Clamp {
            min: bound(cx, "min")?,
            max: None,
        },
        K::AtenClampMax => Math::Clamp {
            min: None,
            max: bound(cx, "max")?,
        },
        K::AtenMaximum => Math::Binary(MathBin::Maximum),
        K::AtenMinimum => Math::Binary(MathBin::Minimum),
        K::AtenPowTensor => Math::Binary(MathBin::Pow),
        _ => match MathFn::ALL.iter().find(|(_, k)| *k == kind) {
            Some(&(f, _)) => Math::Of(f),
            None => return Ok(None),
        },
    }))
}

/// An optional scalar bound of `clamp`: absent or null is none.
fn bound(cx: &Cx, key: &str) -> Result<Option<f64>, ExecError> {
    match cx.a.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => cx.a.f64_or(key, None).map(Some),
    }
}

impl Family for Math {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Math::Binary(_) => (Some(2), 1),
            _ => (Some(1), 1),
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let y = outs[0].shape.as_slice();
        match self {
            Math::Of(_) | Math::Clamp { .. } => eq("output", y, &ins[0].shape),
            Math::Binary(_) => {
                for (i, x) in ins.iter().enumerate() {
                    let fits = broadcasts(&x.shape, y);
                    expect(fits, || {
                        format!("input {i} {:?} does not broadcast to {y:?}", x.shape)
                    })?;
                }
                let rank = ins[0].shape.len().max(ins[1].shape.len());
                expect(y.len() == rank, || {
                    format!("output {y:?} is not the broadcast of the inputs")
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few values against their definitions, the edge cases ATen defines included.
    #[test]
    fn the_functions_follow_aten_at_their_edges() {
        assert_eq!(MathFn::Round.apply(2.5), 2.0);
        assert_eq!(MathFn::Round.apply(-0.5), -0.0);
        assert_eq!(MathFn::Sign.apply(-3.0), -1.0);
        assert_eq!(MathFn::Sign.apply(0.0), 0.0);
        assert!(MathFn::Sign.apply(f32::NAN).is_nan());
        assert_eq!(MathFn::Rsqrt.apply(4.0), 0.5);
        assert!(MathBin::Maximum.apply(f32::NAN, 1.0).is_nan());
        assert!(MathBin::Minimum.apply(1.0, f32::NAN).is_nan());
        assert_eq!(clamp(5.0, Some(0.0), Some(1.0)), 1.0);
        assert_eq!(clamp(-5.0, Some(0.0), None), 0.0);
        assert_eq!(clamp(0.5, Some(2.0), Some(1.0)), 1.0);
        assert!(clamp(f32::NAN, Some(0.0), Some(1.0)).is_nan());
        let kinds: Vec<OpKind> = MathFn::ALL.iter().map(|&(_, k)| k).collect();
        for (k, _) in KINDS {
            let not_fn = matches!(
                k,
                OpKind::AtenClamp
                    | OpKind::AtenClampMin
                    | OpKind::AtenClampMax
                    | OpKind::AtenMaximum
                    | OpKind::AtenMinimum
                    | OpKind::AtenPowTensor
            );
            assert!(not_fn || kinds.contains(k), "{k:?} has no function");
        }
    }
}
