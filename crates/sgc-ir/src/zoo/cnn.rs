//! Convolutional classifiers: `vgg16`, `resnet50` (torchvision's layouts and names) and
//! `tiny_cnn`.

use super::layers::{bn, conv, conv1x1, conv3x3, dense, Conv, R};
use super::meta;
use crate::train::{TrainBuilder, Var};
use crate::{DType, Graph};

/// Image input `[batch, 3, size, size]` and labels `[batch]`.
fn image_inputs(b: &mut TrainBuilder, batch: u64, size: u64) -> R<(Var, Var)> {
    let x = b.input("images", DType::F32, &[batch, 3, size, size], Some(0))?;
    let labels = b.input("labels", DType::I64, &[batch], Some(0))?;
    Ok((x, labels))
}

/// VGG-16 (configuration D): 13 3x3 convs with biases and ReLU in 5 blocks, each closed
/// by a 2x2 max pool, then fc 25088-4096-4096-1000. 224x224 (the zoo file: batch 64).
pub(super) fn vgg16(batch: u64) -> R<Graph> {
    const BLOCKS: [&[u64]; 5] = [&[64, 64], &[128, 128], &[256; 3], &[512; 3], &[512; 3]];
    let mut b = TrainBuilder::new("vgg16");
    let (mut h, labels) = image_inputs(&mut b, batch, 224)?;
    for (i, block) in BLOCKS.iter().enumerate() {
        for (j, &c) in block.iter().enumerate() {
            let name = format!("conv{}_{}", i + 1, j + 1);
            h = conv(&mut b, &name, h, conv3x3(c, 1, true))?;
            h = b.relu(&format!("{name}.relu"), h)?;
        }
        h = b.max_pool2d(&format!("pool{}", i + 1), h, 2, 2, 0)?;
    }
    h = b.flatten("flatten", h)?;
    for fc in ["fc6", "fc7"] {
        h = dense(&mut b, fc, h, 4096, true)?;
        h = b.relu(&format!("{fc}.relu"), h)?;
    }
    let logits = dense(&mut b, "fc8", h, 1000, true)?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta("vgg16", batch))
}

/// One bottleneck block (v1.5: the stride is on the 3x3 conv), torchvision names.
fn bottleneck(b: &mut TrainBuilder, name: &str, x: Var, width: u64, stride: u64) -> R<Var> {
    let out = 4 * width;
    let cin = b.shape(x)[1];
    let mut h = x;
    let convs = [
        conv1x1(width, 1, false),
        conv3x3(width, stride, false),
        conv1x1(out, 1, false),
    ];
    for (i, c) in convs.into_iter().enumerate() {
        h = conv(b, &format!("{name}.conv{}", i + 1), h, c)?;
        h = bn(b, &format!("{name}.bn{}", i + 1), h)?;
        if i < 2 {
            h = b.relu(&format!("{name}.relu{}", i + 1), h)?;
        }
    }
    let shortcut = if stride != 1 || cin != out {
        let s = conv(
            b,
            &format!("{name}.downsample.0"),
            x,
            conv1x1(out, stride, false),
        )?;
        bn(b, &format!("{name}.downsample.1"), s)?
    } else {
        x
    };
    let sum = b.add(&format!("{name}.add"), h, shortcut)?;
    b.relu(&format!("{name}.relu3"), sum)
}

/// ResNet-50 v1.5 as torchvision builds it, 224x224 (the zoo file: batch 64).
pub(super) fn resnet50(batch: u64) -> R<Graph> {
    const STAGES: [(u64, usize); 4] = [(64, 3), (128, 4), (256, 6), (512, 3)];
    let mut b = TrainBuilder::new("resnet50");
    let (x, labels) = image_inputs(&mut b, batch, 224)?;
    let stem = Conv {
        out: 64,
        kernel: 7,
        stride: 2,
        padding: 3,
        bias: false,
    };
    let mut h = conv(&mut b, "conv1", x, stem)?;
    h = bn(&mut b, "bn1", h)?;
    h = b.relu("relu", h)?;
    h = b.max_pool2d("maxpool", h, 3, 2, 1)?;
    for (s, (width, blocks)) in STAGES.into_iter().enumerate() {
        for i in 0..blocks {
            let stride = if s > 0 && i == 0 { 2 } else { 1 };
            h = bottleneck(&mut b, &format!("layer{}.{i}", s + 1), h, width, stride)?;
        }
    }
    h = b.global_avg_pool("avgpool", h)?;
    let logits = dense(&mut b, "fc", h, 1000, true)?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta("resnet50", batch))
}

/// conv-bn-relu, max pool, conv-bn-relu, global average pool, linear. 3x8x8 (the zoo file: batch 2).
pub(super) fn tiny_cnn(batch: u64) -> R<Graph> {
    let mut b = TrainBuilder::new("tiny_cnn");
    let (mut h, labels) = image_inputs(&mut b, batch, 8)?;
    for (i, c) in [4, 8].into_iter().enumerate() {
        h = conv(&mut b, &format!("conv{}", i + 1), h, conv3x3(c, 1, false))?;
        h = bn(&mut b, &format!("bn{}", i + 1), h)?;
        h = b.relu(&format!("relu{}", i + 1), h)?;
        if i == 0 {
            h = b.max_pool2d("pool1", h, 2, 2, 0)?;
        }
    }
    h = b.global_avg_pool("avgpool", h)?;
    let logits = dense(&mut b, "fc", h, 5, true)?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta("tiny_cnn", batch))
}
