//! f16 and bf16 on the CPU backend: every kernel computes in f32, as PyTorch's CPU kernels
//! compute half-precision tensors in their `opmath` type (float) and round once at the end.
//!
//! An op with a half-precision operand runs on f32 copies. Each such operand, its whole
//! stored tensor (so a view keeps its steps, element for element), is widened exactly into
//! a scratch buffer; the kernel runs on the scratch operands through the ordinary path; each
//! operand it wrote is rounded back to its dtype, to nearest with ties to even. An input
//! that is exactly an output (an in-place pair, or the parameter `sgd_update` writes) shares
//! one scratch buffer, so it is updated in place as on f32. The scratch buffers are freed
//! before the launch returns and are not counted in [`crate::backend::AllocStats`]: they
//! are this backend's way of computing, not memory of the plan.
//!
//! So a kernel is written once, over f32, and runs for f32, f16 and bf16 alike; mixed
//! operands (a bf16 product added to an f32 bias, as autocast traces) promote as ATen's
//! type promotion does, since the f32 result of exactly widened operands is what ATen
//! computes for an f32 output.

use super::{decode_f32, CpuBackend};
use crate::backend::{Backend, BufferId, Operand};
use crate::error::ExecError;
use crate::kernel::Kernel;
use half::{bf16, f16};
use sgc_ir::DType;

/// Whether `d` is a half-precision float (f16 or bf16).
pub(crate) fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::Bf16)
}

/// The f32 values of the little-endian `bytes` of `dtype` (f16 or bf16), widened exactly.
pub(crate) fn widen(bytes: &[u8], dtype: DType) -> Vec<f32> {
    let pairs = bytes.chunks_exact(2).map(|c| [c[0], c[1]]);
    match dtype {
        DType::F16 => pairs.map(|b| f16::from_le_bytes(b).to_f32()).collect(),
        _ => pairs.map(|b| bf16::from_le_bytes(b).to_f32()).collect(),
    }
}

/// `values` rounded to `dtype` (f16 or bf16, to nearest, ties to even), as little-endian
/// bytes.
pub(crate) fn narrow(values: &[f32], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F16 => values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect(),
        _ => values
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect(),
    }
}

impl CpuBackend {
    /// Runs `kernel` on f32 copies of its half-precision operands (see the module docs);
    /// `false` when it has none, for the caller to run it as it is.
    pub(super) fn run_widened(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<bool, ExecError> {
        if !inputs.iter().chain(outputs).any(|o| is_half(o.dtype)) {
            return Ok(false);
        }
        let mark = self.buffers.len();
        let done = self.widened(kernel, inputs, outputs);
        self.buffers.truncate(mark);
        done.map(|()| true)
    }

    fn widened(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<(), ExecError> {
        let mut scratch: Vec<(Operand, Operand)> = Vec::new();
        let ins = inputs
            .iter()
            .map(|o| self.scratch_of(o, &mut scratch))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = outputs
            .iter()
            .map(|o| self.scratch_of(o, &mut scratch))
            .collect::<Result<Vec<_>, _>>()?;
        self.run_kernel(kernel, &ins, &outs)?;
        let written = if kernel.writes_first_input() {
            &inputs[..1]
        } else {
            outputs
        };
        for o in written.iter().filter(|o| is_half(o.dtype)) {
            let wide = scratch
                .iter()
                .find(|(k, _)| k == o)
                .map(|(_, w)| w.clone())
                .ok_or_else(|| ExecError::backend(super::NAME, "a written operand lost"))?;
            let values = decode_f32(&self.bytes(&wide)?);
            self.write(o.buffer, o.offset, &narrow(&values, o.dtype))?;
        }
        Ok(())
    }

    /// `o` itself, or for a half-precision operand its f32 copy in a scratch buffer (one per
    /// distinct operand).
    fn scratch_of(
        &mut self,
        o: &Operand,
        scratch: &mut Vec<(Operand, Operand)>,
    ) -> Result<Operand, ExecError> {
        if !is_half(o.dtype) {
            return Ok(o.clone());
        }
        if let Some((_, w)) = scratch.iter().find(|(k, _)| k == o) {
            return Ok(w.clone());
        }
        let values = widen(&self.bytes(o)?, o.dtype);
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: `words` spans at least `bytes.len()` bytes; u64 has no invalid bit patterns.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                words.as_mut_ptr() as *mut u8,
                bytes.len(),
            )
        };
        self.buffers.push((words, bytes.len() as u64));
        let wide = Operand {
            buffer: BufferId(self.buffers.len() - 1),
            offset: 0,
            dtype: DType::F32,
            ..o.clone()
        };
        scratch.push((o.clone(), wide.clone()));
        Ok(wide)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_is_exact_and_narrowing_rounds_to_nearest_even() {
        for dtype in [DType::F16, DType::Bf16] {
            let values = [0.0f32, -1.5, 3.140625, 65280.0, f32::INFINITY];
            let bytes = narrow(&values, dtype);
            assert_eq!(widen(&bytes, dtype), values, "{dtype:?}");
        }
        // 1 + 2^-8 lies halfway between the bf16 values 1 and 1 + 2^-7: ties go to even (1).
        let tie = 1.0 + 2f32.powi(-8);
        assert_eq!(widen(&narrow(&[tie], DType::Bf16), DType::Bf16), [1.0]);
        let above = 1.0 + 2f32.powi(-8) + 2f32.powi(-12);
        assert_eq!(
            widen(&narrow(&[above], DType::Bf16), DType::Bf16),
            [1.0 + 2f32.powi(-7)]
        );
        assert!(widen(&narrow(&[f32::NAN], DType::F16), DType::F16)[0].is_nan());
    }
}
