//! Random draws: `bernoulli` and dropout, from a counter-based stream keyed by the
//! op's seed and its run, so planned and unplanned runs draw the same values.

use super::CpuBackend;
use crate::backend::{Backend, Operand};
use crate::error::ExecError;
use crate::ops::random::Random;

/// `bernoulli.p`: ones with probability `p`, from the counter-based stream of `seed` at
/// run `run` (SplitMix64; 53 random bits per draw).
pub(crate) fn bernoulli(y: &mut [f32], p: f64, seed: u64, run: u64) {
    let mut rng = crate::init::SplitMix64::new(seed ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for v in y.iter_mut() {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        *v = if u < p { 1.0 } else { 0.0 };
    }
}

/// Runs a kernel of the family, through copies of its operands (masks are bytes; the
/// stream position of each seed lives in the backend).
pub(super) fn launch(
    be: &mut CpuBackend,
    k: &Random,
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<(), ExecError> {
    match k {
        Random::Dropout { p, seed } => {
            let x = be.f32_of(&inputs[0])?;
            let mut keep = vec![0.0f32; x.len()];
            be.draw(&mut keep, 1.0 - *p, *seed);
            let scale = (1.0 / (1.0 - *p)) as f32;
            let y: Vec<f32> = x.iter().zip(&keep).map(|(v, k)| v * k * scale).collect();
            let mask: Vec<u8> = keep.iter().map(|&k| u8::from(k != 0.0)).collect();
            be.write_f32(&outputs[0], &y)?;
            be.write(outputs[1].buffer, outputs[1].offset, &mask)?;
        }
        Random::DropoutBackward { scale } => {
            let dy = be.f32_of(&inputs[0])?;
            let mask = be.bytes(&inputs[1])?;
            let dx: Vec<f32> = dy
                .iter()
                .zip(&mask)
                .map(|(g, &m)| if m != 0 { g * scale } else { 0.0 })
                .collect();
            be.write_f32(&outputs[0], &dx)?;
        }
        Random::MaskMul => {
            let x = be.f32_of(&inputs[0])?;
            let mask = be.bytes(&inputs[1])?;
            // `x * mask` as PyTorch computes it: the mask promoted to 1.0 or 0.0 (so a
            // masked negative or infinite value gives -0.0 or NaN, not 0.0).
            let y: Vec<f32> = x
                .iter()
                .zip(&mask)
                .map(|(v, &m)| v * f32::from(u8::from(m != 0)))
                .collect();
            be.write_f32(&outputs[0], &y)?;
        }
        Random::Bernoulli { p, seed } => {
            let mut y = vec![0.0f32; outputs[0].numel()];
            be.draw(&mut y, *p, *seed);
            be.write_f32(&outputs[0], &y)?;
        }
    }
    Ok(())
}

impl CpuBackend {
    /// Fills `y` with ones of probability `p` from the stream of `seed`, at its next run.
    fn draw(&mut self, y: &mut [f32], p: f64, seed: u64) {
        let run = self.draws.entry(seed).or_insert(0);
        bernoulli(y, p, seed, *run);
        *run += 1;
    }
}
