//! Graphs of two shapes for the planner's scaling benchmark, sized by one count:
//!
//! - `deep_narrow`: a long chain of small transformer-like layers (the shape where one
//!   block is cheap and the search's per-block bookkeeping shows). Each layer is
//!   `r = softmax(x W_a) + x`, then `y = gelu(ln(r) W_1) W_2 + r`, with activations
//!   `[batch, 512, 512]` and `[batch, 512, 2048]` in f32: 8 forward ops, 24 in all with
//!   the backward and the update.
//! - `wide_shallow`: many independent two-layer branches reading one input, concatenated
//!   and read by one linear head (the shape where the graph is a few ops deep and
//!   thousands wide).

use super::layers::{dense, ln, R};
use super::meta;
use crate::train::{TrainBuilder, Var};
use crate::{DType, Graph};

/// Model width of `deep_narrow` (and its sequence length).
const WIDTH: u64 = 512;
/// Hidden width of `deep_narrow`'s MLP.
const HIDDEN: u64 = 2048;
/// Width of one `wide_shallow` branch.
const BRANCH: u64 = 256;
/// Classes of the heads.
const CLASSES: u64 = 16;

/// `layers` small transformer-like layers in a chain at `batch`.
pub(super) fn deep_narrow(layers: usize, batch: u64) -> R<Graph> {
    let mut b = TrainBuilder::new("deep_narrow");
    let mut x = b.input("x", DType::F32, &[batch, WIDTH, WIDTH], Some(0))?;
    for i in 0..layers {
        x = narrow_layer(&mut b, &format!("l{i}"), x)?;
    }
    let logits = dense(&mut b, "head", x, CLASSES, false)?;
    let labels = b.input("labels", DType::I64, &[batch, WIDTH], Some(0))?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta("deep_narrow", batch))
}

/// One `deep_narrow` layer: `r = softmax(x W_a) + x; y = gelu(ln(r) W_1) W_2 + r`.
fn narrow_layer(b: &mut TrainBuilder, name: &str, x: Var) -> R<Var> {
    let s = dense(b, &format!("{name}.attn"), x, WIDTH, false)?;
    let p = b.softmax(&format!("{name}.softmax"), s, 1.0, false)?;
    let r = b.add(&format!("{name}.res1"), p, x)?;
    let n = ln(b, &format!("{name}.ln"), r)?;
    let u = dense(b, &format!("{name}.fc1"), n, HIDDEN, false)?;
    let g = b.gelu(&format!("{name}.gelu"), u)?;
    let v = dense(b, &format!("{name}.fc2"), g, WIDTH, false)?;
    b.add(&format!("{name}.res2"), v, r)
}

/// `branches` two-layer branches `gelu(x W_k) V_k` of one input `[batch, 256]` at `batch`,
/// concatenated along the features and read by a linear head.
pub(super) fn wide_shallow(branches: usize, batch: u64) -> R<Graph> {
    let mut b = TrainBuilder::new("wide_shallow");
    let x = b.input("x", DType::F32, &[batch, BRANCH], Some(0))?;
    let mut outs = Vec::with_capacity(branches);
    for k in 0..branches {
        let h = dense(&mut b, &format!("b{k}.fc1"), x, BRANCH, false)?;
        let a = b.gelu(&format!("b{k}.gelu"), h)?;
        outs.push(dense(&mut b, &format!("b{k}.fc2"), a, BRANCH, false)?);
    }
    let all = b.concat("concat", &outs, 1)?;
    let logits = dense(&mut b, "head", all, CLASSES, false)?;
    let labels = b.input("labels", DType::I64, &[batch], Some(0))?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta("wide_shallow", batch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::OpKind;

    /// Each `deep_narrow` layer adds 24 ops (8 forward, 11 backward, 5 updates), each
    /// `wide_shallow` branch 10; the forward of a layer is the op sequence.
    #[test]
    fn the_shapes_grow_by_a_fixed_count_per_layer_and_branch() {
        let ops = |g: R<Graph>| g.expect("the model builds").num_ops();
        assert_eq!(ops(deep_narrow(3, 1)) - ops(deep_narrow(2, 1)), 24);
        assert_eq!(ops(deep_narrow(12, 1)) - ops(deep_narrow(2, 1)), 240);
        assert_eq!(ops(wide_shallow(7, 2)) - ops(wide_shallow(2, 2)), 50);
        let g = deep_narrow(1, 1).expect("one layer builds");
        let forward: Vec<Option<OpKind>> = g.ops().iter().take(8).map(|o| o.kind).collect();
        use OpKind::*;
        let want = [MatMul, Softmax, Add, LayerNorm, MatMul, Gelu, MatMul, Add];
        assert_eq!(forward, want.map(Some));
    }
}
