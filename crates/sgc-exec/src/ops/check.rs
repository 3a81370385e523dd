//! The vocabulary of the families' operand checks: each returns the [`KernelError`] that
//! says what does not fit.

use crate::error::KernelError;
pub(crate) use crate::operand::broadcasts;
use crate::operand::Operand;

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

/// Output length of a sliding window, if the window fits.
pub(crate) fn window_out(len: usize, k: usize, stride: usize, pad: usize) -> Option<usize> {
    let padded = len + 2 * pad;
    (stride > 0 && k > 0 && padded >= k).then(|| (padded - k) / stride + 1)
}

/// The results a mask asks for, in order, have the wanted shapes.
pub(crate) fn masked(mask: &[bool; 3], wanted: &[&[usize]; 3], outs: &[Operand]) -> R {
    let present = (0..3).filter(|&i| mask[i]);
    for (slot, i) in present.enumerate() {
        eq("result", &outs[slot].shape, wanted[i])?;
    }
    Ok(())
}
