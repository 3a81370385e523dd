//! Random valid training-step graphs, and random damage to graph texts, for tests and fuzzing
//! (feature `testgen`).
//!
//! [`random_graph_def`] builds a graph the way a tracer sees a training step:
//! 1. **Forward.** Inputs (data batches, sometimes one that no op reads) feed a sequence of
//!    layers. Each layer reads the chain's head, or forks from the value before it (a later
//!    layer that reads both closes a diamond), sometimes a value from anywhere earlier (a long
//!    skip connection), sometimes the same tensor twice, parameters (new or tied), views of
//!    parameters, a constant or a state tensor. Layers may be views (`alias_of`) of an
//!    activation or of an input, may have several outputs (extra outputs are read later or
//!    never), may be non-recomputable (random draws), may be dead branches nothing reads.
//! 2. **Loss and backward** (optional). A scalar loss, then one backward op per forward op
//!    that reaches the loss, in reverse order: it reads the gradients of the op's outputs and
//!    some of the op's saved inputs and writes one partial gradient per differentiable input.
//!    Gradients with several parts are summed by an `accumulate` op first; a gradient is
//!    sometimes reshaped through a view.
//! 3. **Update** (optional). One non-recomputable op per parameter reads the parameter, its
//!    gradient and its optimizer state and writes the new values, which are graph outputs.
//!
//! Costs come from `time_us`, `flops`, neither, or a mix; phases are explicit, inferred from
//! `loss`, or absent; `meta` and `attrs` keys come in shuffled order. Everything is drawn
//! from [`SplitMix64`] seeded by the caller, so a seed always gives the same graph.
//!
//! [`random_train_graph`] (module `train`) builds training steps the CPU backend runs, for
//! checks that compare a planned run with the unplanned one.
//!
//! [`mutate_bytes`] and [`mutate_json`] damage a valid graph text for loader property tests;
//! [`check_error_locates`] is what those tests and the fuzz target ask of every error.

mod train;

pub use train::{random_train_graph, TrainGenConfig};

use crate::error::GraphError;
use crate::graph::{Graph, GraphDef, OpDef, TensorDef};
use crate::ids::{DType, Phase, TensorKind};
use crate::ops::OpKind;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Op types the op table ([`OpKind`]) does not know, on purpose: planning treats a file's op
/// types as opaque, and generated graphs keep exercising that (an effectful one among them
/// keeps the file's `recomputable` flag).
const OPAQUE_VIEW: &str = "view";
const OPAQUE_DROPOUT: &str = "dropout";
const OPAQUE_RNG: &str = "rng_uniform";
const OPAQUE_SPLIT: &str = "split";
const OPAQUE_POOL_WITH_INDICES: &str = "max_pool_with_indices";
const OPAQUE_UPDATE: &str = "adam_step";

/// The example graph of `docs/graph-format.md`, verbatim.
pub const DOC_EXAMPLE: &str = r#"{
  "format": "sgc-graph", "version": 1, "name": "tiny",
  "tensors": [
    {"name": "x",  "dtype": "f32", "shape": [8, 4], "kind": "input", "batch_dim": 0},
    {"name": "w",  "dtype": "f32", "shape": [4, 4], "kind": "param"},
    {"name": "h",  "dtype": "f32", "shape": [8, 4]},
    {"name": "y",  "dtype": "f32", "shape": [8, 4]},
    {"name": "loss", "dtype": "f32", "shape": []},
    {"name": "dy", "dtype": "f32", "shape": [8, 4]},
    {"name": "dh", "dtype": "f32", "shape": [8, 4]},
    {"name": "dw", "dtype": "f32", "shape": [4, 4]}
  ],
  "ops": [
    {"name": "fc",   "op": "matmul",      "inputs": ["x", "w"], "outputs": ["h"], "flops": 256},
    {"name": "act",  "op": "relu",        "inputs": ["h"], "outputs": ["y"]},
    {"name": "mse",  "op": "mean_square", "inputs": ["y"], "outputs": ["loss"]},
    {"name": "mse_grad",  "op": "mean_square_grad", "inputs": ["y"], "outputs": ["dy"]},
    {"name": "act_grad",  "op": "relu_grad",   "inputs": ["y", "dy"], "outputs": ["dh"]},
    {"name": "fc_grad_w", "op": "matmul_tn",   "inputs": ["x", "dh"], "outputs": ["dw"], "flops": 256}
  ],
  "outputs": ["loss", "dw"],
  "loss": "loss"
}"#;

/// The largest storage size that tensor `name` of [`DOC_EXAMPLE`] may have: the storage
/// sizes of all its tensors must add up within 64 bits.
pub fn doc_example_room_for(name: &str) -> u64 {
    let others: u64 = crate::format::from_str(DOC_EXAMPLE)
        .expect("the doc example is valid")
        .tensors()
        .iter()
        .filter(|t| t.name != name)
        .map(|t| t.size)
        .sum();
    u64::MAX - others
}

pub use crate::rng::SplitMix64;

/// Size and shape knobs of [`random_graph_def`]. Probabilities are per layer unless said.
#[derive(Clone, Debug, PartialEq)]
pub struct GenConfig {
    /// Forward layers (ops), drawn from `min_layers..=max_layers` (at least 1).
    pub min_layers: usize,
    pub max_layers: usize,
    /// Data inputs, drawn from `1..=max_inputs`.
    pub max_inputs: usize,
    /// Batch size, drawn from `1..=max_batch`; tensors are `[batch, width]` or smaller.
    pub max_batch: u64,
    /// Feature width, drawn per tensor from `1..=max_width`.
    pub max_width: u64,
    /// Fork from the value before the chain's head, or merge it in (diamonds).
    pub diamond_prob: f64,
    /// Also read a value from anywhere earlier (long skip connection).
    pub skip_prob: f64,
    /// The layer is a view (`alias_of`) of an activation, an input or a parameter.
    pub view_prob: f64,
    /// The layer has 2 or 3 outputs.
    pub multi_output_prob: f64,
    /// The layer is not recomputable.
    pub non_recomputable_prob: f64,
    /// The layer's output (or an extra output) is never read.
    pub unused_prob: f64,
    /// The layer reads one tensor twice.
    pub repeat_input_prob: f64,
    /// The layer reads a parameter.
    pub param_prob: f64,
    /// Per graph: a loss and a backward pass.
    pub training_prob: f64,
    /// Per training graph: an update phase.
    pub update_prob: f64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            min_layers: 1,
            max_layers: 40,
            max_inputs: 3,
            max_batch: 64,
            max_width: 256,
            diamond_prob: 0.2,
            skip_prob: 0.1,
            view_prob: 0.12,
            multi_output_prob: 0.12,
            non_recomputable_prob: 0.08,
            unused_prob: 0.06,
            repeat_input_prob: 0.05,
            param_prob: 0.5,
            training_prob: 0.85,
            update_prob: 0.4,
        }
    }
}

impl GenConfig {
    /// Small graphs (1 to 8 layers, tiny tensors) for exhaustive checks and fast properties.
    pub fn small() -> Self {
        GenConfig {
            max_layers: 8,
            max_inputs: 2,
            max_batch: 4,
            max_width: 8,
            ..GenConfig::default()
        }
    }

    /// Larger graphs (50 to 200 layers) for scaling tests.
    pub fn large() -> Self {
        GenConfig {
            min_layers: 50,
            max_layers: 200,
            ..GenConfig::default()
        }
    }
}

/// A random valid graph. Panics only if the generator itself is wrong (a bug, not bad input).
pub fn random_graph(seed: u64, cfg: &GenConfig) -> Graph {
    let def = random_graph_def(seed, cfg);
    match Graph::from_def(def) {
        Ok(g) => g,
        Err(e) => panic!("testgen seed {seed}: generated an invalid graph: {e}"),
    }
}

/// A random valid graph definition (see the module docs for what it contains).
pub fn random_graph_def(seed: u64, cfg: &GenConfig) -> GraphDef {
    Gen::new(seed, cfg).build(seed)
}

/// How a graph states op costs.
#[derive(Clone, Copy, PartialEq)]
enum CostMode {
    TimeUs,
    Flops,
    Absent,
    Mixed,
}

/// A forward op as the backward pass needs it.
struct Fwd {
    /// Distinct tensors it reads that take a gradient (activations and parameters).
    diff_inputs: Vec<usize>,
    /// Everything it reads (saved values a backward op may read).
    inputs: Vec<usize>,
    outputs: Vec<usize>,
}

struct Gen<'c> {
    rng: SplitMix64,
    cfg: &'c GenConfig,
    def: GraphDef,
    batch: u64,
    cost_mode: CostMode,
    /// Per op: the phase it would have; written out for some graphs.
    phases: Vec<Phase>,
    explicit_phases: u8,
    /// Values later layers may read (tensor indices).
    pool: Vec<usize>,
    inputs: Vec<usize>,
    params: Vec<usize>,
    persistent_extras: Vec<usize>,
    fwd: Vec<Fwd>,
    /// Partial gradients of each tensor.
    grads: Vec<Vec<usize>>,
}

impl<'c> Gen<'c> {
    fn new(seed: u64, cfg: &'c GenConfig) -> Self {
        let mut rng = SplitMix64::new(seed);
        let batch = rng.range(1, cfg.max_batch.max(1));
        let cost_mode = *rng.pick(&[
            CostMode::TimeUs,
            CostMode::Flops,
            CostMode::Absent,
            CostMode::Mixed,
        ]);
        let explicit_phases = rng.below(3) as u8;
        Gen {
            rng,
            cfg,
            def: GraphDef::default(),
            batch,
            cost_mode,
            phases: Vec::new(),
            explicit_phases,
            pool: Vec::new(),
            inputs: Vec::new(),
            params: Vec::new(),
            persistent_extras: Vec::new(),
            fwd: Vec::new(),
            grads: Vec::new(),
        }
    }

    fn build(mut self, seed: u64) -> GraphDef {
        self.def.name = self.rng.chance(0.7).then(|| format!("gen-{seed:016x}"));
        self.add_inputs();
        let layers = self.rng.range(
            self.cfg.min_layers.max(1) as u64,
            self.cfg.max_layers as u64,
        );
        for _ in 0..layers {
            self.layer();
        }
        let head = self.head();
        if self.rng.chance(self.cfg.training_prob) {
            self.training(head);
        } else if self.rng.chance(0.7) {
            self.def.outputs.push(self.def.tensors[head].name.clone());
        }
        self.finish_phases();
        self.def.meta = self.rng.chance(0.5).then(|| self.meta(seed));
        self.def
    }

    // ----- tensors -----

    fn tensor(&mut self, name: String, shape: Vec<u64>, kind: TensorKind) -> usize {
        let dtype = if self.rng.chance(0.8) {
            DType::F32
        } else {
            *self
                .rng
                .pick(&[DType::F16, DType::Bf16, DType::F64, DType::I8])
        };
        let mut t = TensorDef::new(name, dtype, shape);
        t.kind = kind;
        if t.shape.first() == Some(&self.batch) && self.rng.chance(0.3) {
            t.batch_dim = Some(0);
        }
        if self.rng.chance(0.05) {
            let plain: u64 = t.shape.iter().product::<u64>() * dtype.size();
            t.bytes = Some(plain + self.rng.below(64));
        }
        self.def.tensors.push(t);
        self.grads.push(Vec::new());
        self.def.tensors.len() - 1
    }

    fn act_shape(&mut self) -> Vec<u64> {
        let w = self.rng.range(1, self.cfg.max_width.max(1));
        match self.rng.below(8) {
            0 => vec![w],
            1 => vec![self.batch, w, self.rng.range(1, 4)],
            _ => vec![self.batch, w],
        }
    }

    fn like(&mut self, name: String, of: usize, kind: TensorKind) -> usize {
        let shape = self.def.tensors[of].shape.clone();
        self.tensor(name, shape, kind)
    }

    fn name(&self, t: usize) -> String {
        self.def.tensors[t].name.clone()
    }

    fn add_inputs(&mut self) {
        let n = self.rng.range(1, self.cfg.max_inputs.max(1) as u64);
        for i in 0..n {
            let shape = self.act_shape();
            let x = self.tensor(format!("x{i}"), shape, TensorKind::Input);
            self.inputs.push(x);
            self.pool.push(x);
        }
        if self.rng.chance(self.cfg.unused_prob) {
            let shape = self.act_shape();
            self.tensor("x_unused".into(), shape, TensorKind::Input);
        }
        if self.rng.chance(0.3) {
            let c = self.tensor("c0".into(), vec![], TensorKind::Const);
            self.persistent_extras.push(c);
        }
        if self.rng.chance(0.2) {
            let shape = vec![self.rng.range(1, self.cfg.max_width.max(1))];
            let s = self.tensor("running_stats".into(), shape, TensorKind::State);
            self.persistent_extras.push(s);
        }
    }

    fn param(&mut self) -> usize {
        if !self.params.is_empty() && self.rng.chance(0.2) {
            return *self.rng.pick(&self.params); // tied weight
        }
        let i = self.params.len();
        let shape = vec![
            self.rng.range(1, self.cfg.max_width.max(1)),
            self.rng.range(1, self.cfg.max_width.max(1)),
        ];
        let w = self.tensor(format!("w{i}"), shape, TensorKind::Param);
        self.params.push(w);
        w
    }

    // ----- ops -----

    fn op(&mut self, kind: &str, inputs: &[usize], outputs: &[usize], phase: Phase) -> usize {
        let names = |ts: &[usize]| ts.iter().map(|&t| self.name(t)).collect();
        let mut op = OpDef::new(
            format!("{kind}{}", self.def.ops.len()),
            kind,
            names(inputs),
            names(outputs),
        );
        let elems: u64 = inputs.iter().chain(outputs).map(|&t| self.numel(t)).sum();
        self.set_cost(&mut op, elems);
        if self.rng.chance(0.15) {
            op.attrs = Some(self.attrs());
        }
        self.def.ops.push(op);
        self.phases.push(phase);
        self.def.ops.len() - 1
    }

    fn numel(&self, t: usize) -> u64 {
        self.def.tensors[t].shape.iter().product()
    }

    /// A cost that grows with the elements the op touches, so that recomputing a big op
    /// costs more than a small one, in the graph's cost mode.
    fn set_cost(&mut self, op: &mut OpDef, elems: u64) {
        let mode = match self.cost_mode {
            CostMode::Mixed => {
                *self
                    .rng
                    .pick(&[CostMode::TimeUs, CostMode::Flops, CostMode::Absent])
            }
            m => m,
        };
        match mode {
            CostMode::TimeUs => op.time_us = Some(self.time_us(elems)),
            CostMode::Flops => op.flops = Some((elems * self.rng.range(1, 64)) as f64),
            _ => {}
        }
    }

    /// Decimal fractions (`0.1` steps) and tiny values (`1e-7` steps) that only survive an
    /// exact round trip; sometimes zero.
    fn time_us(&mut self, elems: u64) -> f64 {
        match self.rng.below(8) {
            0 => self.rng.range(1, 9) as f64 * 1e-7,
            1 => 0.0,
            _ => (elems * self.rng.range(1, 20)) as f64 / 10.0,
        }
    }

    fn attrs(&mut self) -> Map<String, Value> {
        let mut items = vec![
            ("stride", Value::from(self.rng.range(1, 3))),
            ("axis", Value::from(-1)),
            ("padding", Value::from("same")),
            ("eps", Value::from(1e-5)),
        ];
        self.shuffle(&mut items);
        items.truncate(self.rng.range(1, 4) as usize);
        items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn meta(&mut self, seed: u64) -> Map<String, Value> {
        let mut items = vec![
            ("source", Value::from("sgc-ir testgen")),
            ("seed", Value::from(seed)),
            ("batch_size", Value::from(self.batch)),
            ("zeta", Value::from(0.1)),
        ];
        self.shuffle(&mut items);
        items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.rng.index(i + 1);
            items.swap(i, j);
        }
    }

    // ----- forward -----

    /// The chain's head: the latest readable value.
    fn head(&self) -> usize {
        *self.pool.last().expect("the pool starts with the inputs")
    }

    fn layer(&mut self) {
        if self.rng.chance(self.cfg.view_prob) {
            self.view_layer();
        } else {
            self.compute_layer();
        }
    }

    fn view_layer(&mut self) {
        let base = if self.rng.chance(0.2) {
            *self.rng.pick(&self.inputs)
        } else {
            self.head()
        };
        let n = self.def.tensors.len();
        let v = self.like(format!("v{n}"), base, TensorKind::Activation);
        self.def.tensors[v].alias_of = Some(self.name(base));
        self.def.tensors[v].bytes = None;
        let kind = *self.rng.pick(&[
            OPAQUE_VIEW,
            OpKind::Reshape.name(),
            OpKind::Transpose.name(),
            OpKind::Slice.name(),
        ]);
        self.op(kind, &[base], &[v], Phase::Forward);
        self.record_fwd(vec![base], vec![v]);
        self.pool.push(v);
    }

    fn compute_layer(&mut self) {
        let inputs = self.layer_inputs();
        let n_out = if self.rng.chance(self.cfg.multi_output_prob) {
            self.rng.range(2, 3) as usize
        } else {
            1
        };
        let k = self.def.ops.len();
        let inplace = self.rng.chance(0.1) && self.plain_activation(inputs[0]);
        let mut outputs = Vec::with_capacity(n_out);
        for j in 0..n_out {
            let name = format!("h{k}_{j}");
            outputs.push(if inplace && j == 0 {
                self.like(name, inputs[0], TensorKind::Activation)
            } else {
                let shape = self.act_shape();
                self.tensor(name, shape, TensorKind::Activation)
            });
        }
        let non_recomputable = self.rng.chance(self.cfg.non_recomputable_prob);
        let kind = if non_recomputable {
            *self.rng.pick(&[OPAQUE_DROPOUT, OPAQUE_RNG])
        } else if n_out > 1 {
            *self.rng.pick(&[
                OPAQUE_SPLIT,
                OpKind::BatchNorm.name(),
                OPAQUE_POOL_WITH_INDICES,
            ])
        } else {
            *self.rng.pick(&[
                OpKind::MatMul.name(),
                OpKind::Conv2d.name(),
                OpKind::Relu.name(),
                OpKind::Add.name(),
                OpKind::LayerNorm.name(),
                OpKind::Gelu.name(),
            ])
        };
        let op = self.op(kind, &inputs, &outputs, Phase::Forward);
        self.def.ops[op].recomputable = !non_recomputable;
        if inplace {
            // Same shape as its first input, which it may overwrite (e.g. an in-place relu).
            self.def.tensors[outputs[0]].dtype = self.def.tensors[inputs[0]].dtype;
            self.def.tensors[outputs[0]].bytes = self.def.tensors[inputs[0]].bytes;
            self.def.ops[op].inplace = vec![(0, 0)];
        }
        self.record_fwd(inputs, outputs.clone());
        self.publish(outputs);
    }

    /// An activation that owns its storage (not a view).
    fn plain_activation(&self, t: usize) -> bool {
        let t = &self.def.tensors[t];
        t.kind == TensorKind::Activation && t.alias_of.is_none()
    }

    /// Makes a layer's outputs readable: the first becomes the head unless the layer is a
    /// dead branch; extra outputs are read later or never.
    fn publish(&mut self, outputs: Vec<usize>) {
        let (first, extra) = outputs.split_first().expect("a layer has an output");
        for &e in extra {
            if !self.rng.chance(self.cfg.unused_prob * 4.0) {
                self.pool.insert(self.pool.len().saturating_sub(1), e);
            }
        }
        if !self.rng.chance(self.cfg.unused_prob) {
            self.pool.push(*first);
        }
    }

    fn layer_inputs(&mut self) -> Vec<usize> {
        let len = self.pool.len();
        let fork = len >= 2 && self.rng.chance(self.cfg.diamond_prob);
        let mut inputs = vec![self.pool[if fork { len - 2 } else { len - 1 }]];
        if len >= 2 && !fork && self.rng.chance(self.cfg.diamond_prob) {
            inputs.push(self.pool[len - 2]); // merge: closes a diamond
        }
        if self.rng.chance(self.cfg.skip_prob) {
            inputs.push(self.pool[self.rng.index(len)]);
        }
        if self.rng.chance(self.cfg.repeat_input_prob) {
            inputs.push(inputs[0]);
        }
        if self.rng.chance(self.cfg.param_prob) {
            let w = self.param();
            inputs.push(self.maybe_param_view(w));
        }
        if !self.persistent_extras.is_empty() && self.rng.chance(0.1) {
            inputs.push(*self.rng.pick(&self.persistent_extras));
        }
        inputs
    }

    /// Sometimes reads a parameter through a view (a transposed weight).
    fn maybe_param_view(&mut self, w: usize) -> usize {
        if !self.rng.chance(self.cfg.view_prob) {
            return w;
        }
        let n = self.def.tensors.len();
        let v = self.like(format!("{}_t{n}", self.name(w)), w, TensorKind::Activation);
        self.def.tensors[v].alias_of = Some(self.name(w));
        self.def.tensors[v].bytes = None;
        self.op(OpKind::Transpose.name(), &[w], &[v], Phase::Forward);
        self.record_fwd(vec![w], vec![v]);
        v
    }

    fn record_fwd(&mut self, inputs: Vec<usize>, outputs: Vec<usize>) {
        let mut diff_inputs: Vec<usize> = inputs
            .iter()
            .copied()
            .filter(|&t| {
                matches!(
                    self.def.tensors[t].kind,
                    TensorKind::Activation | TensorKind::Param
                )
            })
            .collect();
        diff_inputs.sort_unstable();
        diff_inputs.dedup();
        self.fwd.push(Fwd {
            diff_inputs,
            inputs,
            outputs,
        });
    }

    // ----- loss, backward, update -----

    fn training(&mut self, head: usize) {
        let mut inputs = vec![head];
        if self.rng.chance(0.5) {
            inputs.push(*self.rng.pick(&self.inputs)); // labels
        }
        let loss = self.tensor("loss".into(), vec![], TensorKind::Activation);
        self.def.tensors[loss].dtype = DType::F32;
        self.def.tensors[loss].bytes = None;
        self.op(
            OpKind::CrossEntropy.name(),
            &inputs,
            &[loss],
            Phase::Forward,
        );
        self.record_fwd(inputs, vec![loss]);
        if self.rng.chance(0.3) {
            self.def.outputs.push(self.name(head)); // logits for metrics
        }
        self.def.outputs.push("loss".into());
        if self.rng.chance(0.85) {
            self.def.loss = Some("loss".into());
        }
        let seed_grad = self.like("d_loss".into(), loss, TensorKind::Activation);
        self.op("ones_like", &[loss], &[seed_grad], Phase::Backward);
        self.grads[loss].push(seed_grad);
        self.backward();
        self.update();
    }

    fn backward(&mut self) {
        for f in (0..self.fwd.len()).rev() {
            let grads_out: Vec<usize> = self.fwd[f]
                .outputs
                .clone()
                .into_iter()
                .filter_map(|o| self.gradient(o))
                .collect();
            if grads_out.is_empty() {
                continue; // the op does not reach the loss
            }
            let mut inputs = grads_out;
            let saved = self.fwd[f].inputs.clone();
            for t in saved {
                if self.rng.chance(0.6) {
                    inputs.push(t);
                }
            }
            let diff = self.fwd[f].diff_inputs.clone();
            let outputs: Vec<usize> = diff
                .iter()
                .map(|&t| {
                    let n = self.def.tensors.len();
                    let g = self.like(format!("d{n}_{}", self.name(t)), t, TensorKind::Activation);
                    self.grads[t].push(g);
                    g
                })
                .collect();
            if outputs.is_empty() {
                let n = self.def.tensors.len();
                let sink = self.tensor(format!("d{n}_sink"), vec![1], TensorKind::Activation);
                self.op("grad_sink", &inputs, &[sink], Phase::Backward);
            } else {
                self.op("grad", &inputs, &outputs, Phase::Backward);
            }
        }
    }

    /// The full gradient of `t`: its only part, or the sum of its parts; sometimes a view.
    fn gradient(&mut self, t: usize) -> Option<usize> {
        let parts = self.grads[t].clone();
        let g = match parts.as_slice() {
            [] => return None,
            [one] => *one,
            _ => {
                let n = self.def.tensors.len();
                let sum = self.like(
                    format!("d{n}_{}_sum", self.name(t)),
                    t,
                    TensorKind::Activation,
                );
                self.op("accumulate", &parts, &[sum], Phase::Backward);
                sum
            }
        };
        self.grads[t] = vec![g];
        if !self.rng.chance(self.cfg.view_prob / 2.0) {
            return Some(g);
        }
        let n = self.def.tensors.len();
        let v = self.like(format!("d{n}_view"), g, TensorKind::Activation);
        self.def.tensors[v].alias_of = Some(self.name(g));
        self.def.tensors[v].bytes = None;
        self.op(OpKind::Reshape.name(), &[g], &[v], Phase::Backward);
        Some(v)
    }

    fn update(&mut self) {
        let update = self.rng.chance(self.cfg.update_prob);
        for w in self.params.clone() {
            let Some(g) = self.gradient(w) else { continue };
            if !update {
                self.def.outputs.push(self.name(g));
                continue;
            }
            let m = self.like(format!("m_{}", self.name(w)), w, TensorKind::State);
            let w_next = self.like(format!("{}_next", self.name(w)), w, TensorKind::Activation);
            let m_next = self.like(
                format!("m_{}_next", self.name(w)),
                w,
                TensorKind::Activation,
            );
            let op = self.op(OPAQUE_UPDATE, &[w, g, m], &[w_next, m_next], Phase::Update);
            self.def.ops[op].recomputable = false;
            self.def.outputs.push(self.name(w_next));
            self.def.outputs.push(self.name(m_next));
        }
    }

    /// Writes phases on every op, on some ops, or on none.
    fn finish_phases(&mut self) {
        for (op, &phase) in self.def.ops.iter_mut().zip(&self.phases) {
            op.phase = match self.explicit_phases {
                0 => None,
                1 => Some(phase),
                _ => (self.rng.next_u64() & 1 == 1).then_some(phase),
            };
        }
    }
}

/// Damages a text a little: flips, deletes, duplicates or inserts bytes, or splices in a
/// token that a loader must reject (huge or negative numbers, `1e999`, `NaN`, stray
/// brackets). A few edits per call, drawn from `seed`.
pub fn mutate_bytes(seed: u64, bytes: &[u8]) -> Vec<u8> {
    const TOKENS: &[&str] = &[
        "\"",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "null",
        "-1",
        "1e999",
        "NaN",
        "18446744073709551616",
        "4294967296",
        "\"x\"",
        "\u{00e9}",
        "\\u0000",
        "0.1",
        "[0, 0]",
    ];
    let mut rng = SplitMix64::new(seed);
    let mut out = bytes.to_vec();
    for _ in 0..rng.range(1, 4) {
        let at = rng.index(out.len() + 1);
        match rng.below(5) {
            0 if at < out.len() => out[at] ^= 1 << rng.below(8),
            1 => {
                let end = (at + rng.index(16) + 1).min(out.len());
                out.drain(at..end);
            }
            2 => {
                let end = (at + rng.index(32) + 1).min(out.len());
                let chunk = out[at..end].to_vec();
                out.splice(at..at, chunk);
            }
            _ => {
                let token = rng.pick(TOKENS).as_bytes().to_vec();
                out.splice(at..at, token);
            }
        }
    }
    out
}

/// Damages a JSON document structurally: replaces, removes or duplicates one value
/// somewhere in it (an entry of `tensors`, a name, a number). The result is still JSON, so
/// it exercises the reader's rules rather than its syntax errors.
pub fn mutate_json(seed: u64, v: &Value) -> Value {
    let mut rng = SplitMix64::new(seed);
    let mut out = v.clone();
    for _ in 0..rng.range(1, 3) {
        let depth = rng.range(1, 5) as usize;
        mutate_at(&mut rng, &mut out, depth);
    }
    out
}

fn mutate_at(rng: &mut SplitMix64, v: &mut Value, depth: usize) {
    let len = match v {
        Value::Array(a) => a.len(),
        Value::Object(m) => m.len(),
        _ => 0,
    };
    if depth == 0 || len == 0 {
        *v = random_value(rng);
        return;
    }
    let i = rng.index(len);
    match v {
        Value::Array(a) if rng.chance(0.15) => {
            let item = a[i].clone();
            a.insert(rng.index(len + 1), item);
        }
        Value::Array(a) if rng.chance(0.15) => {
            a.remove(i);
        }
        Value::Array(a) => mutate_at(rng, &mut a[i], depth - 1),
        Value::Object(m) if rng.chance(0.1) => {
            let key = m.keys().nth(i).cloned().unwrap_or_default();
            m.shift_remove(&key);
        }
        Value::Object(m) => {
            if let Some((_, child)) = m.iter_mut().nth(i) {
                mutate_at(rng, child, depth - 1);
            }
        }
        _ => {}
    }
}

fn random_value(rng: &mut SplitMix64) -> Value {
    fn number(s: &str) -> Value {
        serde_json::from_str(s).unwrap_or(Value::Null)
    }
    match rng.below(10) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(0.5)),
        2 => number(rng.pick::<&str>(&["-1", "1e999", "18446744073709551616", "0.5", "-0"])),
        3 => Value::from(rng.below(10)),
        4 => Value::from(*rng.pick(&["x", "w", "h", "loss", "dy", "fc", "activation"])),
        5 => Value::from(*rng.pick(&["param", "input", "bf16", "forward", "sgc-graph"])),
        6 => Value::Array(vec![Value::from(rng.below(3)), Value::from(rng.below(3))]),
        7 => Value::Array(Vec::new()),
        8 => Value::Object(Map::new()),
        _ => Value::from(rng.next_u64()),
    }
}

/// Every key, string and number (as written) of a JSON document.
fn scalars(v: &Value, out: &mut HashSet<String>) {
    match v {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Number(n) => {
            out.insert(n.to_string());
        }
        Value::Array(a) => a.iter().for_each(|x| scalars(x, out)),
        Value::Object(m) => {
            for (k, x) in m {
                out.insert(k.clone());
                scalars(x, out);
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// Panics unless a loader error ([`crate::parse_any`] on `text`) locates its cause: a JSON error at a line and column inside the text; a blank
/// text called empty; a context (graph, entry, op, tensor, node or link) and field; and any
/// op, tensor or node it names is one the document has (a Checkmate random layered graph
/// names node `7` as `node7`).
pub fn check_error_locates(e: &GraphError, text: &str) {
    let msg = e.to_string();
    match e {
        GraphError::Json { line, column, .. } => {
            let lines = text.split('\n').count();
            assert!((1..=lines).contains(line), "{msg}: line {line} of {lines}");
            let width = text
                .split('\n')
                .nth(line - 1)
                .map_or(0, |l| l.chars().count());
            assert!(*column <= width + 1, "{msg}: column {column} of {width}");
            return;
        }
        GraphError::Empty => {
            assert!(text.trim().is_empty(), "{msg}");
            return;
        }
        GraphError::MissingField { context, field }
        | GraphError::WrongType { context, field, .. } => {
            assert!(!context.is_empty() && !field.is_empty(), "{msg}");
        }
        // The unknown field is a key of the document (possibly ``).
        GraphError::UnknownField { context, .. } => assert!(!context.is_empty(), "{msg}"),
        GraphError::NotAnObject { context, .. } => assert!(!context.is_empty(), "{msg}"),
        GraphError::UnknownFormat(_) => assert!(msg.contains("\"format\""), "{msg}"),
        GraphError::UnsupportedVersion(_) => assert!(msg.contains("version"), "{msg}"),
        _ => {}
    }
    let doc: Value = serde_json::from_str(text).expect("only JSON errors come before parsing");
    let mut known = HashSet::new();
    scalars(&doc, &mut known);
    if let Some(name) = e.subject() {
        assert!(
            msg.contains(&format!("`{name}`")),
            "{msg}: does not quote {name:?}"
        );
        let bare = name.strip_prefix("node").unwrap_or(name);
        assert!(
            known.contains(name) || known.contains(bare),
            "{msg}: names {name:?}, which the document does not have"
        );
    }
}

/// Offloads for tests, before a planner chooses them: for up to `max` activation roots of
/// the schedule `ops` (the first in step order), the first two consecutive steps `u < v`
/// touching the storage with `v - u >= 4` where `v` reads it (a forward use, then the first
/// backward read): copy after `u`, free after `u + 1`, fetch after `v - 2`, needed at `v`.
/// Each is checked by [`crate::simulate_offloaded`]; a graph without such gaps gets none.
pub fn spaced_offloads(graph: &Graph, ops: &[crate::OpId], max: usize) -> Vec<crate::Offload> {
    let mut touches: Vec<Vec<(usize, bool)>> = vec![Vec::new(); graph.num_tensors()];
    for (s, &op) in ops.iter().enumerate() {
        let o = graph.op(op);
        let mut roots: Vec<(crate::TensorId, bool)> = o
            .outputs
            .iter()
            .map(|&t| (graph.storage_root(t), false))
            .chain(o.inputs.iter().map(|&t| (graph.storage_root(t), true)))
            .collect();
        // A storage the step writes counts as written (`false` sorts first).
        roots.sort();
        roots.dedup_by_key(|r| r.0);
        for (r, only_read) in roots {
            touches[r.index()].push((s, only_read));
        }
    }
    let mut chosen: Vec<(usize, crate::Offload)> = graph
        .tensor_ids()
        .filter(|&t| graph.storage_root(t) == t && graph.tensor(t).kind == TensorKind::Activation)
        .filter_map(|t| {
            let gap = touches[t.index()]
                .windows(2)
                .find(|w| w[1].0 - w[0].0 >= 4 && w[1].1)?;
            let (u, v) = (gap[0].0, gap[1].0);
            let o = crate::Offload {
                root: t,
                copy_after: u,
                free_after: u + 1,
                fetch_after: v - 2,
                needed_at: v,
            };
            crate::simulate_offloaded(graph, ops, &[o]).ok()?;
            Some((u, o))
        })
        .collect();
    chosen.sort_by_key(|c| (c.0, c.1.root));
    chosen.into_iter().take(max).map(|c| c.1).collect()
}
