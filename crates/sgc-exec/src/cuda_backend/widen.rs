//! f16 and bf16 on the CUDA backend, as on the CPU backend (`cpu_backend/widen.rs`): every
//! kernel computes in f32. An op with a half-precision operand runs on f32 copies: each
//! such operand, its whole stored tensor (so a view keeps its steps), is widened exactly
//! into a device scratch buffer (`half_to_f32`); the kernel runs on the scratch operands
//! through the ordinary path; each operand it wrote is rounded back to its dtype, to
//! nearest with ties to even (`f32_to_half`, integer arithmetic that gives the CPU
//! backend's bits). An input that is exactly an output (an in-place pair, the parameter
//! `sgd_update` writes) shares one scratch buffer. Scratch buffers are freed (in stream
//! order) before the launch returns and are not counted in the allocator's statistics.

use super::device::{n, Arg, Grid};
use super::runtime::{Buffer, CudaBackend};
use crate::backend::{Backend, BufferId, Operand};
use crate::error::ExecError;
use crate::kernel::{Elementwise, FamilyKernel, Kernel};
use sgc_ir::DType;

fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::Bf16)
}

impl CudaBackend {
    /// Runs `kernel` on f32 copies of its half-precision operands; `false` when it has
    /// none, for the caller to run it as it is.
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
        for b in self.buffers.drain(mark..).collect::<Vec<_>>() {
            self.dev.engine().free(b.ptr).map_err(|e| Self::err(e.to_string()))?;
        }
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
            .map(|o| self.scratch_of(kernel, o, &mut scratch))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = outputs
            .iter()
            .map(|o| self.scratch_of(kernel, o, &mut scratch))
            .collect::<Result<Vec<_>, _>>()?;
        // A cast to a half dtype writes its f32 copy: the same cast, to f32.
        let inner = match kernel.op() {
            FamilyKernel::Elementwise(Elementwise::Cast { to }) if is_half(*to) => {
                kernel.with_op(Elementwise::Cast { to: DType::F32 })
            }
            _ => kernel.clone(),
        };
        self.run_kernel(&inner, &ins, &outs)?;
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
                .ok_or_else(|| Self::err("a written operand lost"))?;
            self.convert(kernel, (&wide, o), "f32_to_half")?;
        }
        Ok(())
    }

    /// `o` itself, or for a half-precision operand its f32 copy in a scratch buffer (one
    /// per distinct operand).
    fn scratch_of(
        &mut self,
        kernel: &Kernel,
        o: &Operand,
        scratch: &mut Vec<(Operand, Operand)>,
    ) -> Result<Operand, ExecError> {
        if !is_half(o.dtype) {
            return Ok(o.clone());
        }
        if let Some((_, w)) = scratch.iter().find(|(k, _)| k == o) {
            return Ok(w.clone());
        }
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
        scratch.push((o.clone(), wide.clone()));
        Ok(wide)
    }

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
