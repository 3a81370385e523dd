//! U-Net (Ronneberger et al.) with batch norm: 4 down levels of double 3x3 conv-BN-ReLU
//! and 2x2 max pool from 64 channels, a 1024-channel bottom, and 4 up levels of nearest
//! 2x upsampling + 3x3 conv (halving the channels), concatenation with the matching skip,
//! and a double conv; a 1x1 conv gives per-pixel class logits. Batch 8, 3x256x256,
//! 2 classes. The logits are transposed to NHWC for the cross-entropy over pixels.

use super::layers::{bn, conv, conv1x1, conv3x3, R};
use super::meta;
use crate::train::{TrainBuilder, Var};
use crate::{DType, Graph};

const SIZE: u64 = 256;
const CLASSES: u64 = 2;
const LEVELS: [u64; 4] = [64, 128, 256, 512];

/// (3x3 conv without bias, batch norm, ReLU) twice.
fn double_conv(b: &mut TrainBuilder, name: &str, x: Var, out: u64) -> R<Var> {
    let mut h = x;
    for i in 1..=2 {
        h = conv(b, &format!("{name}.conv{i}"), h, conv3x3(out, 1, false))?;
        h = bn(b, &format!("{name}.bn{i}"), h)?;
        h = b.relu(&format!("{name}.relu{i}"), h)?;
    }
    Ok(h)
}

/// The U-Net at the given batch size (the zoo file: batch 8).
pub(super) fn unet(batch: u64) -> R<Graph> {
    let mut b = TrainBuilder::new("unet");
    let x = b.input("images", DType::F32, &[batch, 3, SIZE, SIZE], Some(0))?;
    let labels = b.input("labels", DType::I64, &[batch, SIZE, SIZE], Some(0))?;
    let mut skips = Vec::new();
    let mut h = x;
    for (i, &c) in LEVELS.iter().enumerate() {
        let name = format!("down{}", i + 1);
        h = double_conv(&mut b, &name, h, c)?;
        skips.push(h);
        h = b.max_pool2d(&format!("{name}.pool"), h, 2, 2, 0)?;
    }
    h = double_conv(&mut b, "bottom", h, 2 * LEVELS[3])?;
    for (i, &c) in LEVELS.iter().enumerate().rev() {
        let name = format!("up{}", i + 1);
        h = b.upsample_nearest2x(&format!("{name}.upsample"), h)?;
        h = conv(&mut b, &format!("{name}.upconv"), h, conv3x3(c, 1, true))?;
        h = b.concat(&format!("{name}.concat"), &[skips[i], h], 1)?;
        h = double_conv(&mut b, &name, h, c)?;
    }
    let logits = conv(&mut b, "head", h, conv1x1(CLASSES, 1, true))?;
    let logits = b.transpose("head.nhwc", logits, &[0, 2, 3, 1])?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta("unet", batch))
}
