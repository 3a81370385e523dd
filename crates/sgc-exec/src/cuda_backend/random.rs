//! Random draws: `bernoulli` and dropout (`kernels/random.cu`; the CPU reference is
//! `cpu_backend/random.rs`). The stream of an op is keyed by its seed and its run, counted
//! per seed in the device as the CPU backend counts them, and each element's draw is
//! computed where it is needed (SplitMix64 is counter-based), so both backends draw the
//! same values and planned and unplanned runs agree.

use super::device::{n, Arg, Device, Grid, R};
use super::launch::{with_ptrs, Io};
use crate::ops::random::Random;

/// The draws below `p` as an integer bound on their 53 random bits: `u < p` exactly when
/// `bits < ceil(p * 2^53)` (scaling by a power of two is exact).
fn below(p: f64) -> i64 {
    let scale = (1u64 << 53) as f64;
    (p * scale).ceil().clamp(0.0, scale) as i64
}

/// The stream state of `seed` at its next run (the CPU's `bernoulli` key), counting it.
fn next_state(d: &mut Device, seed: u64) -> i64 {
    let run = d.draws.entry(seed).or_insert(0);
    let state = seed ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    *run += 1;
    state as i64
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Random, d: &mut Device, io: Io) -> R {
    let len = io.ops_in[0].numel();
    let grid = Grid::Elements(len);
    match k {
        Random::Bernoulli { p, seed } => {
            let state = next_state(d, *seed);
            let len = io.ops_out[0].numel();
            let args = [
                Arg::Ptr(io.outs[0]),
                Arg::I64(state),
                Arg::I64(below(*p)),
                n(len),
            ];
            d.launch("bernoulli", Grid::Elements(len), &args)
        }
        Random::Dropout { p, seed } => {
            let state = next_state(d, *seed);
            let scale = (1.0 / (1.0 - *p)) as f32;
            let args = [
                Arg::Ptr(io.ins[0]),
                Arg::Ptr(io.outs[0]),
                Arg::Ptr(io.outs[1]),
                Arg::I64(state),
                Arg::I64(below(1.0 - *p)),
                Arg::F32(scale),
                n(len),
            ];
            d.launch("dropout", grid, &args)
        }
        Random::DropoutBackward { scale } => {
            let args = with_ptrs(
                &[io.ins[0], io.ins[1], io.outs[0]],
                [Arg::F32(*scale as f32), n(len)],
            );
            d.launch("dropout_backward", grid, &args)
        }
        Random::MaskMul => {
            let args = with_ptrs(&[io.ins[0], io.ins[1], io.outs[0]], [n(len)]);
            d.launch("mask_mul", grid, &args)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::below;

    /// `bits < below(p)` is `bits / 2^53 < p`, the CPU's test, at and around the edges.
    #[test]
    fn the_integer_bound_is_the_float_comparison() {
        let scale = (1u64 << 53) as f64;
        for p in [0.0, 1e-9, 0.1, 0.5, 0.8, 1.0 - 1e-12, 1.0, 1.5, -0.2] {
            let b = below(p);
            for bits in [0i64, 1, b - 1, b, b + 1, (1 << 53) - 1] {
                if !(0..1 << 53).contains(&bits) {
                    continue;
                }
                assert_eq!(bits < b, (bits as f64) / scale < p, "p {p}, bits {bits}");
            }
        }
    }
}
