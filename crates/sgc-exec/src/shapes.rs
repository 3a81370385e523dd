//! Operand checks of every kernel: counts, dtypes and shapes, run on every op before the
//! first step so that kernels index in bounds by construction. The counts and dtypes come
//! from the kernel's family ([`crate::ops::Family`]), which checks its own shapes; the
//! helpers here are the vocabulary of those checks.

use crate::backend::Operand;
use crate::kernel::Kernel;
use crate::ops::{Slot, VARIADIC};
use crate::KernelError;
use sgc_ir::DType;

pub(crate) type R = Result<(), KernelError>;

pub(crate) fn expect(cond: bool, msg: impl FnOnce() -> String) -> R {
    if cond {
        Ok(())
    } else {
        Err(KernelError::Operands(msg()))
    }
}

pub(crate) fn eq(what: &'static str, found: &[usize], expected: &[usize]) -> R {
    if found == expected {
        return Ok(());
    }
    Err(KernelError::Shape {
        what,
        found: found.to_vec(),
        expected: expected.to_vec(),
    })
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

/// Output length of a sliding window, if the window fits.
pub(crate) fn window_out(len: usize, k: usize, stride: usize, pad: usize) -> Option<usize> {
    let padded = len + 2 * pad;
    (stride > 0 && k > 0 && padded >= k).then(|| (padded - k) / stride + 1)
}

/// Whether input slot `i` of `k` holds integer indices rather than f32 data.
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
    if k.family().any_dtype() {
        let d = ins[0].dtype;
        for (i, o) in ins.iter().chain(outs).enumerate() {
            let ok = matches!(d, DType::F32 | DType::I64) && o.dtype == d;
            dtype(
                format!("operand {i}"),
                ok,
                "f32 like the others, or i64 like the others",
                o.dtype,
            )?;
        }
    } else {
        for (i, o) in ins.iter().enumerate() {
            let slot = k.family().input(i);
            if slot == Slot::Index {
                let ok = matches!(o.dtype, DType::I64 | DType::I32);
                dtype(format!("input {i}"), ok, "i64 or i32 indices", o.dtype)?;
            } else if slot == Slot::Mask {
                dtype(
                    format!("input {i}"),
                    o.dtype == DType::Bool,
                    "a bool mask",
                    o.dtype,
                )?;
            } else {
                dtype(format!("input {i}"), o.dtype == DType::F32, "f32", o.dtype)?;
            }
        }
        for (i, o) in outs.iter().enumerate() {
            let want = k.family().output_dtype(i);
            dtype(
                format!("output {i}"),
                o.dtype == want,
                want.as_str(),
                o.dtype,
            )?;
        }
    }
    k.family().check_shapes(ins, outs)
}

/// Whether `x` broadcasts to `y`: axes aligned on the right, each equal or 1 in `x`.
pub(crate) fn broadcasts(x: &[usize], y: &[usize]) -> bool {
    x.len() <= y.len()
        && x.iter()
            .rev()
            .zip(y.iter().rev())
            .all(|(a, b)| a == b || *a == 1)
}

/// The results a mask asks for, in order, have the wanted shapes.
pub(crate) fn masked(mask: &[bool; 3], wanted: &[&[usize]; 3], outs: &[Operand]) -> R {
    let present = (0..3).filter(|&i| mask[i]);
    for (slot, i) in present.enumerate() {
        eq("result", &outs[slot].shape, wanted[i])?;
    }
    Ok(())
}
