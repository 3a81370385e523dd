//! Element-wise kernels, bias, scalar arithmetic, activations, comparisons and the SGD
//! update.

use super::shape::{expand, expand_pair};
use super::{f, CpuBackend, Host, Io, NAME, R};
use crate::backend::{Backend, Operand};
use crate::error::ExecError;
use crate::ops::elementwise::{BinOp, Cmp, Elementwise};
use crate::real::{c, Real};
use sgc_ir::ops::OpKind;
use sgc_ir::DType;

/// `(dim, inner)` of broadcasting along `axis` of `shape`.
fn axis_split(shape: &[usize], axis: usize) -> (usize, usize) {
    (shape[axis], shape[axis + 1..].iter().product())
}

/// `x + bias` along `axis`: rows of `inner` elements share one bias value (no division
/// per element).
pub(crate) fn bias_add<T: Real>(x: &[T], bias: &[T], y: &mut [T], shape: &[usize], axis: usize) {
    let (dim, inner) = axis_split(shape, axis);
    let rows = y.chunks_mut(inner.max(1)).zip(x.chunks(inner.max(1)));
    for (r, (yr, xr)) in rows.enumerate() {
        let b = bias[r % dim.max(1)];
        for (y, x) in yr.iter_mut().zip(xr) {
            *y = *x + b;
        }
    }
}

/// `dy` summed over every axis but `axis`, in f64 (a sum over the batch: f32 drifts from
/// PyTorch by 100x on millions of rows), rounded once.
pub(crate) fn bias_add_grad<T: Real>(dy: &[T], db: &mut [T], shape: &[usize], axis: usize) {
    let (dim, inner) = axis_split(shape, axis);
    let mut acc = vec![0.0f64; db.len()];
    for (r, row) in dy.chunks(inner.max(1)).enumerate() {
        acc[r % dim.max(1)] += row.iter().map(|&g| g.f64()).sum::<f64>();
    }
    for (d, a) in db.iter_mut().zip(acc) {
        *d = T::of(a);
    }
}

pub(crate) fn add<T: Real>(a: &[T], b: &[T], y: &mut [T]) {
    for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
        *y = a + b;
    }
}

pub(crate) fn mul<T: Real>(a: &[T], b: &[T], y: &mut [T]) {
    for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
        *y = a * b;
    }
}

pub(crate) fn relu<T: Real>(x: &[T], y: &mut [T]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = x.max(T::zero());
    }
}

/// `(y, dy)`: the gradient passes where the output is positive.
pub(crate) fn relu_grad<T: Real>(y: &[T], dy: &[T], dx: &mut [T]) {
    for ((dx, y), g) in dx.iter_mut().zip(y).zip(dy) {
        *dx = if *y > T::zero() { *g } else { T::zero() };
    }
}

/// sqrt(2 / pi), in f32 the float of the literal 0.797_884_6.
fn sqrt_2_over_pi<T: Real>() -> T {
    c(0.797_884_560_802_865_4)
}

/// The tanh approximation's cubic coefficient.
fn gelu_c<T: Real>() -> T {
    c(0.044_715)
}

pub(crate) fn gelu<T: Real>(x: &[T], y: &mut [T]) {
    let (k, g, half, one) = (sqrt_2_over_pi::<T>(), gelu_c::<T>(), c::<T>(0.5), T::one());
    for (y, &x) in y.iter_mut().zip(x) {
        let t = (k * (x + g * x * x * x)).tanh();
        *y = half * x * (one + t);
    }
}

/// `(x, dy)`: `dy * d/dx [0.5 x (1 + tanh(c (x + 0.044715 x^3)))]`.
pub(crate) fn gelu_grad<T: Real>(x: &[T], dy: &[T], dx: &mut [T]) {
    let (k, g3, half, one) = (sqrt_2_over_pi::<T>(), gelu_c::<T>(), c::<T>(0.5), T::one());
    for ((dx, &x), &g) in dx.iter_mut().zip(x).zip(dy) {
        let t = (k * (x + g3 * x * x * x)).tanh();
        let du = k * (one + c::<T>(3.0) * g3 * x * x);
        *dx = g * (half * (one + t) + half * x * (one - t * t) * du);
    }
}

/// `leaky_relu`: `x` where positive, else `slope * x`.
pub(crate) fn leaky_relu<T: Real>(x: &[T], y: &mut [T], slope: f64) {
    let slope = T::of(slope);
    for (y, &x) in y.iter_mut().zip(x) {
        *y = if x > T::zero() { x } else { x * slope };
    }
}

/// `leaky_relu_backward`: `(dy, x) -> dy` where `x` is positive, else `slope * dy`.
pub(crate) fn leaky_relu_backward<T: Real>(dy: &[T], x: &[T], dx: &mut [T], slope: f64) {
    let slope = T::of(slope);
    for ((d, &g), &x) in dx.iter_mut().zip(dy).zip(x) {
        *d = if x > T::zero() { g } else { g * slope };
    }
}

/// `hardtanh`: `x` clamped to `[min, max]`, as ATen's `min(max(x, min), max)` (NaN stays).
pub(crate) fn hardtanh<T: Real>(x: &[T], y: &mut [T], min: f64, max: f64) {
    let (min, max) = (T::of(min), T::of(max));
    for (y, &x) in y.iter_mut().zip(x) {
        *y = if x < min {
            min
        } else if x > max {
            max
        } else {
            x
        };
    }
}

/// `hardtanh_backward`: `(dy, x) -> dy` where `min < x < max`, else 0.
pub(crate) fn hardtanh_backward<T: Real>(dy: &[T], x: &[T], dx: &mut [T], min: f64, max: f64) {
    let (min, max) = (T::of(min), T::of(max));
    for ((d, &g), &x) in dx.iter_mut().zip(dy).zip(x) {
        *d = if x > min && x < max { g } else { T::zero() };
    }
}

/// `param -= lr * grad`, in place.
pub(crate) fn sgd_update<T: Real>(param: &mut [T], grad: &[T], lr: f64) {
    let lr = T::of(lr);
    for (p, &g) in param.iter_mut().zip(grad) {
        *p -= lr * g;
    }
}

pub(crate) fn add_scalar<T: Real>(x: &[T], y: &mut [T], v: f64) {
    let v = T::of(v);
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x + v;
    }
}

pub(crate) fn mul_scalar<T: Real>(x: &[T], y: &mut [T], v: f64) {
    let v = T::of(v);
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x * v;
    }
}

pub(crate) fn div_scalar<T: Real>(x: &[T], y: &mut [T], v: f64) {
    let v = T::of(v);
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x / v;
    }
}

/// `threshold_backward`: `dy` where `x > threshold`, else 0.
pub(crate) fn threshold_backward<T: Real>(dy: &[T], x: &[T], dx: &mut [T], threshold: f64) {
    let threshold = T::of(threshold);
    for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
        *d = if v > threshold { g } else { T::zero() };
    }
}

/// `x ^ e`: `x * x` and `x * x * x` for 2 and 3 (ATen's special cases), else `powf`.
pub(crate) fn pow_scalar<T: Real>(x: &[T], y: &mut [T], e: f64) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = if e == 2.0 {
            x * x
        } else if e == 3.0 {
            x * x * x
        } else {
            x.powf(T::of(e))
        };
    }
}

/// `arange`: `start + i * step`, computed in f64.
pub(crate) fn arange(start: f64, step: f64, len: usize) -> impl Iterator<Item = f64> {
    (0..len).map(move |i| start + step * i as f64)
}

/// `tril` of elements of `size` bytes: `x [.., rows, cols]` with zero bytes where
/// `col - row > diagonal`.
pub(crate) fn tril(x: &[u8], size: usize, shape: &[usize], diagonal: i64) -> Vec<u8> {
    let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let mut y = x.to_vec();
    for (e, v) in y.chunks_exact_mut(size).enumerate() {
        let (r, c) = ((e / cols) % rows, e % cols);
        if c as i64 - r as i64 > diagonal {
            v.fill(0);
        }
    }
    y
}

/// `eq.Scalar`, `ne.Scalar`: the bytes of the bool tensor `x op other` (1 true, 0 false),
/// `other` in `x`'s type first, as ATen compares a float tensor with a number.
pub(crate) fn compare_scalar<T: Real>(x: &[T], op: Cmp, other: f64) -> Vec<u8> {
    let other = T::of(other);
    x.iter().map(|&v| u8::from(op.holds(v, other))).collect()
}

/// `values` as bytes of `dtype` (f64, i64, bool: nonzero is true; else f32).
fn encode(values: impl Iterator<Item = f64>, dtype: DType) -> Vec<u8> {
    match dtype {
        DType::I64 => values.flat_map(|v| (v as i64).to_ne_bytes()).collect(),
        DType::Bool => values.map(|v| u8::from(v != 0.0)).collect(),
        DType::F64 => values.flat_map(|v| v.to_ne_bytes()).collect(),
        _ => values.flat_map(|v| (v as f32).to_ne_bytes()).collect(),
    }
}

/// Runs a kernel of the family on float data.
pub(super) fn run<T: Host>(k: &Elementwise, io: Io<T>) -> R {
    use Elementwise as E;
    let sh = |i: usize| io.ops_in[i].shape.as_slice();
    match k {
        E::BiasAdd { axis } => bias_add(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0], sh(0), *axis),
        E::BiasAddGrad { axis } => bias_add_grad(f(&io.ins[0])?, io.outs[0], sh(0), *axis),
        E::Add => add(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0]),
        E::Mul => mul(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0]),
        E::Relu => relu(f(&io.ins[0])?, io.outs[0]),
        E::ReluGrad => relu_grad(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0]),
        E::Gelu => gelu(f(&io.ins[0])?, io.outs[0]),
        E::GeluGrad => gelu_grad(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0]),
        E::GeluTanhBackward => gelu_grad(f(&io.ins[1])?, f(&io.ins[0])?, io.outs[0]),
        E::LeakyRelu { slope } => leaky_relu(f(&io.ins[0])?, io.outs[0], *slope),
        E::LeakyReluBackward { slope } => {
            leaky_relu_backward(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0], *slope)
        }
        E::Hardtanh { min, max } => hardtanh(f(&io.ins[0])?, io.outs[0], *min, *max),
        E::HardtanhBackward { min, max } => {
            hardtanh_backward(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0], *min, *max)
        }
        E::SgdUpdate { lr } => sgd_update(io.outs[0], f(&io.ins[0])?, *lr),
        E::AddScalar { value } => add_scalar(f(&io.ins[0])?, io.outs[0], *value),
        E::MulScalar { value } => mul_scalar(f(&io.ins[0])?, io.outs[0], *value),
        E::DivScalar { value } => div_scalar(f(&io.ins[0])?, io.outs[0], *value),
        E::ThresholdBackward { threshold } => {
            threshold_backward(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0], *threshold)
        }
        E::Pointwise(u) => {
            for (y, &x) in io.outs[0].iter_mut().zip(f(&io.ins[0])?) {
                *y = u.apply(x);
            }
        }
        E::PointwiseBackward(u) => {
            let (dy, v) = (f(&io.ins[0])?, f(&io.ins[1])?);
            for ((d, &g), &v) in io.outs[0].iter_mut().zip(dy).zip(v) {
                *d = u.grad(g, v);
            }
        }
        E::Broadcast { op } => {
            let y = &io.ops_out[0].shape;
            let (a, b) = expand_pair((f(&io.ins[0])?, sh(0)), (f(&io.ins[1])?, sh(1)), y);
            let op = |(&a, &b): (&T, &T)| match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div => a / b,
            };
            for (o, v) in io.outs[0].iter_mut().zip(a.iter().zip(&b).map(op)) {
                *o = v;
            }
        }
        E::Fill { value } => io.outs[0].fill(T::of(*value)),
        E::Zeros { .. } => io.outs[0].fill(T::zero()),
        E::PowScalar { exponent } => pow_scalar(f(&io.ins[0])?, io.outs[0], *exponent),
        E::Constant { .. }
        | E::Arange { .. }
        | E::Tril { .. }
        | E::Where
        | E::CompareScalar { .. }
        | E::CompareTensor { .. }
        | E::Cast { .. }
        | E::Lifted => return Err(super::byte_path()),
    }
    Ok(())
}

/// The sources, `tril`, `where` and the comparisons (any dtype, through bytes), and `add_scalar` on an
/// i64 tensor (an integer counter); `false` for every other kernel.
pub(super) fn launch_bytes(
    be: &mut CpuBackend,
    k: &Elementwise,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<bool, ExecError> {
    let Some(y) = outputs.first() else {
        return Ok(false); // `sgd_update`, in place
    };
    let bytes = match k {
        Elementwise::Constant { value, dtype } => encode((0..y.numel()).map(|_| *value), *dtype),
        Elementwise::Arange {
            start,
            step,
            len,
            dtype,
        } => encode(arange(*start, *step, *len), *dtype),
        Elementwise::Tril { diagonal, dtype } => {
            let x = be.bytes(&inputs[0])?;
            tril(&x, dtype.size() as usize, &inputs[0].shape, *diagonal)
        }
        Elementwise::Where => where_select(be, inputs, y)?,
        Elementwise::CompareScalar { op, other } => match numbers(be, &inputs[0])? {
            Numbers::Float(x) => compare_scalar(&x, *op, *other),
            Numbers::Double(x) => compare_scalar(&x, *op, *other),
            Numbers::Int(x) => x
                .iter()
                .map(|&v| u8::from(compare_int_scalar(*op, v, *other)))
                .collect(),
        },
        Elementwise::CompareTensor { op } => compare(be, *op, (&inputs[0], &inputs[1]), y)?,
        Elementwise::Add | Elementwise::Mul | Elementwise::Broadcast { .. }
            if !matches!(
                inputs[0].dtype,
                DType::F32 | DType::F64 | DType::F16 | DType::Bf16
            ) =>
        {
            let op = match k {
                Elementwise::Add => BinOp::Add,
                Elementwise::Mul => BinOp::Mul,
                Elementwise::Broadcast { op } => *op,
                _ => return Ok(false),
            };
            match integer_arithmetic(be, op, inputs, y)? {
                Some(bytes) => bytes,
                None => return Ok(false),
            }
        }
        Elementwise::Lifted => Vec::new(),
        Elementwise::Cast { .. } => cast(be, &inputs[0], y)?,
        Elementwise::AddScalar { value } => return add_scalar_i64(be, *value, inputs, outputs),
        _ => return Ok(false),
    };
    be.write(y.buffer, y.offset, &bytes)?;
    Ok(true)
}

/// Elements of one dtype family: f32 floats (f16 and bf16 arrive widened), f64 floats or
/// integers.
enum Numbers {
    Float(Vec<f32>),
    Double(Vec<f64>),
    Int(Vec<i64>),
}

impl Numbers {
    /// Element `e` in f64 (exact for floats; integers beyond 2^53 round).
    fn f64(&self, e: usize) -> f64 {
        match self {
            Numbers::Float(v) => f64::from(v[e]),
            Numbers::Double(v) => v[e],
            Numbers::Int(v) => v[e] as f64,
        }
    }
}

/// The elements of `x` (a view materialised): floats (f16 and bf16 arrive widened) or
/// integers (i64, i32, bool and u8 as i64).
fn numbers(be: &mut CpuBackend, x: &Operand) -> Result<Numbers, ExecError> {
    Ok(match x.dtype {
        DType::F32 => Numbers::Float(be.f32_of(x)?),
        DType::F64 => Numbers::Double(be.f64_of(x)?),
        DType::I64 => Numbers::Int(be.i64_of(x)?),
        // An i32 view's elements are moved as f32 words: their bits are the i32's.
        DType::I32 => Numbers::Int(match &x.view {
            Some(view) => be
                .materialize(x, view)?
                .iter()
                .map(|w| i64::from(w.to_bits() as i32))
                .collect(),
            None => be
                .bytes(x)?
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        }),
        DType::Bool | DType::U8 => {
            Numbers::Int(be.byte_elements(x)?.into_iter().map(i64::from).collect())
        }
        d => {
            return Err(ExecError::backend(
                NAME,
                format!("{} elements read as numbers", d.as_str()),
            ))
        }
    })
}

/// `x` converted to `y`'s dtype (`_to_copy`): its bytes. Floats to integers truncate toward
/// zero (saturating; NaN is 0), anything to bool is `!= 0` (NaN is true), as ATen casts.
fn cast(be: &mut CpuBackend, x: &Operand, y: &Operand) -> Result<Vec<u8>, ExecError> {
    Ok(match (numbers(be, x)?, y.dtype) {
        (Numbers::Float(v), DType::F32) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        (Numbers::Double(v), DType::F32) => {
            v.iter().flat_map(|&x| (x as f32).to_ne_bytes()).collect()
        }
        (Numbers::Int(v), DType::F32) => v.iter().flat_map(|&x| (x as f32).to_ne_bytes()).collect(),
        (n, DType::F64) => (0..x.numel())
            .flat_map(|e| n.f64(e).to_ne_bytes())
            .collect(),
        (Numbers::Float(v), DType::Bool) => v.iter().map(|&x| u8::from(x != 0.0)).collect(),
        (Numbers::Double(v), DType::Bool) => v.iter().map(|&x| u8::from(x != 0.0)).collect(),
        (Numbers::Int(v), DType::Bool) => v.iter().map(|&x| u8::from(x != 0)).collect(),
        (n, to) => {
            let ints: Vec<i64> = match n {
                Numbers::Float(v) => v.iter().map(|&x| x as i64).collect(),
                Numbers::Double(v) => v.iter().map(|&x| x as i64).collect(),
                Numbers::Int(v) => v,
            };
            encode_ints(&ints, to)?
        }
    })
}

/// `values` as bytes of the integer dtype `to` (wrapping, as ATen's integer arithmetic).
fn encode_ints(values: &[i64], to: DType) -> Result<Vec<u8>, ExecError> {
    Ok(match to {
        DType::I64 => values.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        DType::I32 => values
            .iter()
            .flat_map(|&x| (x as i32).to_ne_bytes())
            .collect(),
        DType::U8 => values.iter().map(|&x| x as u8).collect(),
        DType::Bool => values.iter().map(|&x| u8::from(x != 0)).collect(),
        d => {
            return Err(ExecError::backend(
                NAME,
                format!("integers written as {}", d.as_str()),
            ))
        }
    })
}

/// `x op other` for an integer `x` and a number: exactly when `other` is an integer, else in
/// f64.
fn compare_int_scalar(op: Cmp, x: i64, other: f64) -> bool {
    if other.fract() == 0.0 && other.abs() < 9.0e18 {
        op.holds(x, other as i64)
    } else {
        op.holds(x as f64, other)
    }
}

/// `a op b` of two tensors broadcast to `y`: two f32 floats compare in f32 (f16 and bf16
/// widened), two integers exactly, anything else in f64. Its bytes.
fn compare(
    be: &mut CpuBackend,
    op: Cmp,
    (a, b): (&Operand, &Operand),
    y: &Operand,
) -> Result<Vec<u8>, ExecError> {
    let n = y.numel();
    let mut wide = |x: &Operand| -> Result<Numbers, ExecError> {
        Ok(match numbers(be, x)? {
            Numbers::Float(v) => {
                let mut e = vec![0.0; n];
                expand(&v, &mut e, &x.shape, &y.shape);
                Numbers::Float(e)
            }
            Numbers::Double(v) => {
                let mut e = vec![0.0; n];
                expand(&v, &mut e, &x.shape, &y.shape);
                Numbers::Double(e)
            }
            Numbers::Int(v) => {
                let mut e = vec![0; n];
                expand(&v, &mut e, &x.shape, &y.shape);
                Numbers::Int(e)
            }
        })
    };
    let (a, b) = (wide(a)?, wide(b)?);
    Ok((0..n)
        .map(|e| {
            u8::from(match (&a, &b) {
                (Numbers::Float(a), Numbers::Float(b)) => op.holds(a[e], b[e]),
                (Numbers::Int(a), Numbers::Int(b)) => op.holds(a[e], b[e]),
                _ => op.holds(a.f64(e), b.f64(e)),
            })
        })
        .collect())
}

/// `a op b` of two integer tensors (`add`, `sub`, `mul`) broadcast to `y`, wrapping as ATen
/// does: its bytes; `None` when an operand is a float.
fn integer_arithmetic(
    be: &mut CpuBackend,
    op: BinOp,
    ins: &[Operand],
    y: &Operand,
) -> Result<Option<Vec<u8>>, ExecError> {
    let n = y.numel();
    let mut sides = [vec![0i64; n], vec![0i64; n]];
    for (side, x) in sides.iter_mut().zip(ins) {
        let Numbers::Int(v) = numbers(be, x)? else {
            return Ok(None);
        };
        expand(&v, side, &x.shape, &y.shape);
    }
    let values: Vec<i64> = sides[0]
        .iter()
        .zip(&sides[1])
        .map(|(&a, &b)| match op {
            BinOp::Add => a.wrapping_add(b),
            BinOp::Sub => a.wrapping_sub(b),
            BinOp::Mul => a.wrapping_mul(b),
            // Refused before the first step: `Elementwise::ints` lists no integer division.
            BinOp::Div => 0,
        })
        .collect();
    encode_ints(&values, y.dtype).map(Some)
}

/// `where(cond, a, b)`, each broadcast to `y`: its bytes.
fn where_select(be: &mut CpuBackend, ins: &[Operand], y: &Operand) -> Result<Vec<u8>, ExecError> {
    let n = y.numel();
    let mut cond = vec![0u8; n];
    expand(
        &be.byte_elements(&ins[0])?,
        &mut cond,
        &ins[0].shape,
        &y.shape,
    );
    if y.dtype == DType::F64 {
        return Ok(f64::bytes_of(&pick::<f64>(be, &cond, &ins[1..], y)?));
    }
    Ok(f32::bytes_of(&pick::<f32>(be, &cond, &ins[1..], y)?))
}

/// `cond ? a : b` elementwise, `a` and `b` broadcast to `y`.
fn pick<T: Host>(
    be: &mut CpuBackend,
    cond: &[u8],
    sides: &[Operand],
    y: &Operand,
) -> Result<Vec<T>, ExecError> {
    let n = y.numel();
    let mut both = [vec![T::zero(); n], vec![T::zero(); n]];
    for (side, o) in both.iter_mut().zip(sides) {
        expand(&T::read(be, o)?, side, &o.shape, &y.shape);
    }
    Ok((0..n)
        .map(|e| if cond[e] != 0 { both[0][e] } else { both[1][e] })
        .collect())
}

/// `add_scalar` of an i64 tensor; `false` for an f32 one.
fn add_scalar_i64(
    be: &mut CpuBackend,
    value: f64,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<bool, ExecError> {
    if inputs[0].dtype != DType::I64 {
        return Ok(false);
    }
    let value = &value;
    if value.fract() != 0.0 {
        return Err(ExecError::backend(
            NAME,
            format!(
                "{}: adds {value} to an integer tensor",
                OpKind::AtenAddScalar.name()
            ),
        ));
    }
    let x = be.bytes(&inputs[0])?;
    let y: Vec<u8> = x
        .chunks_exact(8)
        .flat_map(|c| {
            let v = i64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
            v.wrapping_add(*value as i64).to_ne_bytes()
        })
        .collect();
    be.write(outputs[0].buffer, outputs[0].offset, &y)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    /// ReLU6 as ATen runs it: clamped to `[0, 6]`, and the gradient passes strictly inside
    /// (`x == 0` and `x == 6` get none).
    #[test]
    fn hardtanh_is_a_clamp_and_its_gradient_passes_strictly_inside() {
        let x = [-1.0f32, 0.0, 0.5, 6.0, 7.5, f32::NAN];
        let mut y = [0.0f32; 6];
        super::hardtanh(&x, &mut y, 0.0, 6.0);
        assert_eq!(&y[..5], &[0.0, 0.0, 0.5, 6.0, 6.0]);
        assert!(y[5].is_nan());
        let mut dx = [9.0f32; 6];
        super::hardtanh_backward(&[1.0; 6], &x, &mut dx, 0.0, 6.0);
        assert_eq!(dx, [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    }

    use super::*;

    /// `eq`/`ne` with a number: exact f32 equality, NaN equal to nothing (ATen's
    /// `x == nan` is all false, `x != nan` all true); bool bytes.
    #[test]
    fn comparisons_with_a_number_are_bool_bytes() {
        let x = [0.0f32, -0.0, 1.0, -100.0, f32::NAN];
        assert_eq!(compare_scalar(&x, Cmp::Eq, 0.0), [1, 1, 0, 0, 0]);
        assert_eq!(compare_scalar(&x, Cmp::Ne, 0.0), [0, 0, 1, 1, 1]);
        assert_eq!(compare_scalar(&x, Cmp::Eq, f64::NAN), [0; 5]);
        assert_eq!(compare_scalar(&x, Cmp::Ne, f64::NAN), [1; 5]);
    }

    #[test]
    fn sources_pow_and_tril_by_value() {
        let mut y = [0.0f32; 4];
        pow_scalar(&[-2.0, 0.5, 3.0, 1.5], &mut y, 3.0);
        assert_eq!(y, [-8.0, 0.125, 27.0, 3.375]);
        pow_scalar(&[4.0, 9.0, 2.0, 0.25], &mut y, 0.5);
        assert_eq!(y, [2.0, 3.0, 2f32.sqrt(), 0.5]);
        assert_eq!(arange(1.0, 2.5, 3).collect::<Vec<_>>(), [1.0, 3.5, 6.0]);
        let ones = encode((0..6).map(|_| 1.0), DType::Bool);
        assert_eq!(tril(&ones, 1, &[2, 3], 0), [1, 0, 0, 1, 1, 0]);
        assert_eq!(tril(&ones, 1, &[3, 2], -1), [0, 0, 1, 0, 1, 1]);
        assert_eq!(encode([-1.0, 7.0].into_iter(), DType::I64).len(), 16);
    }

    /// `leaky_relu_backward` against a central difference of `leaky_relu`, away from the
    /// kink at 0, for the default slope and a steep one.
    #[test]
    fn leaky_relu_gradient_matches_finite_differences() {
        let xs: Vec<f32> = (-40..=40).map(|i| i as f32 * 0.1 + 0.013).collect();
        let h = 1e-3f32;
        for slope in [0.01f64, 0.2] {
            let shifted = |d: f32| {
                let x: Vec<f32> = xs.iter().map(|v| v + d).collect();
                let mut y = vec![0.0; x.len()];
                leaky_relu(&x, &mut y, slope);
                y
            };
            let (up, down) = (shifted(h), shifted(-h));
            let mut dx = vec![0.0; xs.len()];
            leaky_relu_backward(&vec![1.0; xs.len()], &xs, &mut dx, slope);
            for (i, &x) in xs.iter().enumerate() {
                let numeric = (f64::from(up[i]) - f64::from(down[i])) / (2.0 * f64::from(h));
                let analytic = f64::from(dx[i]);
                assert!(
                    (numeric - analytic).abs() <= 1e-3,
                    "slope {slope} at {x}: derivative {analytic}, central difference {numeric}"
                );
            }
        }
    }
}
