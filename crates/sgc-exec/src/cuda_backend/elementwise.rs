//! Element-wise kernels, bias, scalar arithmetic, broadcasting, activations (the
//! exporter's by [`Unary`] code) and the SGD update (`kernels/elementwise.cu`; the CPU
//! reference is `cpu_backend/elementwise.rs`, same names).

use super::device::{n, Arg, Device, Grid, R};
use super::launch::{broadcast_strides, dims, fill, with_ptrs, Io};
use crate::error::KernelError;
use crate::ops::elementwise::{BinOp, Cmp, Elementwise, Unary};
use sgc_ir::DType;

/// `(dim, inner)` of broadcasting along `axis` of `shape`, both at least 1.
fn axis_split(shape: &[usize], axis: usize) -> (usize, usize) {
    (
        shape[axis].max(1),
        shape[axis + 1..].iter().product::<usize>().max(1),
    )
}

fn unary(d: &Device, name: &'static str, x: u64, y: u64, len: usize) -> R {
    d.launch(
        name,
        Grid::Elements(len),
        &[Arg::Ptr(x), Arg::Ptr(y), n(len)],
    )
}

fn binary(d: &Device, name: &'static str, a: u64, b: u64, y: u64, len: usize) -> R {
    let args = [Arg::Ptr(a), Arg::Ptr(b), Arg::Ptr(y), n(len)];
    d.launch(name, Grid::Elements(len), &args)
}

pub(crate) fn bias_add(d: &Device, x: u64, bias: u64, y: u64, shape: &[usize], axis: usize) -> R {
    let (dim, inner) = axis_split(shape, axis);
    let len: usize = shape.iter().product();
    let args = with_ptrs(&[x, bias, y], [n(len), n(dim), n(inner)]);
    d.launch("bias_add", Grid::Elements(len), &args)
}

pub(crate) fn bias_add_grad(d: &Device, dy: u64, db: u64, shape: &[usize], axis: usize) -> R {
    let dim = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let args = [Arg::Ptr(dy), Arg::Ptr(db), n(outer), n(dim), n(inner)];
    d.launch("bias_add_grad", Grid::Rows(dim), &args)
}

pub(crate) fn add(d: &Device, a: u64, b: u64, y: u64, len: usize) -> R {
    binary(d, "add", a, b, y, len)
}

pub(crate) fn mul(d: &Device, a: u64, b: u64, y: u64, len: usize) -> R {
    binary(d, "mul", a, b, y, len)
}

pub(crate) fn relu(d: &Device, x: u64, y: u64, len: usize) -> R {
    unary(d, "relu", x, y, len)
}

/// `(y, dy)`: the gradient passes where the output is positive.
pub(crate) fn relu_grad(d: &Device, y: u64, dy: u64, dx: u64, len: usize) -> R {
    binary(d, "relu_grad", y, dy, dx, len)
}

pub(crate) fn gelu(d: &Device, x: u64, y: u64, len: usize) -> R {
    unary(d, "gelu", x, y, len)
}

/// `(x, dy)`: `dy * gelu'(x)`.
pub(crate) fn gelu_grad(d: &Device, x: u64, dy: u64, dx: u64, len: usize) -> R {
    binary(d, "gelu_grad", x, dy, dx, len)
}

/// `leaky_relu`: `x` where positive, else `slope * x`.
pub(crate) fn leaky_relu(d: &Device, x: u64, y: u64, slope: f32, len: usize) -> R {
    let args = [Arg::Ptr(x), Arg::Ptr(y), Arg::F32(slope), n(len)];
    d.launch("leaky_relu", Grid::Elements(len), &args)
}

/// `leaky_relu_backward`: `(dy, x) -> dy` where `x` is positive, else `slope * dy`.
pub(crate) fn leaky_relu_backward(
    d: &Device,
    dy: u64,
    x: u64,
    dx: u64,
    slope: f32,
    len: usize,
) -> R {
    let args = with_ptrs(&[dy, x, dx], [Arg::F32(slope), n(len)]);
    d.launch("leaky_relu_backward", Grid::Elements(len), &args)
}

/// `param -= lr * grad`, in place.
pub(crate) fn sgd_update(d: &Device, param: u64, grad: u64, lr: f32, len: usize) -> R {
    let args = [Arg::Ptr(param), Arg::Ptr(grad), Arg::F32(lr), n(len)];
    d.launch("sgd_update", Grid::Elements(len), &args)
}

/// `x + value` on f32, or on i64 (an integer counter) when `is_i64`.
pub(crate) fn add_scalar(d: &Device, x: u64, y: u64, value: f64, is_i64: bool, len: usize) -> R {
    if !is_i64 {
        let args = [Arg::Ptr(x), Arg::Ptr(y), Arg::F32(value as f32), n(len)];
        return d.launch("add_scalar", Grid::Elements(len), &args);
    }
    if value.fract() != 0.0 {
        return Err(KernelError::Operands(format!(
            "adds {value} to an integer tensor"
        )));
    }
    let args = [Arg::Ptr(x), Arg::Ptr(y), Arg::I64(value as i64), n(len)];
    d.launch("add_scalar_i64", Grid::Elements(len), &args)
}

/// `x * value` (`mul_scalar`) or `x / value` (`div_scalar`), by kernel name.
fn scalar(d: &Device, name: &'static str, x: u64, y: u64, value: f32, len: usize) -> R {
    let args = [Arg::Ptr(x), Arg::Ptr(y), Arg::F32(value), n(len)];
    d.launch(name, Grid::Elements(len), &args)
}

/// `threshold_backward`: `(dy, x) -> dy` where `x > threshold`, else 0.
pub(crate) fn threshold_backward(d: &Device, dy: u64, x: u64, dx: u64, t: f32, len: usize) -> R {
    let args = [Arg::Ptr(dy), Arg::Ptr(x), Arg::Ptr(dx), Arg::F32(t), n(len)];
    d.launch("threshold_backward", Grid::Elements(len), &args)
}

/// The kernels' code of `u`: its index in [`Unary::ALL`] (`U_*` in the source).
fn code(u: Unary) -> i32 {
    Unary::ALL.iter().position(|&v| v == u).unwrap_or(0) as i32
}

/// The kernels' code of a binary op (`broadcast_binary`, `int_binary`).
fn binop_code(op: BinOp) -> i32 {
    match op {
        BinOp::Add => 0,
        BinOp::Sub => 1,
        BinOp::Mul => 2,
        BinOp::Div => 3,
    }
}

/// `a op b`, both broadcast to `y [ys]`.
fn broadcast(d: &Device, op: BinOp, io: Io) -> R {
    let ys = io.ops_out[0].shape.as_slice();
    let side = |i: usize| dims(ys, &broadcast_strides(&io.ops_in[i].shape, ys));
    let len: usize = ys.iter().product();
    let args = [
        Arg::Ptr(io.ins[0]),
        Arg::Ptr(io.ins[1]),
        Arg::Ptr(io.outs[0]),
        Arg::I32(binop_code(op)),
        n(len),
        Arg::Dims(side(0)?),
        Arg::Dims(side(1)?),
    ];
    d.launch("broadcast_binary", Grid::Elements(len), &args)
}

/// The kernels' code of a comparison (`cmp_holds` in the source).
fn cmp_code(op: Cmp) -> i32 {
    match op {
        Cmp::Eq => 0,
        Cmp::Ne => 1,
        Cmp::Lt => 2,
        Cmp::Le => 3,
        Cmp::Gt => 4,
        Cmp::Ge => 5,
    }
}

/// `a op b` broadcast to the bool output: two f32 tensors in f32 (`compare_tensor`), any
/// other pair as the CPU reference compares them (`compare_numbers`: two integers exactly,
/// an integer and a float in f64).
fn compare_tensor(d: &Device, op: Cmp, io: Io) -> R {
    let ys = io.ops_out[0].shape.as_slice();
    let side = |i: usize| dims(ys, &broadcast_strides(&io.ops_in[i].shape, ys));
    let len: usize = ys.iter().product();
    let floats = io.ops_in.iter().all(|o| o.dtype == DType::F32);
    let mut args = Vec::with_capacity(9);
    for i in 0..2 {
        args.push(Arg::Ptr(io.ins[i]));
        if !floats {
            args.push(Arg::I32(dtype_code(io.ops_in[i].dtype)?));
        }
    }
    args.extend([
        Arg::Ptr(io.outs[0]),
        Arg::I32(cmp_code(op)),
        n(len),
        Arg::Dims(side(0)?),
        Arg::Dims(side(1)?),
    ]);
    let name = if floats {
        "compare_tensor"
    } else {
        "compare_numbers"
    };
    d.launch(name, Grid::Elements(len), &args)
}

/// `x op other` of an integer tensor (i64, i32, bool, u8): exactly when `other` is a whole
/// number within i64, else in f64, as the CPU reference.
fn compare_int_scalar(d: &Device, op: Cmp, other: f64, io: Io) -> R {
    let whole = other.fract() == 0.0 && other.abs() < 9.0e18;
    let len = io.ops_in[0].numel();
    let args = [
        Arg::Ptr(io.ins[0]),
        Arg::I32(dtype_code(io.ops_in[0].dtype)?),
        Arg::Ptr(io.outs[0]),
        Arg::I32(cmp_code(op)),
        Arg::I32(whole as i32),
        Arg::I64(if whole { other as i64 } else { 0 }),
        Arg::F64(other),
        n(len),
    ];
    d.launch("compare_scalar_int", Grid::Elements(len), &args)
}

/// `a op b` of integer tensors broadcast to the integer output, wrapping (`int_binary`).
fn int_binary(d: &Device, op: BinOp, io: Io) -> R {
    let ys = io.ops_out[0].shape.as_slice();
    let side = |i: usize| dims(ys, &broadcast_strides(&io.ops_in[i].shape, ys));
    if op == BinOp::Div {
        return Err(KernelError::Operands(
            "true division of integer tensors".into(),
        ));
    }
    let len: usize = ys.iter().product();
    let args = [
        Arg::Ptr(io.ins[0]),
        Arg::I32(dtype_code(io.ops_in[0].dtype)?),
        Arg::Ptr(io.ins[1]),
        Arg::I32(dtype_code(io.ops_in[1].dtype)?),
        Arg::Ptr(io.outs[0]),
        Arg::I32(dtype_code(io.ops_out[0].dtype)?),
        Arg::I32(binop_code(op)),
        n(len),
        Arg::Dims(side(0)?),
        Arg::Dims(side(1)?),
    ];
    d.launch("int_binary", Grid::Elements(len), &args)
}

/// The kernels' code of a numeric dtype (`cast`, `int_at`): f32 0, i64 1, i32 2, bool 3,
/// u8 4 (f16 and bf16 arrive widened to f32, `widen.rs`).
fn dtype_code(d: DType) -> Result<i32, KernelError> {
    match d {
        DType::F32 => Ok(0),
        DType::I64 => Ok(1),
        DType::I32 => Ok(2),
        DType::Bool => Ok(3),
        DType::U8 => Ok(4),
        d => Err(KernelError::Operands(format!("{} numbers", d.as_str()))),
    }
}

/// Whether `k` is integer arithmetic: an `add`, `mul` or broadcast binary op of integers.
fn integer_arithmetic(k: &Elementwise, io: &Io) -> Option<BinOp> {
    let op = match k {
        Elementwise::Add => BinOp::Add,
        Elementwise::Mul => BinOp::Mul,
        Elementwise::Broadcast { op } => *op,
        _ => return None,
    };
    let floats = io.ops_in.iter().chain(io.ops_out).any(|o| o.dtype == DType::F32);
    (!floats).then_some(op)
}

/// `where(cond, a, b)`, each broadcast to the output.
fn where_select(d: &Device, io: Io) -> R {
    let ys = io.ops_out[0].shape.as_slice();
    let side = |i: usize| dims(ys, &broadcast_strides(&io.ops_in[i].shape, ys));
    let len: usize = ys.iter().product();
    let mut args: Vec<Arg> = io.ins.iter().chain(io.outs).map(|&p| Arg::Ptr(p)).collect();
    args.push(n(len));
    for i in 0..3 {
        args.push(Arg::Dims(side(i)?));
    }
    d.launch("where_select", Grid::Elements(len), &args)
}

/// The sources: `ones`/`scalar_tensor` (`Constant`) and `arange`, into output `y`.
fn source(d: &Device, k: &Elementwise, y: u64, len: usize) -> R {
    let grid = Grid::Elements(len);
    match k {
        Elementwise::Constant { value, dtype } => match dtype {
            DType::I64 => d.launch(
                "fill_i64",
                grid,
                &[Arg::Ptr(y), Arg::I64(*value as i64), n(len)],
            ),
            DType::Bool => {
                let v = Arg::I32(i32::from(*value != 0.0));
                d.launch("fill_bool", grid, &[Arg::Ptr(y), v, n(len)])
            }
            _ => fill(d, y, *value as f32, len),
        },
        Elementwise::Arange {
            start, step, dtype, ..
        } => {
            let is_i64 = Arg::I32(i32::from(*dtype == DType::I64));
            let args = [
                Arg::Ptr(y),
                is_i64,
                Arg::F32(*start as f32),
                Arg::F32(*step as f32),
                n(len),
            ];
            d.launch("arange", grid, &args)
        }
        _ => Ok(()),
    }
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Elementwise, d: &mut Device, io: Io) -> R {
    use Elementwise as E;
    let shape = || io.ops_in[0].shape.as_slice();
    let numel = || io.ops_in[0].numel();
    let (x, y) = (|| io.ins[0], || io.outs[0]);
    if let Some(op) = integer_arithmetic(k, &io) {
        return int_binary(d, op, io);
    }
    match k {
        E::BiasAdd { axis } => bias_add(d, io.ins[0], io.ins[1], io.outs[0], shape(), *axis),
        E::BiasAddGrad { axis } => bias_add_grad(d, io.ins[0], io.outs[0], shape(), *axis),
        E::Add => add(d, io.ins[0], io.ins[1], io.outs[0], numel()),
        E::Mul => mul(d, io.ins[0], io.ins[1], io.outs[0], numel()),
        E::Relu => relu(d, io.ins[0], io.outs[0], numel()),
        E::ReluGrad => relu_grad(d, io.ins[0], io.ins[1], io.outs[0], numel()),
        E::Gelu => gelu(d, io.ins[0], io.outs[0], numel()),
        E::GeluGrad => gelu_grad(d, io.ins[0], io.ins[1], io.outs[0], numel()),
        E::GeluTanhBackward => gelu_grad(d, io.ins[1], io.ins[0], io.outs[0], numel()),
        E::LeakyRelu { slope } => leaky_relu(d, io.ins[0], io.outs[0], *slope as f32, numel()),
        E::LeakyReluBackward { slope } => {
            leaky_relu_backward(d, io.ins[0], io.ins[1], io.outs[0], *slope as f32, numel())
        }
        E::SgdUpdate { lr } => sgd_update(d, io.ins[0], io.ins[1], *lr as f32, numel()),
        E::AddScalar { value } => {
            let is_i64 = io.ops_in[0].dtype == DType::I64;
            add_scalar(d, x(), y(), *value, is_i64, numel())
        }
        E::MulScalar { value } => scalar(d, "mul_scalar", x(), y(), *value as f32, numel()),
        E::DivScalar { value } => scalar(d, "div_scalar", x(), y(), *value as f32, numel()),
        E::ThresholdBackward { threshold } => {
            threshold_backward(d, io.ins[0], io.ins[1], y(), *threshold as f32, numel())
        }
        E::Pointwise(u) => {
            let args = [Arg::Ptr(x()), Arg::Ptr(y()), Arg::I32(code(*u)), n(numel())];
            d.launch("pointwise", Grid::Elements(numel()), &args)
        }
        E::PointwiseBackward(u) => {
            let args = [
                Arg::Ptr(io.ins[0]),
                Arg::Ptr(io.ins[1]),
                Arg::Ptr(y()),
                Arg::I32(code(*u)),
                n(numel()),
            ];
            d.launch("pointwise_backward", Grid::Elements(numel()), &args)
        }
        E::Broadcast { op } => broadcast(d, *op, io),
        E::Fill { value } => fill(d, y(), *value as f32, io.ops_out[0].numel()),
        E::Zeros { .. } => fill(d, y(), 0.0, io.ops_out[0].numel()),
        E::PowScalar { exponent } => scalar(d, "pow_scalar", x(), y(), *exponent as f32, numel()),
        E::Constant { .. } | E::Arange { .. } | E::Lifted => {
            source(d, k, y(), io.ops_out[0].numel())
        }
        E::Tril { diagonal, dtype } => {
            let s = shape();
            let (rows, cols) = (s[s.len() - 2], s[s.len() - 1]);
            let size = Arg::I32(dtype.size() as i32);
            let args = [Arg::Ptr(x()), Arg::Ptr(y()), size, n(rows), n(cols)];
            let args = [&args[..], &[Arg::I64(*diagonal), n(numel())]].concat();
            d.launch("tril", Grid::Elements(numel()), &args)
        }
        E::Where => where_select(d, io),
        E::Hardtanh { min, max } => {
            let args = [Arg::Ptr(x()), Arg::Ptr(y()), Arg::F32(*min as f32), Arg::F32(*max as f32), n(numel())];
            d.launch("hardtanh", Grid::Elements(numel()), &args)
        }
        E::HardtanhBackward { min, max } => {
            let (lo, hi) = (Arg::F32(*min as f32), Arg::F32(*max as f32));
            let args = with_ptrs(&[io.ins[0], io.ins[1], y()], [lo, hi, n(numel())]);
            d.launch("hardtanh_backward", Grid::Elements(numel()), &args)
        }
        E::CompareScalar { op, other } if io.ops_in[0].dtype != DType::F32 => {
            compare_int_scalar(d, *op, *other, io)
        }
        E::CompareScalar { op, other } => {
            let args = [
                Arg::Ptr(x()),
                Arg::Ptr(y()),
                Arg::I32(cmp_code(*op)),
                Arg::F32(*other as f32),
                n(numel()),
            ];
            d.launch("compare_scalar", Grid::Elements(numel()), &args)
        }
        E::CompareTensor { op } => compare_tensor(d, *op, io),
        // f16 and bf16 operands arrive as f32 (`widen.rs`): the operands' own dtypes.
        E::Cast { .. } => {
            let (from, to) = (dtype_code(io.ops_in[0].dtype)?, dtype_code(io.ops_out[0].dtype)?);
            let args = [Arg::Ptr(x()), Arg::I32(from), Arg::Ptr(y()), Arg::I32(to), n(numel())];
            d.launch("cast", Grid::Elements(numel()), &args)
        }
    }
}
