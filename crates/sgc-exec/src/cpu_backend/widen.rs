//! f16 and bf16 on the CPU backend: the [`Widening`] hooks (`crate::widening` holds the
//! method), with the `half` crate's conversions: widening is exact, narrowing rounds to
//! nearest with ties to even.

use super::{decode_f32, CpuBackend};
use crate::backend::{Backend, BufferId, Operand};
use crate::error::ExecError;
use crate::kernel::Kernel;
use crate::widening::Widening;
use half::{bf16, f16};
use sgc_ir::DType;

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

impl Widening for CpuBackend {
    fn scratch_mark(&self) -> usize {
        self.buffers.len()
    }

    fn release_scratch(&mut self, mark: usize) -> Result<(), ExecError> {
        self.buffers.truncate(mark);
        Ok(())
    }

    fn widen_copy(&mut self, _: &Kernel, o: &Operand) -> Result<Operand, ExecError> {
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
        Ok(Operand {
            buffer: BufferId(self.buffers.len() - 1),
            offset: 0,
            dtype: DType::F32,
            ..o.clone()
        })
    }

    fn narrow_into(&mut self, _: &Kernel, wide: &Operand, o: &Operand) -> Result<(), ExecError> {
        let values = decode_f32(&self.bytes(wide)?);
        self.write(o.buffer, o.offset, &narrow(&values, o.dtype))
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
