//! The float types kernels compute in: f32 (also f16 and bf16, widened to it: `widening`)
//! and f64. A kernel is written once, generic over [`Real`]; for f32 it compiles to the
//! same arithmetic as one written for f32 alone (the same operations in the same order,
//! the same accumulations in f64), so adding f64 changed no f32 result.
//!
//! f64 is there to compare: a float64 step of PyTorch and sgc's agree to rounding (about
//! 1e-15), where two float32 steps can differ by a whole gradient when a ReLU input lies
//! within rounding of zero and the two round it to opposite sides.

use num_traits::{Float, FloatConst};
use sgc_ir::DType;
use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{AddAssign, DivAssign, MulAssign, SubAssign};

/// A float type a kernel computes in.
pub trait Real:
    Float
    + FloatConst
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + Sum
    + Default
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Its dtype.
    const DTYPE: DType;

    /// The value in f64 (exact).
    fn f64(self) -> f64;

    /// `v` rounded to this type (to nearest, ties to even; exact for f64).
    fn of(v: f64) -> Self;

    /// `v` in this type (exact).
    fn of32(v: f32) -> Self;

    /// The error function (libm, within 1 ulp).
    fn erf(self) -> Self;

    /// Rounded to the nearest integer, ties to even (ATen's `round`).
    fn round_even(self) -> Self;
}

impl Real for f32 {
    const DTYPE: DType = DType::F32;

    fn f64(self) -> f64 {
        f64::from(self)
    }

    fn of(v: f64) -> Self {
        v as f32
    }

    fn of32(v: f32) -> Self {
        v
    }

    fn erf(self) -> Self {
        libm::erff(self)
    }

    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

impl Real for f64 {
    const DTYPE: DType = DType::F64;

    fn f64(self) -> f64 {
        self
    }

    fn of(v: f64) -> Self {
        v
    }

    fn of32(v: f32) -> Self {
        f64::from(v)
    }

    fn erf(self) -> Self {
        libm::erf(self)
    }

    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

/// `v` in `T`: a constant written once for both types, given to f64's precision (in f32 the
/// float of the shorter literal the kernels were first written with: checked below).
pub fn c<T: Real>(v: f64) -> T {
    T::of(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels' irrational constants, written to f64's precision, round to the f32
    /// literals the f32 kernels used, so f32 results kept their bits.
    #[test]
    fn the_constants_round_to_the_f32_literals() {
        assert_eq!(c::<f32>(0.797_884_560_802_865_4), 0.797_884_6_f32); // sqrt(2/pi)
        assert_eq!(c::<f32>(0.398_942_280_401_432_7), 0.398_942_3_f32); // 1/sqrt(2 pi)
        assert_eq!(c::<f32>(0.044_715), 0.044_715_f32);
        assert_eq!(f64::FRAC_1_SQRT_2() as f32, std::f32::consts::FRAC_1_SQRT_2);
    }

    #[test]
    fn f64_keeps_what_f32_rounds() {
        let third = 1.0 / 3.0;
        assert_eq!(f64::of(third), third);
        assert_ne!(f64::from(f32::of(third)), third);
        assert_eq!(f32::of(third), third as f32);
        assert_eq!(<f64 as Real>::erf(0.5), libm::erf(0.5));
        assert_eq!(2.5f64.round_even(), 2.0);
    }
}
