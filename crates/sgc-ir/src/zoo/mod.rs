//! The model zoo: training-step graphs of well-known models, built with [`crate::train`].
//!
//! `sgc zoo --out graphs/` writes each model as `graphs/<name>.json`; the repository
//! checks the files in and a test fails when they differ from what this module builds.
//!
//! Every model is the full step (forward, backward, SGD update) at a fixed batch size,
//! in f32. Parameter counts match the published ones: ResNet-50 25,557,032, VGG-16
//! 138,357,544, GPT-2 small 124,439,808. Modelling choices that differ from the reference
//! implementations without changing the parameter count or the memory picture much:
//! no dropout; batch norm without running statistics; GPT-2's fused `c_attn` projection
//! is three linears (q, k, v) and position ids are an input; VGG-16 has no adaptive
//! average pool (the identity at 224x224). `meta` records the batch size, the model and
//! the source; data inputs carry `batch_dim`.

mod cnn;
mod layers;
mod mlp;
mod recurrent;
mod shapes;
mod transformer;
mod unet;

use crate::train::TrainError;
use crate::Graph;
use serde_json::{json, Map, Value};

/// One zoo model.
pub struct ZooModel {
    /// File stem: the model is written to `<name>.json`.
    pub name: &'static str,
    /// One line for listings.
    pub description: &'static str,
    /// Builds the full training step (forward, backward, SGD update) at [`Self::batch`].
    pub build: fn() -> Graph,
    /// The batch size of the zoo file.
    pub batch: u64,
    /// Builds the same model at another batch size (`build_at(batch)` equals `build()`).
    pub build_at: fn(u64) -> Graph,
}

/// A [`ZooModel`] entry: `model!(name, batch, builder, description)`, where
/// `builder(batch)` builds the model at any batch size.
macro_rules! model {
    ($name:literal, $batch:literal, $builder:path, $description:expr) => {
        ZooModel {
            name: $name,
            description: $description,
            build: || built($builder($batch)),
            batch: $batch,
            build_at: |batch| built($builder(batch)),
        }
    };
}

/// Every zoo model, in a fixed order.
pub fn models() -> Vec<ZooModel> {
    vec![
        model!(
            "tiny_mlp",
            4,
            mlp::tiny_mlp,
            "MLP 8-16-16-4, batch 4 (runs on a CPU in milliseconds)"
        ),
        model!(
            "tiny_cnn",
            2,
            cnn::tiny_cnn,
            "2 convs with batch norm, max pool, global average pool, linear; batch 2, 3x8x8"
        ),
        model!(
            "tiny_transformer",
            2,
            transformer::tiny_transformer,
            "GPT-style decoder: 2 layers, 2 heads, d=16, seq 8, vocab 32, batch 2"
        ),
        model!(
            "mlp",
            64,
            mlp::mlp,
            "MLP 784-1024-1024-10 with ReLU, batch 64"
        ),
        model!(
            "chain1000",
            128,
            mlp::chain1000,
            "1,000 linear+ReLU layers of width 256 (no bias), batch 128: planner scaling"
        ),
        model!(
            "vgg16",
            64,
            cnn::vgg16,
            "VGG-16 (138.4M params), batch 64, 3x224x224, no dropout"
        ),
        model!(
            "resnet50",
            64,
            cnn::resnet50,
            "ResNet-50 v1.5 (25.6M params), batch 64, 3x224x224"
        ),
        model!(
            "unet",
            8,
            unet::unet,
            "U-Net, 4 levels, base 64 channels, batch 8, 3x256x256 -> 2 classes"
        ),
        model!(
            "gpt2",
            8,
            transformer::gpt2,
            "GPT-2 small (124.4M params), 12 layers, d=768, seq 1024, batch 8"
        ),
    ]
}

/// A graph too large to check in, for the planner's scaling benchmark: GPT-2 small's
/// blocks (d=768, 12 heads, seq 1024) stacked `layers` deep, at `batch`. 128 layers make
/// about 10,600 ops.
pub fn gpt2_deep(layers: usize, batch: u64) -> Graph {
    built(transformer::gpt2_deep(layers, batch))
}

/// A recurrent graph too large to check in, for the planner's scaling benchmark: an
/// LSTM-like cell (hidden 256, vocabulary 1,000) unrolled over `steps` time steps, weights
/// shared, at `batch`. About 80 ops per time step: 1,250 steps make about 100,000 ops.
pub fn lstm_deep(steps: usize, batch: u64) -> Graph {
    built(recurrent::lstm_deep(steps, batch))
}

/// A deep, narrow graph too large to check in, for the planner's scaling benchmark: a
/// chain of `layers` small transformer-like layers (activations `[batch, 512, 512]` and
/// `[batch, 512, 2048]`, f32), 24 ops each with the backward and the update: 4,170 layers
/// make about 100,000 ops.
pub fn deep_narrow(layers: usize, batch: u64) -> Graph {
    built(shapes::deep_narrow(layers, batch))
}

/// A wide, shallow graph too large to check in, for the planner's scaling benchmark:
/// `branches` independent two-layer branches (width 256) of one input, concatenated and
/// read by one linear head, at `batch`. About 10 ops per branch: 10,000 branches make
/// about 100,000 ops.
pub fn wide_shallow(branches: usize, batch: u64) -> Graph {
    built(shapes::wide_shallow(branches, batch))
}

/// Zoo models are fixed programs: a build error is a bug in this module, caught by the
/// zoo tests, so it stops with the builder's message.
fn built(result: Result<Graph, TrainError>) -> Graph {
    result.unwrap_or_else(|e| panic!("zoo model is malformed: {e}"))
}

/// The `meta` object of a zoo graph.
fn meta(model: &str, batch_size: u64) -> Map<String, Value> {
    let v = json!({ "batch_size": batch_size, "source": "sgc zoo", "model": model });
    v.as_object().cloned().unwrap_or_default()
}
