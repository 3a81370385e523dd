//! Operand checks of every kernel: counts, dtypes and shapes, run on every op before the
//! first step so that kernels index in bounds by construction. The counts and dtypes come
//! from the kernel's family ([`crate::ops::Family`]), which checks its own shapes.

use crate::error::KernelError;
use crate::kernel::Kernel;
use crate::operand::Operand;
use crate::ops::{Slot, VARIADIC};
use sgc_ir::DType;

type R = Result<(), KernelError>;

/// A floating dtype a data slot takes: f32, f64, or f16/bf16 (which a backend that holds
/// them computes in f32).
pub(crate) fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::Bf16)
}

fn dtype(what: String, ok: bool, expected: &'static str, found: DType) -> R {
    if ok {
        return Ok(());
    }
    Err(KernelError::DType {
        what,
        expected,
        found: found.as_str(),
    })
}

/// Whether input slot `i` of `k` holds integer indices rather than float data.
pub fn is_index_slot(k: &Kernel, i: usize) -> bool {
    k.family().input(i) == Slot::Index
}

/// Checks the operands of `k`; the error says what does not fit.
pub fn check(k: &Kernel, ins: &[Operand], outs: &[Operand]) -> R {
    let (n_in, n_out) = k.family().arity();
    let n_out = if n_out == VARIADIC {
        outs.len().max(1)
    } else {
        n_out
    };
    let n_in = n_in.unwrap_or(ins.len().max(1));
    for (what, expected, found) in [("inputs", n_in, ins.len()), ("outputs", n_out, outs.len())] {
        if expected != found {
            return Err(KernelError::Arity {
                what,
                expected,
                found,
            });
        }
    }
    let ints = k.family().ints();
    // The dtype of the first data operand: the others are floats with it, or alike.
    let data = ins
        .iter()
        .enumerate()
        .find(|(i, _)| k.family().input(*i) == Slot::Data)
        .map(|(_, o)| o.dtype)
        .or(outs.first().map(|o| o.dtype));
    let integers = data.filter(|d| !is_float(*d) && !ints.is_empty());
    if let Some(d) = integers {
        let what = "a float like the others, or an integer like the others";
        dtype("operand 0".into(), ints.contains(&d), what, d)?;
    }
    for (i, o) in ins.iter().enumerate() {
        let slot = k.family().input(i);
        if slot == Slot::Data && integers.is_some() {
            let what = format!("input {i}");
            dtype(
                what,
                Some(o.dtype) == integers,
                "an integer like the others",
                o.dtype,
            )?;
        } else if slot == Slot::Index {
            let ok = matches!(o.dtype, DType::I64 | DType::I32);
            dtype(format!("input {i}"), ok, "i64 or i32 indices", o.dtype)?;
        } else if slot == Slot::Any {
            continue; // the backend's `holds` was asked for every operand
        } else if slot == Slot::Mask {
            dtype(
                format!("input {i}"),
                o.dtype == DType::Bool,
                "a bool mask",
                o.dtype,
            )?;
        } else {
            let what = format!("input {i}");
            dtype(what, is_float(o.dtype), "f32, f64, f16 or bf16", o.dtype)?;
        }
    }
    for (i, o) in outs.iter().enumerate() {
        // Data (f32) outputs take any float: the kernel computes in f32 and the backend
        // rounds to the output's dtype.
        let want = k.family().output_dtype(i);
        if want == DType::F32 && integers.is_some() {
            let what = format!("output {i}");
            dtype(
                what,
                Some(o.dtype) == integers,
                "an integer like the inputs",
                o.dtype,
            )?;
            continue;
        }
        let ok = o.dtype == want || (want == DType::F32 && is_float(o.dtype));
        let expected = if want == DType::F32 {
            "f32, f64, f16 or bf16"
        } else {
            want.as_str()
        };
        dtype(format!("output {i}"), ok, expected, o.dtype)?;
    }
    same_width(k, ins, outs)?;
    k.family().check_shapes(ins, outs)
}

/// A kernel computes in f64 when one of its float data operands is f64: its other inputs
/// are promoted (widened exactly, as PyTorch promotes), and its float outputs must be f64,
/// the promoted type (an f32 output would need a rounding PyTorch's op does not do).
fn same_width(k: &Kernel, ins: &[Operand], outs: &[Operand]) -> R {
    let data_in = ins
        .iter()
        .enumerate()
        .filter(|(i, _)| k.family().input(*i) == Slot::Data)
        .map(|(_, o)| o.dtype);
    let data_out: Vec<DType> = outs
        .iter()
        .enumerate()
        .filter(|(i, _)| k.family().output_dtype(*i) == DType::F32)
        .map(|(_, o)| o.dtype)
        .filter(|&d| is_float(d))
        .collect();
    let wide = data_in
        .chain(data_out.iter().copied())
        .any(|d| d == DType::F64);
    match data_out.iter().find(|&&d| d != DType::F64) {
        Some(&other) if wide => Err(KernelError::DType {
            what: "a float output beside an f64 operand".to_string(),
            expected: "f64 (a kernel with an f64 operand computes in f64)",
            found: other.as_str(),
        }),
        _ => Ok(()),
    }
}
