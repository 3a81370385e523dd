//! f16 and bf16 on the CUDA backend: the [`Widening`] hooks (`crate::widening` holds the
//! method). A scratch buffer is one device allocation, freed in stream order; the
//! conversions are kernels (`half_to_f32`, exact; `f32_to_half`, to nearest with ties to
//! even, in integer arithmetic that gives the CPU backend's bits).

use super::device::{n, Arg, Grid};
use super::runtime::{Buffer, CudaBackend};
use crate::backend::{BufferId, Operand};
use crate::error::ExecError;
use crate::kernel::Kernel;
use crate::widening::{is_half, Widening};
use sgc_ir::DType;

impl Widening for CudaBackend {
    fn scratch_mark(&self) -> usize {
        self.buffers.len()
    }

    fn release_scratch(&mut self, mark: usize) -> Result<(), ExecError> {
        for b in self.buffers.drain(mark..).collect::<Vec<_>>() {
            self.dev.engine().free(b.ptr).map_err(|e| Self::err(e.to_string()))?;
        }
        Ok(())
    }

    fn widen_copy(&mut self, kernel: &Kernel, o: &Operand) -> Result<Operand, ExecError> {
        let bytes = o.bytes() * 2;
        let ptr = self
            .dev
            .engine()
            .alloc(bytes as usize, false)
            .map_err(|e| Self::err(format!("a {bytes}-byte f32 copy of a half tensor: {e}")))?;
        self.buffers.push(Buffer { ptr, len: bytes });
        let wide = Operand {
            buffer: BufferId(self.buffers.len() - 1),
            offset: 0,
            dtype: DType::F32,
            ..o.clone()
        };
        self.convert(kernel, (o, &wide), "half_to_f32")?;
        Ok(wide)
    }

    fn narrow_into(&mut self, kernel: &Kernel, wide: &Operand, o: &Operand) -> Result<(), ExecError> {
        self.convert(kernel, (wide, o), "f32_to_half")
    }
}

impl CudaBackend {
    /// Every element of the stored tensor of `from` converted into `to` by `kernel_name`
    /// (`half_to_f32` or `f32_to_half`; the half side's dtype picks f16 or bf16).
    fn convert(
        &mut self,
        kernel: &Kernel,
        (from, to): (&Operand, &Operand),
        kernel_name: &'static str,
    ) -> Result<(), ExecError> {
        let half = if is_half(from.dtype) { from } else { to };
        let len = (half.bytes() / 2) as usize;
        // The stored tensors' extents, views or not.
        let whole = |o: &Operand| Operand {
            view: None,
            shape: vec![len],
            ..o.clone()
        };
        let (src, dst) = (self.address(&whole(from))?, self.address(&whole(to))?);
        let bf16 = Arg::I32(i32::from(half.dtype == DType::Bf16));
        let args = [Arg::Ptr(src), Arg::Ptr(dst), bf16, n(len)];
        self.dev
            .launch(kernel_name, Grid::Elements(len), &args)
            .map_err(|e| Self::kernel_err(kernel, e))
    }
}
