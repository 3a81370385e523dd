//! Random draws: `bernoulli` and dropout, from a counter-based stream keyed by the
//! op's seed and its run, so planned and unplanned runs draw the same values.

use super::{CpuBackend, Host};
use crate::backend::{Backend, Operand};
use crate::error::ExecError;
use crate::ops::random::Random;
use crate::real::Real;
use sgc_ir::DType;

/// `bernoulli.p`: ones with probability `p`, from the counter-based stream of `seed` at
/// run `run` (SplitMix64; 53 random bits per draw).
pub(crate) fn bernoulli<T: Real>(y: &mut [T], p: f64, seed: u64, run: u64) {
    let mut rng = crate::init::SplitMix64::new(seed ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for v in y.iter_mut() {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        *v = if u < p { T::one() } else { T::zero() };
    }
}

/// Runs a kernel of the family, through copies of its operands (masks are bytes; the
/// stream position of each seed lives in the backend), in f64 when its data is f64.
pub(super) fn launch(
    be: &mut CpuBackend,
    k: &Random,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<(), ExecError> {
    if outputs.first().is_some_and(|o| o.dtype == DType::F64) {
        launch_in::<f64>(be, k, inputs, outputs)
    } else {
        launch_in::<f32>(be, k, inputs, outputs)
    }
}

fn launch_in<T: Host>(
    be: &mut CpuBackend,
    k: &Random,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<(), ExecError> {
    match k {
        Random::Dropout { p, seed } => {
            let x = T::read(be, &inputs[0])?;
            let mut keep = vec![T::zero(); x.len()];
            be.draw(&mut keep, 1.0 - *p, *seed);
            let scale = T::of(1.0 / (1.0 - *p));
            let y: Vec<T> = x.iter().zip(&keep).map(|(&v, &k)| v * k * scale).collect();
            let mask: Vec<u8> = keep.iter().map(|&k| u8::from(k != T::zero())).collect();
            be.write_floats(&outputs[0], &y)?;
            be.write(outputs[1].buffer, outputs[1].offset, &mask)?;
        }
        Random::DropoutBackward { scale } => {
            let dy = T::read(be, &inputs[0])?;
            let mask = be.bytes(&inputs[1])?;
            let scale = T::of(*scale);
            let dx: Vec<T> = dy
                .iter()
                .zip(&mask)
                .map(|(&g, &m)| if m != 0 { g * scale } else { T::zero() })
                .collect();
            be.write_floats(&outputs[0], &dx)?;
        }
        Random::MaskMul => {
            let x = T::read(be, &inputs[0])?;
            let mask = be.bytes(&inputs[1])?;
            // `x * mask` as PyTorch computes it: the mask promoted to 1.0 or 0.0 (so a
            // masked negative or infinite value gives -0.0 or NaN, not 0.0).
            let y: Vec<T> = x
                .iter()
                .zip(&mask)
                .map(|(&v, &m)| v * if m != 0 { T::one() } else { T::zero() })
                .collect();
            be.write_floats(&outputs[0], &y)?;
        }
        Random::Bernoulli { p, seed } => {
            let mut y = vec![T::zero(); outputs[0].numel()];
            be.draw(&mut y, *p, *seed);
            be.write_floats(&outputs[0], &y)?;
        }
    }
    Ok(())
}

impl CpuBackend {
    /// Fills `y` with ones of probability `p` from the stream of `seed`, at its next run.
    fn draw<T: Real>(&mut self, y: &mut [T], p: f64, seed: u64) {
        let run = self.draws.entry(seed).or_insert(0);
        bernoulli(y, p, seed, *run);
        *run += 1;
    }
}
