//! Multi-layer perceptrons: `mlp`, `tiny_mlp` and the 1,000-layer `chain1000`.

use super::layers::{dense, R};
use super::meta;
use crate::train::TrainBuilder;
use crate::{DType, Graph};

/// Linear+ReLU layers of the given widths (biases on), a linear head, cross-entropy.
fn perceptron(model: &str, batch: u64, widths: &[u64], classes: u64) -> R<Graph> {
    let mut b = TrainBuilder::new(model);
    let x = b.input("x", DType::F32, &[batch, widths[0]], Some(0))?;
    let labels = b.input("labels", DType::I64, &[batch], Some(0))?;
    let mut h = x;
    for (i, &w) in widths[1..].iter().enumerate() {
        h = dense(&mut b, &format!("fc{}", i + 1), h, w, true)?;
        h = b.relu(&format!("relu{}", i + 1), h)?;
    }
    let logits = dense(&mut b, &format!("fc{}", widths.len()), h, classes, true)?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta(model, batch))
}

/// MLP 784-1024-1024-10 (the zoo file: batch 64).
pub(super) fn mlp(batch: u64) -> R<Graph> {
    perceptron("mlp", batch, &[784, 1024, 1024], 10)
}

/// MLP 8-16-16-4 (the zoo file: batch 4).
pub(super) fn tiny_mlp(batch: u64) -> R<Graph> {
    perceptron("tiny_mlp", batch, &[8, 16, 16], 4)
}

/// 1,000 bias-free linear+ReLU layers of width 256 and a linear head (the zoo
/// file: batch 128).
pub(super) fn chain1000(batch: u64) -> R<Graph> {
    const WIDTH: u64 = 256;
    let mut b = TrainBuilder::new("chain1000");
    let x = b.input("x", DType::F32, &[batch, WIDTH], Some(0))?;
    let labels = b.input("labels", DType::I64, &[batch], Some(0))?;
    let mut h = x;
    for i in 0..1000 {
        h = dense(&mut b, &format!("layer{i}.fc"), h, WIDTH, false)?;
        h = b.relu(&format!("layer{i}.relu"), h)?;
    }
    let logits = dense(&mut b, "head", h, 10, true)?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta("chain1000", batch))
}
