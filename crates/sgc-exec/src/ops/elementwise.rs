//! Element-wise ops: arithmetic (tensor and scalar, broadcasting), activations and their
//! gradients, bias, constant fills, the exporter's sources (`ones`, `scalar_tensor`,
//! `arange`), `pow` by a scalar, `tril`, `where`, comparisons with a number (bool
//! results, which `where` takes as its mask) and the SGD update.

use super::check::{broadcasts, eq, expect};
use super::Slot;
use super::{Cx, Family};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use crate::real::{c, Real};
use sgc_ir::ops::OpKind;
use sgc_ir::DType;

kinds! {
    cuda: BiasAdd BiasAddGrad Add Mul Relu ReluGrad Gelu GeluGrad SgdUpdate AtenAddInPlace AtenRelu
        AtenLeakyRelu AtenLeakyReluBackward AtenAddTensor AtenAddScalar AtenSubTensor
        AtenMulTensor AtenMulScalar AtenDivTensor AtenDivScalar AtenThresholdBackward
        AtenOnesLike AtenEmptyLike AtenFill AtenZeros AtenEmpty AtenNewEmptyStrided
        AtenSigmoid AtenSigmoidBackward AtenTanh AtenTanhBackward AtenSilu AtenSiluBackward
        AtenMish AtenMishBackward AtenSoftplus AtenSoftplusBackward AtenHardswish
        AtenHardswishBackward AtenHardsigmoid AtenHardsigmoidBackward AtenGelu
        AtenGeluBackward AtenPow AtenOnes AtenScalarTensor AtenArange AtenTril AtenWhere
        AtenLiftFreshCopy AtenZerosLike AtenZero AtenFullLike AtenFull AtenHardtanh
        AtenHardtanhBackward AtenEqScalar AtenNeScalar AtenLtScalar AtenLeScalar AtenGtScalar
        AtenGeScalar AtenEqTensor AtenNeTensor AtenLtTensor AtenLeTensor AtenGtTensor
        AtenGeTensor AtenToCopy;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Elementwise {
    /// `x + bias` broadcast along `axis`.
    BiasAdd {
        axis: usize,
    },
    /// `dy` summed over every axis but `axis`.
    BiasAddGrad {
        axis: usize,
    },
    Add,
    Mul,
    Relu,
    /// `(y, dy) -> dy * (y > 0)`.
    ReluGrad,
    /// The tanh approximation of GELU.
    Gelu,
    /// `(x, dy) -> dy * gelu'(x)`.
    GeluGrad,
    /// ATen's `gelu_backward(dy, x, approximate="tanh")`: [`Elementwise::GeluGrad`] with
    /// its operands in ATen's order.
    GeluTanhBackward,
    /// `x` where positive, else `slope * x`.
    LeakyRelu {
        slope: f64,
    },
    /// `(dy, x) -> dy` where `x` is positive, else `slope * dy` (ATen's operand order).
    LeakyReluBackward {
        slope: f64,
    },
    /// `x` clamped to `[min, max]` (ReLU6: `[0, 6]`; NaN stays NaN).
    Hardtanh {
        min: f64,
        max: f64,
    },
    /// `(dy, x) -> dy` where `min < x < max`, else 0 (ATen's operand order).
    HardtanhBackward {
        min: f64,
        max: f64,
    },
    /// `param -= lr * grad`, in place; no outputs.
    SgdUpdate {
        lr: f64,
    },
    /// `x + value`, for f32 and i64 tensors.
    AddScalar {
        value: f64,
    },
    MulScalar {
        value: f64,
    },
    DivScalar {
        value: f64,
    },
    /// `(dy, x) -> dy * (x > threshold)`.
    ThresholdBackward {
        threshold: f64,
    },
    /// An element-wise function of one tensor.
    Pointwise(Unary),
    /// `(dy, v) -> dy * f'(...)`, `v` being the input or the output as [`Unary::grad`] says.
    PointwiseBackward(Unary),
    /// `a op b` with broadcasting (axes aligned on the right) to the output shape.
    Broadcast {
        op: BinOp,
    },
    /// Every element `value`.
    Fill {
        value: f64,
    },
    /// A fresh tensor of zeros (`aten.zeros`, `aten.empty`, `new_empty_strided`: ATen
    /// leaves `empty` undefined; zeros is one definition, the same in every run); its
    /// `inputs` operands only lend a dtype.
    Zeros {
        inputs: usize,
    },
    /// `x ^ exponent` (`x * x` for 2 and `x * x * x` for 3, as ATen computes them).
    PowScalar {
        exponent: f64,
    },
    /// A fresh tensor of `value` of `dtype` (`ones`, `scalar_tensor`); no inputs.
    Constant {
        value: f64,
        dtype: DType,
    },
    /// `start + i * step` for `i` in `0..len` (computed in f64), of `dtype`; no inputs.
    Arange {
        start: f64,
        step: f64,
        len: usize,
        dtype: DType,
    },
    /// The lower triangle of the last two axes (`col - row <= diagonal`), zeros
    /// (`false`) above; f32 or bool.
    Tril {
        diagonal: i64,
        dtype: DType,
    },
    /// `(cond, a, b) -> a` where `cond`, else `b`, each broadcast to the output.
    Where,
    /// `x op other` element-wise, a bool tensor: `x` compared with the number in f32, as
    /// ATen compares a float32 tensor with a Python number (`eq`, `ne`; NaN equals nothing).
    CompareScalar {
        op: Cmp,
        other: f64,
    },
    /// `a op b` of two f32 tensors broadcast to the output, a bool tensor.
    CompareTensor {
        op: Cmp,
    },
    /// `x` converted to dtype `to` (`_to_copy`): see `sgc_ir::ops::OpKind::AtenToCopy`.
    Cast {
        to: DType,
    },
    /// `lift_fresh_copy` of an empty constant (the exporter keeps no values): no inputs,
    /// an output of no elements.
    Lifted,
}

/// The dtype the sources and `tril` write: the output's, f32 for f16 and bf16 (the
/// backend computes those in f32 and rounds).
fn dtype_of(cx: &Cx, allowed: &[DType]) -> Result<DType, ExecError> {
    let d = match cx.output_dtype(0) {
        DType::F16 | DType::Bf16 => DType::F32,
        d => d,
    };
    if !allowed.contains(&d) {
        return Err(cx.a.err(format!(
            "its output is {}: only {allowed:?} run",
            d.as_str()
        )));
    }
    Ok(d)
}

/// `arange`'s `(start, step, len)`.
fn arange(cx: &Cx) -> Result<Elementwise, ExecError> {
    let a = &cx.a;
    let (start, end) = (a.f64_or("start", Some(0.0))?, a.f64_or("end", None)?);
    let step = a.f64_or("step", Some(1.0))?;
    if step == 0.0 {
        return Err(a.err("`step` must not be 0".into()));
    }
    let len = ((end - start) / step).ceil().max(0.0) as usize;
    let dtype = dtype_of(cx, &[DType::F32, DType::F64, DType::I64])?;
    Ok(Elementwise::Arange {
        start,
        step,
        len,
        dtype,
    })
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Elementwise>, ExecError> {
    use Elementwise as E;
    use OpKind as K;
    let a = &cx.a;
    let binary = cx.inputs() == 2;
    let same = cx.shape(0) == cx.shape(1);
    Ok(Some(match kind {
        K::BiasAdd => E::BiasAdd {
            axis: a.usize("axis")?,
        },
        K::BiasAddGrad => E::BiasAddGrad {
            axis: a.usize("axis")?,
        },
        K::Add => E::Add,
        K::Mul => E::Mul,
        K::Relu | K::AtenRelu => E::Relu,
        K::ReluGrad => E::ReluGrad,
        K::Gelu => E::Gelu,
        K::GeluGrad => E::GeluGrad,
        K::AtenLeakyRelu => E::LeakyRelu {
            slope: a.f64_or("negative_slope", Some(0.01))?,
        },
        K::AtenLeakyReluBackward => {
            let slope = a.f64_or("negative_slope", Some(0.01))?;
            // From the result, `y > 0` is `x > 0` only for a non-negative slope.
            let from_input = |v: &serde_json::Value| v.as_bool() == Some(false) || slope >= 0.0;
            a.require(
                "self_is_result",
                from_input,
                "the input or a non-negative slope",
            )?;
            E::LeakyReluBackward { slope }
        }
        K::AtenHardtanh | K::AtenHardtanhBackward => {
            let (min, max) = (
                a.f64_or("min_val", Some(-1.0))?,
                a.f64_or("max_val", Some(1.0))?,
            );
            if min > max {
                return Err(a.err(format!("`min_val` {min} is above `max_val` {max}")));
            }
            if kind == K::AtenHardtanh {
                E::Hardtanh { min, max }
            } else {
                E::HardtanhBackward { min, max }
            }
        }
        // `param + alpha * grad` is `param - (-alpha) * grad` bit for bit (negation is exact).
        K::AtenAddInPlace => E::SgdUpdate {
            lr: -a.f64_or("alpha", Some(1.0))?,
        },
        K::SgdUpdate => E::SgdUpdate {
            lr: a.f64_or("lr", None)?,
        },
        K::AtenMulTensor | K::AtenAddTensor | K::AtenSubTensor | K::AtenDivTensor
            if binary && (!same || matches!(kind, K::AtenSubTensor | K::AtenDivTensor)) =>
        {
            a.number("alpha", 1.0)?;
            let op = match kind {
                K::AtenMulTensor => BinOp::Mul,
                K::AtenSubTensor => BinOp::Sub,
                K::AtenDivTensor => BinOp::Div,
                _ => BinOp::Add,
            };
            E::Broadcast { op }
        }
        K::AtenAddTensor if binary => {
            a.number("alpha", 1.0)?;
            E::Add
        }
        K::AtenAddTensor | K::AtenAddScalar => E::AddScalar {
            value: a.f64_of("other")?,
        },
        // `x - c` is `x + (-c)` in IEEE arithmetic, bit for bit.
        K::AtenSubTensor => E::AddScalar {
            value: -a.f64_of("other")?,
        },
        K::AtenMulTensor if binary => E::Mul,
        K::AtenMulTensor | K::AtenMulScalar => E::MulScalar {
            value: a.f64_of("other")?,
        },
        K::AtenDivTensor if cx.inputs() == 1 => E::DivScalar {
            value: a.f64_of("other")?,
        },
        K::AtenDivScalar => E::DivScalar {
            value: a.f64_of("other")?,
        },
        K::AtenThresholdBackward => E::ThresholdBackward {
            threshold: a.f64_of("threshold")?,
        },
        K::AtenEmptyLike => E::Fill { value: 0.0 },
        K::AtenOnesLike => E::Fill { value: 1.0 },
        K::AtenZerosLike | K::AtenZero => E::Fill { value: 0.0 },
        K::AtenFullLike => E::Fill {
            value: a.scalar_or("fill_value", None)?,
        },
        K::AtenFull => E::Constant {
            value: a.scalar_or("fill_value", None)?,
            dtype: dtype_of(cx, &[DType::F32, DType::F64, DType::I64, DType::Bool])?,
        },
        K::AtenFill => E::Fill {
            value: a.f64_of("value")?,
        },
        K::AtenZeros | K::AtenEmpty | K::AtenNewEmptyStrided => E::Zeros {
            inputs: cx.inputs(),
        },
        K::AtenSoftplus | K::AtenSoftplusBackward => {
            a.number("beta", 1.0)?;
            a.number("threshold", 20.0)?;
            return Ok(Unary::kernel_of(kind));
        }
        K::AtenGelu | K::AtenGeluBackward => return gelu(kind == K::AtenGelu, cx).map(Some),
        K::AtenPow => E::PowScalar {
            exponent: a.f64_or("exponent", None)?,
        },
        K::AtenOnes => E::Constant {
            value: 1.0,
            dtype: dtype_of(cx, &[DType::F32, DType::F64, DType::I64, DType::Bool])?,
        },
        K::AtenScalarTensor => E::Constant {
            value: a.scalar_or("s", None)?,
            dtype: dtype_of(cx, &[DType::F32, DType::F64, DType::I64, DType::Bool])?,
        },
        K::AtenArange => arange(cx)?,
        K::AtenTril => E::Tril {
            diagonal: a.i64_or("diagonal", 0)?,
            dtype: dtype_of(cx, &[DType::F32, DType::F64, DType::Bool])?,
        },
        K::AtenWhere => E::Where,
        K::AtenEqScalar
        | K::AtenNeScalar
        | K::AtenLtScalar
        | K::AtenLeScalar
        | K::AtenGtScalar
        | K::AtenGeScalar => E::CompareScalar {
            op: Cmp::of(kind),
            other: a.scalar_or("other", None)?,
        },
        K::AtenEqTensor
        | K::AtenNeTensor
        | K::AtenLtTensor
        | K::AtenLeTensor
        | K::AtenGtTensor
        | K::AtenGeTensor => E::CompareTensor { op: Cmp::of(kind) },
        K::AtenLiftFreshCopy => E::Lifted,
        K::AtenToCopy => E::Cast {
            to: cx.output_dtype(0),
        },
        _ => return Ok(Unary::kernel_of(kind)),
    }))
}

/// `aten.gelu` (`forward`) or its backward, by `approximate`.
fn gelu(forward: bool, cx: &Cx) -> Result<Elementwise, ExecError> {
    let a = &cx.a;
    let tanh = match a.get("approximate") {
        None => false,
        Some(v) if v.as_str() == Some("none") => false,
        Some(v) if v.as_str() == Some("tanh") => true,
        Some(v) => {
            return Err(a.err(format!(
                "`approximate` = {v}: only \"none\" and \"tanh\" run"
            )))
        }
    };
    Ok(match (forward, tanh) {
        (true, false) => Elementwise::Pointwise(Unary::GeluErf),
        (false, false) => Elementwise::PointwiseBackward(Unary::GeluErf),
        (true, true) => Elementwise::Gelu,
        (false, true) => Elementwise::GeluTanhBackward,
    })
}

impl Family for Elementwise {
    fn arity(&self) -> (Option<usize>, usize) {
        use Elementwise as E;
        match self {
            E::SgdUpdate { .. } => (Some(2), 0),
            E::Zeros { inputs } => (Some(*inputs), 1),
            E::Constant { .. } | E::Arange { .. } | E::Lifted => (Some(0), 1),
            E::Where => (Some(3), 1),
            E::Relu
            | E::Gelu
            | E::LeakyRelu { .. }
            | E::Hardtanh { .. }
            | E::BiasAddGrad { .. }
            | E::AddScalar { .. }
            | E::MulScalar { .. }
            | E::DivScalar { .. }
            | E::Fill { .. }
            | E::PowScalar { .. }
            | E::Tril { .. }
            | E::CompareScalar { .. }
            | E::Cast { .. }
            | E::Pointwise(_) => (Some(1), 1),
            _ => (Some(2), 1),
        }
    }

    fn ints(&self) -> &'static [DType] {
        match self {
            Elementwise::AddScalar { .. } => &[DType::I64],
            Elementwise::Add
            | Elementwise::Mul
            | Elementwise::Broadcast {
                op: BinOp::Add | BinOp::Sub | BinOp::Mul,
            } => &[DType::I64, DType::I32],
            _ => &[],
        }
    }

    fn input(&self, i: usize) -> Slot {
        match self {
            Elementwise::Where if i == 0 => Slot::Mask,
            Elementwise::Cast { .. }
            | Elementwise::CompareScalar { .. }
            | Elementwise::CompareTensor { .. } => Slot::Any,
            Elementwise::Tril {
                dtype: DType::Bool, ..
            } => Slot::Mask,
            _ => Slot::Data,
        }
    }

    fn output_dtype(&self, _i: usize) -> DType {
        match self {
            Elementwise::Constant { dtype, .. }
            | Elementwise::Arange { dtype, .. }
            | Elementwise::Tril { dtype, .. } => *dtype,
            Elementwise::Cast { to } => *to,
            Elementwise::CompareScalar { .. } | Elementwise::CompareTensor { .. } => DType::Bool,
            _ => DType::F32,
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        use Elementwise as E;
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            E::BiasAdd { axis } => {
                let x = s(0);
                expect(*axis < x.len() && s(1) == [x[*axis]], || {
                    format!("bias {:?} does not fit axis {axis} of {x:?}", s(1))
                })?;
                eq("output", o(0), x)
            }
            E::BiasAddGrad { axis } => {
                expect(*axis < s(0).len(), || format!("axis {axis} of {:?}", s(0)))?;
                eq("output", o(0), &[s(0)[*axis]])
            }
            E::Add
            | E::Mul
            | E::ReluGrad
            | E::GeluGrad
            | E::GeluTanhBackward
            | E::LeakyReluBackward { .. }
            | E::HardtanhBackward { .. }
            | E::ThresholdBackward { .. }
            | E::PointwiseBackward(_) => {
                eq("input 1", s(1), s(0))?;
                eq("output", o(0), s(0))
            }
            E::Relu
            | E::Gelu
            | E::LeakyRelu { .. }
            | E::Hardtanh { .. }
            | E::AddScalar { .. }
            | E::MulScalar { .. }
            | E::DivScalar { .. }
            | E::Fill { .. }
            | E::PowScalar { .. }
            | E::CompareScalar { .. }
            | E::Cast { .. }
            | E::Pointwise(_) => eq("output", o(0), s(0)),
            E::Tril { .. } => {
                expect(s(0).len() >= 2, || format!("tril of {:?}", s(0)))?;
                eq("output", o(0), s(0))
            }
            E::Constant { .. } => Ok(()),
            E::Arange { len, .. } => eq("output", o(0), &[*len]),
            E::Lifted => expect(outs[0].numel() == 0, || {
                format!(
                    "a lifted constant of shape {:?}: its values are not in the graph",
                    o(0)
                )
            }),
            E::Where => {
                for i in 0..3 {
                    let fits = broadcasts(s(i), o(0));
                    expect(fits, || {
                        format!("input {i} {:?} does not broadcast to {:?}", s(i), o(0))
                    })?;
                }
                Ok(())
            }
            E::SgdUpdate { .. } => eq("gradient", s(1), s(0)),
            E::Zeros { .. } => Ok(()),
            E::Broadcast { .. } | E::CompareTensor { .. } => broadcast_shapes(s(0), s(1), o(0)),
        }
    }
}

/// `a op b` broadcast to `y`.
fn broadcast_shapes(a: &[usize], b: &[usize], y: &[usize]) -> Result<(), KernelError> {
    for (i, x) in [a, b].into_iter().enumerate() {
        let fits = broadcasts(x, y);
        expect(fits, || {
            format!("input {i} {x:?} does not broadcast to {y:?}")
        })?;
    }
    let want: Vec<usize> = (0..y.len())
        .map(|d| {
            let at = |x: &[usize]| (d + x.len()).checked_sub(y.len()).map_or(1, |k| x[k]);
            at(a).max(at(b))
        })
        .collect();
    eq("output", y, &want)
}

/// The comparison of [`Elementwise::CompareScalar`] and [`Elementwise::CompareTensor`]
/// (IEEE: NaN compares false, except `ne`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    /// The comparison of op kind `kind` (one of the `eq`..`ge` kinds).
    fn of(kind: OpKind) -> Cmp {
        use OpKind as K;
        match kind {
            K::AtenEqScalar | K::AtenEqTensor => Cmp::Eq,
            K::AtenNeScalar | K::AtenNeTensor => Cmp::Ne,
            K::AtenLtScalar | K::AtenLtTensor => Cmp::Lt,
            K::AtenLeScalar | K::AtenLeTensor => Cmp::Le,
            K::AtenGtScalar | K::AtenGtTensor => Cmp::Gt,
            _ => Cmp::Ge,
        }
    }

    /// `x op other` for numbers of one type: f32 (as ATen compares a float32 tensor), f64
    /// (an integer against a fraction), i64 (two integers, exactly).
    pub fn holds<T: PartialOrd>(self, x: T, other: T) -> bool {
        match self {
            Cmp::Eq => x == other,
            Cmp::Ne => x != other,
            Cmp::Lt => x < other,
            Cmp::Le => x <= other,
            Cmp::Gt => x > other,
            Cmp::Ge => x >= other,
        }
    }
}

/// The operation of [`Elementwise::Broadcast`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// True division (`div.Tensor` without a rounding mode).
    Div,
}

/// The element-wise functions of [`Elementwise::Pointwise`]. Adding one takes its op kinds in
/// the vocabulary (`sgc_ir::ops`) and, here, a variant with its kinds, formula and
/// derivative, plus its rows in [`KINDS`]; a test checks every derivative against finite
/// differences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    Sigmoid,
    Tanh,
    Silu,
    Hardswish,
    Hardsigmoid,
    /// `x * Phi(x)` with the exact normal CDF (PyTorch's default `approximate="none"`).
    GeluErf,
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `ln(1 + e^x)`, `x` itself above 20 (ATen's default `beta = 1`, `threshold = 20`).
    Softplus,
}

impl Unary {
    pub const ALL: &'static [Unary] = &[
        Unary::Sigmoid,
        Unary::Tanh,
        Unary::Silu,
        Unary::Hardswish,
        Unary::Hardsigmoid,
        Unary::GeluErf,
        Unary::Mish,
        Unary::Softplus,
    ];

    /// The op kinds of the function and of its gradient.
    pub fn kinds(self) -> (OpKind, OpKind) {
        use OpKind as K;
        match self {
            Unary::Sigmoid => (K::AtenSigmoid, K::AtenSigmoidBackward),
            Unary::Tanh => (K::AtenTanh, K::AtenTanhBackward),
            Unary::Silu => (K::AtenSilu, K::AtenSiluBackward),
            Unary::Hardswish => (K::AtenHardswish, K::AtenHardswishBackward),
            Unary::Hardsigmoid => (K::AtenHardsigmoid, K::AtenHardsigmoidBackward),
            Unary::GeluErf => (K::AtenGelu, K::AtenGeluBackward),
            Unary::Mish => (K::AtenMish, K::AtenMishBackward),
            Unary::Softplus => (K::AtenSoftplus, K::AtenSoftplusBackward),
        }
    }

    /// The pointwise kernel of op kind `kind`, if it is one of these functions or gradients.
    fn kernel_of(kind: OpKind) -> Option<Elementwise> {
        Unary::ALL.iter().find_map(|&u| match u.kinds() {
            (f, _) if f == kind => Some(Elementwise::Pointwise(u)),
            (_, g) if g == kind => Some(Elementwise::PointwiseBackward(u)),
            _ => None,
        })
    }

    /// Whether the backward op reads the forward output (`sigmoid`, `tanh`: ATen's
    /// `(grad_output, output)`) rather than the input (`(grad_output, self)`).
    pub fn grad_reads_output(self) -> bool {
        matches!(self, Unary::Sigmoid | Unary::Tanh)
    }

    pub fn apply<T: Real>(self, x: T) -> T {
        let one = T::one();
        match self {
            Unary::Sigmoid => one / (one + (-x).exp()),
            Unary::Tanh => x.tanh(),
            Unary::Silu => x / (one + (-x).exp()),
            Unary::Hardswish => x * (x + c(3.0)).clamp(T::zero(), c(6.0)) / c(6.0),
            Unary::Hardsigmoid => (x / c(6.0) + c(0.5)).clamp(T::zero(), one),
            Unary::GeluErf => c::<T>(0.5) * x * (one + (x * T::FRAC_1_SQRT_2()).erf()),
            Unary::Mish => x * x.exp().ln_1p().tanh(),
            Unary::Softplus if x > c(20.0) => x,
            Unary::Softplus => x.exp().ln_1p(),
        }
    }

    /// `dy * f'`, from the value the backward op reads.
    pub fn grad<T: Real>(self, dy: T, v: T) -> T {
        let (one, zero) = (T::one(), T::zero());
        match self {
            Unary::Sigmoid => dy * (one - v) * v,
            Unary::Tanh => dy * (one - v * v),
            Unary::Silu => {
                let s = one / (one + (-v).exp());
                dy * s * (one + v * (one - s))
            }
            Unary::Hardswish if v < c(-3.0) => zero,
            Unary::Hardswish if v <= c(3.0) => dy * (v / c(3.0) + c(0.5)),
            Unary::Hardswish => dy,
            // ATen multiplies by `1.0f / 6.0f`, a float constant in every dtype (in f64
            // that is 3e-8 from 1/6): the same number here, so both agree in f64 too.
            Unary::Hardsigmoid if v > c(-3.0) && v < c(3.0) => dy * T::of32(1.0 / 6.0),
            Unary::Hardsigmoid => zero,
            Unary::GeluErf => {
                let cdf = c::<T>(0.5) * (one + (v * T::FRAC_1_SQRT_2()).erf());
                // 1/sqrt(2 pi); in f32 the same float as the literal 0.398_942_3.
                let pdf = (c::<T>(-0.5) * v * v).exp() * c(0.398_942_280_401_432_7);
                dy * (cdf + v * pdf)
            }
            Unary::Mish => {
                let (t, s) = (v.exp().ln_1p().tanh(), one / (one + (-v).exp()));
                dy * (t + v * s * (one - t * t))
            }
            Unary::Softplus if v > c(20.0) => dy,
            Unary::Softplus => dy / (one + (-v).exp()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pointwise derivative against a central difference of its function (in f64
    /// steps around f32 values, away from the kinks of the hard functions).
    #[test]
    fn pointwise_derivatives_match_finite_differences() {
        for &u in Unary::ALL {
            for i in -40..=40 {
                let x = i as f32 * 0.1 + 0.013;
                if matches!(u, Unary::Hardswish | Unary::Hardsigmoid)
                    && (x.abs() - 3.0).abs() < 0.05
                {
                    continue;
                }
                let h = 1e-2f32;
                let numeric =
                    (f64::from(u.apply(x + h)) - f64::from(u.apply(x - h))) / (2.0 * f64::from(h));
                let v = if u.grad_reads_output() { u.apply(x) } else { x };
                let analytic = f64::from(u.grad(1.0, v));
                assert!(
                    (numeric - analytic).abs() <= 2e-3 * numeric.abs().max(1.0),
                    "{u:?} at {x}: derivative {analytic}, central difference {numeric}"
                );
            }
        }
    }
}
