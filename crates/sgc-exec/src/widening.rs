//! f16 and bf16 on every backend: each kernel is written once, over the float types it
//! computes in (f32, and f64 on the CPU backend: `crate::real`), and computes
//! half-precision tensors in f32, as PyTorch's CPU kernels compute them in their `opmath`
//! type (float) and round once at the end.
//!
//! An op with a half-precision operand runs on f32 copies. Each such operand, its whole
//! stored tensor (so a view keeps its steps, element for element), is widened exactly into
//! a scratch buffer; the kernel runs on the scratch operands through the backend's ordinary
//! path; each operand it wrote is rounded back to its dtype, to nearest with ties to even.
//! An input that is exactly an output (an in-place pair, or the parameter `sgd_update`
//! writes) shares one scratch buffer, so it is updated in place as on f32. The scratch
//! buffers are freed before the launch returns and are not counted in
//! [`crate::backend::AllocStats`]: they are the backends' way of computing, not memory of
//! the plan.
//!
//! Mixed operands (a bf16 product added to an f32 bias, as autocast traces) promote as
//! ATen's type promotion does, since the f32 result of exactly widened operands is what
//! ATen computes for an f32 output. This module holds the bookkeeping; each backend says
//! how it makes, fills and frees a scratch buffer ([`Widening`]: `cpu_backend/widen.rs`
//! with the `half` crate, `cuda_backend/widen.rs` with kernels that give the same bits).

use crate::backend::{Backend, Operand};
use crate::error::ExecError;
use crate::kernel::{Elementwise, FamilyKernel, Kernel};
use sgc_ir::DType;

/// Whether `d` is a half-precision float (f16 or bf16).
pub(crate) fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::Bf16)
}

/// What a backend provides for [`run_widened`].
pub(crate) trait Widening: Backend {
    /// A mark of the scratch buffers made so far, to free back to.
    fn scratch_mark(&self) -> usize;

    /// Frees every scratch buffer made since `mark`.
    fn release_scratch(&mut self, mark: usize) -> Result<(), ExecError>;

    /// A new f32 operand like `o` (its view and shape) over a scratch buffer holding `o`'s
    /// whole stored tensor, widened exactly.
    fn widen_copy(&mut self, kernel: &Kernel, o: &Operand) -> Result<Operand, ExecError>;

    /// The f32 scratch `wide` rounded into the half-precision operand `o`.
    fn narrow_into(
        &mut self,
        kernel: &Kernel,
        wide: &Operand,
        o: &Operand,
    ) -> Result<(), ExecError>;
}

/// Runs `kernel` on f32 copies of its half-precision operands (see the module docs);
/// `false` when it has none, for the caller to run it as it is.
pub(crate) fn run_widened<B: Widening>(
    b: &mut B,
    kernel: &Kernel,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<bool, ExecError> {
    if !inputs.iter().chain(outputs).any(|o| is_half(o.dtype)) {
        return Ok(false);
    }
    let mark = b.scratch_mark();
    let done = widened(b, kernel, inputs, outputs);
    let freed = b.release_scratch(mark);
    done.and(freed).map(|()| true)
}

fn widened<B: Widening>(
    b: &mut B,
    kernel: &Kernel,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<(), ExecError> {
    // (operand, its f32 copy): one copy per distinct operand.
    let mut scratch: Vec<(Operand, Operand)> = Vec::new();
    let mut wide = |ops: &[Operand]| -> Result<Vec<Operand>, ExecError> {
        ops.iter()
            .map(|o| scratch_of(b, kernel, o, &mut scratch))
            .collect()
    };
    let (ins, outs) = (wide(inputs)?, wide(outputs)?);
    // A cast to a half dtype writes its f32 copy: the same cast, to f32.
    let inner = match kernel.op() {
        FamilyKernel::Elementwise(Elementwise::Cast { to }) if is_half(*to) => {
            kernel.with_op(Elementwise::Cast { to: DType::F32 })
        }
        _ => kernel.clone(),
    };
    b.run_kernel(&inner, &ins, &outs)?;
    let written = if kernel.writes_first_input() {
        &inputs[..1]
    } else {
        outputs
    };
    for o in written.iter().filter(|o| is_half(o.dtype)) {
        let w = scratch_of(b, kernel, o, &mut scratch)?;
        b.narrow_into(kernel, &w, o)?;
    }
    Ok(())
}

/// `o` itself, or for a half-precision operand its f32 copy (made on first use).
fn scratch_of<B: Widening>(
    b: &mut B,
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
    let w = b.widen_copy(kernel, o)?;
    scratch.push((o.clone(), w.clone()));
    Ok(w)
}
