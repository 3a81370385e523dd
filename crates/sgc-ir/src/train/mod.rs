//! The training-graph builder: describe the forward pass with typed ops, get the whole
//! training step (forward, backward, SGD update) as a validated [`Graph`].
//!
//! ```
//! use sgc_ir::train::TrainBuilder;
//! use sgc_ir::DType;
//! # fn main() -> Result<(), sgc_ir::train::TrainError> {
//! let mut b = TrainBuilder::new("mlp");
//! let x = b.input("x", DType::F32, &[64, 784], Some(0))?;
//! let labels = b.input("labels", DType::I64, &[64], Some(0))?;
//! let w1 = b.param("fc1.weight", &[784, 512])?;
//! let b1 = b.param("fc1.bias", &[512])?;
//! let h = b.linear("fc1", x, w1, Some(b1))?;
//! let h = b.relu("act1", h)?;
//! let w2 = b.param("fc2.weight", &[512, 10])?;
//! let logits = b.linear("fc2", h, w2, None)?;
//! let loss = b.cross_entropy("loss", logits, labels)?;
//! let g = b.finish(loss, serde_json::Map::new())?;
//! assert!(g.op_by_name("act1.grad_input").is_some());
//! # Ok(()) }
//! ```
//!
//! # Method
//!
//! Forward ops are appended in call order (that order is the traced order of the file).
//! Each records a derivative *rule* next to its op. [`TrainBuilder::finish`] runs
//! reverse-mode differentiation over that tape: it walks the forward ops from last to
//! first, and for every op whose output has a gradient, appends the backward ops of its
//! rule. The walk starts at the `cross_entropy` op that produces the loss, whose gradient
//! op needs no incoming gradient (dloss = 1, mean over the rows). A tensor read by several
//! ops receives several contributions; they are summed with explicit `add` ops as soon as
//! the second one exists (`<tensor>.grad_acc<k>`), as a framework's autograd does. Because
//! every consumer of a tensor comes after its producer in the tape, a tensor's gradient is
//! complete when the reverse walk reaches its producer. Gradients that are the incoming
//! gradient unchanged (`add`, the `x` operand of `bias_add`) are passed through without an
//! op. Finally one `sgd_update` per parameter (in declaration order) writes the parameter
//! in place; the graph's `outputs` are the loss and every parameter gradient.
//!
//! What a backward op reads is exactly what a framework saves for it (relu its output,
//! conv2d and matmul their inputs, batch norm its input and batch statistics, ...); see
//! `docs/ops.md` for every op type, its operands, attributes and flops formula. Only
//! operands that need a gradient (those that depend on a parameter) get a backward op.
//!
//! Names: forward ops and their output tensors share the name the caller gives
//! (`layer1.0.conv1`); extra outputs get a suffix (`bn1.mean`); backward ops and their
//! outputs are named after the forward op (`layer1.0.conv1.grad_input`,
//! `layer1.0.conv1.grad_weight`); updates are `<param>.sgd`.
//!
//! After an error the builder may hold part of the failing op: drop it.

mod backward;
mod error;
mod ops;

pub use error::TrainError;

use crate::graph::{GraphDef, OpDef, TensorDef};
use crate::ids::{DType, Phase, TensorKind};
use crate::ops::OpKind;
use crate::Graph;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// A tensor of the graph being built: an index into the builder's tensor table. A `Var`
/// belongs to the builder that made it; handing it to another builder is a programming
/// error (it names another tensor there, or panics when out of range).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Var(u32);

impl Var {
    /// Position in the builder's tensor table (and in the built graph's).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Learning rate of the `sgd_update` ops unless [`TrainBuilder::with_lr`] says otherwise.
pub const DEFAULT_LR: f64 = 0.01;

/// The derivative rule of a forward op, with the parameters it needs beyond the op's
/// tensors.
#[derive(Clone, Debug, PartialEq)]
enum Rule {
    MatMul {
        transpose_b: bool,
    },
    BatchedMatMul {
        transpose_a: bool,
        transpose_b: bool,
    },
    BiasAdd {
        axis: usize,
    },
    Add,
    Mul,
    Relu,
    Gelu,
    Conv2d {
        stride: u64,
        padding: u64,
    },
    MaxPool2d {
        kernel: u64,
        stride: u64,
        padding: u64,
    },
    GlobalAvgPool,
    BatchNorm,
    LayerNorm,
    Softmax {
        scale: f64,
    },
    Embedding,
    Reshape,
    Transpose {
        perm: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    Upsample2x,
    /// Inverted dropout: the backward scales the kept entries by `1 / (1 - p)`.
    Dropout {
        scale: f64,
    },
    CrossEntropy,
}

/// A forward op on the tape.
#[derive(Clone, Debug)]
struct Record {
    name: String,
    rule: Rule,
    inputs: Vec<Var>,
    outputs: Vec<Var>,
    flops: f64,
}

/// An op about to be appended.
struct NewOp {
    name: String,
    kind: OpKind,
    inputs: Vec<Var>,
    outputs: Vec<Var>,
    flops: f64,
    attrs: Option<Map<String, Value>>,
    inplace: Vec<(u64, u64)>,
}

impl NewOp {
    fn new(name: &str, kind: OpKind, inputs: Vec<Var>, outputs: Vec<Var>, flops: f64) -> Self {
        NewOp {
            name: name.to_string(),
            kind,
            inputs,
            outputs,
            flops,
            attrs: None,
            inplace: Vec::new(),
        }
    }

    fn attrs(mut self, v: Value) -> Self {
        self.attrs = v.as_object().cloned();
        self
    }

    fn inplace(mut self, output: u64, input: u64) -> Self {
        self.inplace.push((output, input));
        self
    }
}

/// Builds a training-step graph: see the [module docs](self).
pub struct TrainBuilder {
    name: String,
    lr: f64,
    tensors: Vec<TensorDef>,
    requires_grad: Vec<bool>,
    tensor_ids: HashMap<String, Var>,
    ops: Vec<OpDef>,
    op_names: HashSet<String>,
    tape: Vec<Record>,
}

impl TrainBuilder {
    /// An empty builder for a graph named `name`.
    pub fn new(name: &str) -> Self {
        TrainBuilder {
            name: name.to_string(),
            lr: DEFAULT_LR,
            tensors: Vec::new(),
            requires_grad: Vec::new(),
            tensor_ids: HashMap::new(),
            ops: Vec::new(),
            op_names: HashSet::new(),
            tape: Vec::new(),
        }
    }

    /// Sets the learning rate written into every `sgd_update` op.
    pub fn with_lr(mut self, lr: f64) -> Self {
        self.lr = lr;
        self
    }

    /// A data input handed in at each step (`kind: input`), with its batch axis.
    pub fn input(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        batch_dim: Option<usize>,
    ) -> Result<Var, TrainError> {
        if let Some(d) = batch_dim.filter(|&d| d >= shape.len()) {
            return Err(TrainError::shape(
                name,
                format!("batch_dim {d} is not an axis of shape {shape:?}"),
            ));
        }
        let v = self.add_tensor(name, dtype, shape.to_vec(), TensorKind::Input)?;
        self.tensors[v.index()].batch_dim = batch_dim.map(|d| d as u64);
        Ok(v)
    }

    /// A trainable f32 parameter (`kind: param`); it gets a gradient and an update.
    pub fn param(&mut self, name: &str, shape: &[u64]) -> Result<Var, TrainError> {
        let v = self.add_tensor(name, DType::F32, shape.to_vec(), TensorKind::Param)?;
        self.requires_grad[v.index()] = true;
        Ok(v)
    }

    /// The shape of a tensor.
    pub fn shape(&self, v: Var) -> &[u64] {
        &self.tensors[v.index()].shape
    }

    /// The element type of a tensor.
    pub fn dtype(&self, v: Var) -> DType {
        self.tensors[v.index()].dtype
    }

    /// The name of a tensor.
    pub fn name_of(&self, v: Var) -> &str {
        &self.tensors[v.index()].name
    }

    /// Whether a tensor depends on a parameter (and so gets a gradient).
    pub fn requires_grad(&self, v: Var) -> bool {
        self.requires_grad[v.index()]
    }

    /// Differentiates the tape from `loss` (the output of [`TrainBuilder::cross_entropy`]),
    /// appends the SGD updates and validates the result.
    pub fn finish(mut self, loss: Var, meta: Map<String, Value>) -> Result<Graph, TrainError> {
        if !self.lr.is_finite() {
            return Err(TrainError::BadLearningRate(self.lr));
        }
        let grads = self.differentiate(loss)?;
        let params: Vec<Var> = (0..self.tensors.len())
            .map(|i| Var(i as u32))
            .filter(|v| self.tensors[v.index()].kind == TensorKind::Param)
            .collect();
        let mut outputs = vec![self.name_of(loss).to_string()];
        for &p in &params {
            let g = grads[p.index()]
                .ok_or_else(|| TrainError::UnusedParam(self.name_of(p).to_string()))?;
            self.sgd_update(p, g)?;
            outputs.push(self.name_of(g).to_string());
        }
        let def = GraphDef {
            name: Some(self.name.clone()),
            loss: Some(self.name_of(loss).to_string()),
            tensors: self.tensors,
            ops: self.ops,
            outputs,
            meta: Some(meta),
        };
        Ok(Graph::from_def(def)?)
    }

    fn sgd_update(&mut self, param: Var, grad: Var) -> Result<(), TrainError> {
        let name = format!("{}.sgd", self.name_of(param));
        let flops = 2.0 * numel(self.shape(param)) as f64;
        let op = NewOp::new(&name, OpKind::SgdUpdate, vec![param, grad], vec![], flops)
            .attrs(serde_json::json!({ "lr": self.lr }));
        // Not recomputable: the op table says it writes state (`OpDef::new`).
        self.push(op, Phase::Update)
    }

    fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        shape: Vec<u64>,
        kind: TensorKind,
    ) -> Result<Var, TrainError> {
        let v = Var(self.tensors.len() as u32);
        if self.tensor_ids.insert(name.to_string(), v).is_some() {
            return Err(TrainError::DuplicateTensor(name.to_string()));
        }
        let mut t = TensorDef::new(name, dtype, shape);
        t.kind = kind;
        self.tensors.push(t);
        self.requires_grad.push(false);
        Ok(v)
    }

    /// A new activation.
    fn activation(&mut self, name: &str, dtype: DType, shape: Vec<u64>) -> Result<Var, TrainError> {
        self.add_tensor(name, dtype, shape, TensorKind::Activation)
    }

    /// A new activation with the dtype and shape of `like` (a gradient of `like`).
    fn activation_like(&mut self, name: &str, like: Var) -> Result<Var, TrainError> {
        let t = &self.tensors[like.index()];
        let (dtype, shape) = (t.dtype, t.shape.clone());
        self.activation(name, dtype, shape)
    }

    /// A new activation that views `base`'s storage.
    fn view(&mut self, name: &str, base: Var, shape: Vec<u64>) -> Result<Var, TrainError> {
        let v = self.activation(name, self.dtype(base), shape)?;
        self.tensors[v.index()].alias_of = Some(self.name_of(base).to_string());
        self.requires_grad[v.index()] = self.requires_grad[base.index()];
        Ok(v)
    }

    fn push(&mut self, op: NewOp, phase: Phase) -> Result<(), TrainError> {
        if !self.op_names.insert(op.name.clone()) {
            return Err(TrainError::DuplicateOp(op.name));
        }
        let names = |vs: &[Var]| -> Vec<String> {
            vs.iter()
                .map(|v| self.tensors[v.index()].name.clone())
                .collect()
        };
        let mut def = OpDef::new(
            op.name,
            op.kind.name(),
            names(&op.inputs),
            names(&op.outputs),
        );
        def.phase = Some(phase);
        def.flops = Some(op.flops);
        def.attrs = op.attrs;
        def.inplace = op.inplace;
        self.ops.push(def);
        Ok(())
    }

    /// Appends a forward op and its derivative rule. Its first output requires a gradient
    /// when any of its differentiable inputs does.
    fn forward(&mut self, op: NewOp, rule: Rule) -> Result<(), TrainError> {
        let differentiable = |i: usize| match rule {
            Rule::Embedding => i == 1,
            Rule::CrossEntropy => i == 0,
            _ => true,
        };
        let rg = op
            .inputs
            .iter()
            .enumerate()
            .any(|(i, v)| differentiable(i) && self.requires_grad[v.index()]);
        if let Some(&out) = op.outputs.first() {
            self.requires_grad[out.index()] = rg;
        }
        let record = Record {
            name: op.name.clone(),
            rule,
            inputs: op.inputs.clone(),
            outputs: op.outputs.clone(),
            flops: op.flops,
        };
        self.push(op, Phase::Forward)?;
        self.tape.push(record);
        Ok(())
    }
}

/// Number of elements of a shape (saturating: absurd sizes fail validation, not here).
fn numel(shape: &[u64]) -> u64 {
    shape.iter().fold(1u64, |a, &d| a.saturating_mul(d))
}
