//! The validated graph, and its name-based definition.
//!
//! Two layers:
//! - [`GraphDef`] is the file's content as plain data, tensors and ops referring to each
//!   other by name. The loader fills it from JSON, the training builder and the importers
//!   build it directly, the saver writes it back.
//! - [`Graph`] is a `GraphDef` that passed every rule of the format doc
//!   ([`Graph::from_def`]), with names resolved to [`TensorId`]/[`OpId`], each
//!   activation's producer, each tensor's storage root (through `alias_of`) and an op
//!   dependency graph (petgraph, private). Everything downstream works on `Graph`.

use crate::ids::{DType, OpId, Phase, TensorId, TensorKind};
use crate::ops::OpKind;
use petgraph::graph::{DiGraph, NodeIndex};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// A tensor as written in a graph file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorDef {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "is_activation")]
    pub kind: TensorKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias_of: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_dim: Option<u64>,
}

fn is_activation(k: &TensorKind) -> bool {
    *k == TensorKind::Activation
}

fn is_true(b: &bool) -> bool {
    *b
}

impl TensorDef {
    /// An activation of the given dtype and shape.
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<u64>) -> Self {
        TensorDef {
            name: name.into(),
            dtype,
            shape,
            bytes: None,
            kind: TensorKind::Activation,
            alias_of: None,
            batch_dim: None,
        }
    }
}

/// An op as written in a graph file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpDef {
    pub name: String,
    pub op: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attrs: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inplace: Vec<(u64, u64)>,
    #[serde(skip_serializing_if = "is_true")]
    pub recomputable: bool,
}

impl OpDef {
    /// An op of type `op` with no phase, cost, attributes or in-place pairs; recomputable
    /// unless the op table says the type draws random numbers or writes state.
    pub fn new(
        name: impl Into<String>,
        op: impl Into<String>,
        inputs: Vec<String>,
        outputs: Vec<String>,
    ) -> Self {
        let op = op.into();
        let recomputable = OpKind::parse(&op).is_none_or(|k| k.spec().recomputable());
        OpDef {
            name: name.into(),
            op,
            inputs,
            outputs,
            phase: None,
            time_us: None,
            flops: None,
            attrs: None,
            inplace: Vec::new(),
            recomputable,
        }
    }
}

/// A whole graph file as plain data (format version 1).
#[derive(Clone, Debug, PartialEq, Serialize, Default)]
pub struct GraphDef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub tensors: Vec<TensorDef>,
    pub ops: Vec<OpDef>,
    pub outputs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// A validated tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// The `bytes` field as written (an override of the computed size).
    pub bytes_override: Option<u64>,
    pub kind: TensorKind,
    /// The tensor whose storage this one views.
    pub alias_of: Option<TensorId>,
    pub batch_dim: Option<usize>,
    /// Storage size: `bytes`, else `product(shape) * size_of(dtype)`. A view's storage is
    /// its base's; see [`Graph::storage_bytes`].
    pub size: u64,
}

/// A validated op.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub name: String,
    /// The operation type (opaque to planning).
    pub op_type: String,
    /// The type's entry in the op vocabulary, parsed once at load; `None` for a type the
    /// vocabulary does not have (still plannable: sizes come from the file).
    pub kind: Option<OpKind>,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    /// The phase as written; [`Graph::phase`] gives the effective one.
    pub phase: Option<Phase>,
    pub time_us: Option<f64>,
    pub flops: Option<f64>,
    pub attrs: Option<Map<String, Value>>,
    /// `(output_index, input_index)` pairs that may share storage.
    pub inplace: Vec<(usize, usize)>,
    pub recomputable: bool,
}

/// Where an op's cost comes from (format doc: `time_us`, else `flops`, else bytes moved;
/// with a device profile, `time_us`, else the roofline estimate: see [`crate::cost`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    TimeUs,
    Flops,
    Bytes,
    /// The roofline estimate of the op's time on a device profile, in microseconds.
    Roofline,
}

impl CostSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CostSource::TimeUs => "time_us",
            CostSource::Flops => "flops",
            CostSource::Bytes => "bytes moved",
            CostSource::Roofline => "roofline estimate",
        }
    }
}

/// What validation works out on the way and the graph keeps: names to ids, and each
/// tensor's producer and storage root.
pub(crate) struct Lookup {
    pub tensor_ids: HashMap<String, TensorId>,
    pub op_ids: HashMap<String, OpId>,
    pub producer: Vec<Option<OpId>>,
    pub root: Vec<TensorId>,
}

/// A training-step graph that satisfies every rule of the format doc.
#[derive(Clone, Debug)]
pub struct Graph {
    name: Option<String>,
    tensors: Vec<Tensor>,
    ops: Vec<Op>,
    outputs: Vec<TensorId>,
    loss: Option<TensorId>,
    meta: Option<Map<String, Value>>,
    // Derived, fixed at validation.
    tensor_ids: HashMap<String, TensorId>,
    op_ids: HashMap<String, OpId>,
    producer: Vec<Option<OpId>>,
    consumers: Vec<Vec<OpId>>,
    root: Vec<TensorId>,
    phases: Vec<Option<Phase>>,
    deps: DiGraph<OpId, TensorId>,
}

impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.tensors == other.tensors
            && self.ops == other.ops
            && self.outputs == other.outputs
            && self.loss == other.loss
            && self.meta == other.meta
    }
}

impl Graph {
    /// Assembles a graph from parts that [`crate::validate`] has checked: the definition's
    /// name and meta, its tensors, ops, outputs and loss resolved, and the lookups built
    /// on the way.
    pub(crate) fn assemble(
        def: GraphDef,
        tensors: Vec<Tensor>,
        ops: Vec<Op>,
        (outputs, loss): (Vec<TensorId>, Option<TensorId>),
        lookup: Lookup,
    ) -> Graph {
        let Lookup {
            tensor_ids,
            op_ids,
            producer,
            root,
        } = lookup;
        let mut consumers = vec![Vec::new(); tensors.len()];
        for (i, op) in ops.iter().enumerate() {
            for &t in &op.inputs {
                if consumers[t.index()].last() != Some(&OpId::new(i)) {
                    consumers[t.index()].push(OpId::new(i));
                }
            }
        }
        let deps = dependency_graph(&ops, &producer);
        let mut g = Graph {
            name: def.name,
            tensors,
            ops,
            outputs,
            loss,
            meta: def.meta,
            tensor_ids,
            op_ids,
            producer,
            consumers,
            root,
            phases: Vec::new(),
            deps,
        };
        g.phases = g.infer_phases();
        g
    }

    /// The definition this graph was built from (names, as written).
    pub fn to_def(&self) -> GraphDef {
        let tname = |t: TensorId| self.tensors[t.index()].name.clone();
        GraphDef {
            name: self.name.clone(),
            tensors: self
                .tensors
                .iter()
                .map(|t| TensorDef {
                    name: t.name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    bytes: t.bytes_override,
                    kind: t.kind,
                    alias_of: t.alias_of.map(tname),
                    batch_dim: t.batch_dim.map(|d| d as u64),
                })
                .collect(),
            ops: self
                .ops
                .iter()
                .map(|o| OpDef {
                    name: o.name.clone(),
                    op: o.op_type.clone(),
                    inputs: o.inputs.iter().map(|&t| tname(t)).collect(),
                    outputs: o.outputs.iter().map(|&t| tname(t)).collect(),
                    phase: o.phase,
                    time_us: o.time_us,
                    flops: o.flops,
                    attrs: o.attrs.clone(),
                    inplace: o
                        .inplace
                        .iter()
                        .map(|&(a, b)| (a as u64, b as u64))
                        .collect(),
                    recomputable: o.recomputable,
                })
                .collect(),
            outputs: self.outputs.iter().map(|&t| tname(t)).collect(),
            loss: self.loss.map(tname),
            meta: self.meta.clone(),
        }
    }

    /// Whether `op` may write its output tensor `output` into the storage of its input tensor
    /// `input`, by the graph alone: the op declares the pair in `inplace`; both tensors own
    /// their storage (no views) and are neither persistent nor the storage of a graph output
    /// (an output must survive the step); both have the same size; and no other input of the
    /// op reads the input's storage through another tensor (a view would see it change).
    /// Whether the input's storage ends at this op is a property of the schedule, checked by
    /// the callers (the planner's arena, its verifier and the executor's layout all ask here).
    pub fn in_place_allowed(&self, op: OpId, output: TensorId, input: TensorId) -> bool {
        let o = self.op(op);
        let declared = o.inplace.iter().any(|&(oi, ii)| {
            o.outputs.get(oi) == Some(&output) && o.inputs.get(ii) == Some(&input)
        });
        let owns = |t: TensorId| self.tensor(t).alias_of.is_none() && !self.is_persistent(t);
        let kept = self
            .outputs()
            .iter()
            .any(|&t| self.storage_root(t) == input);
        let shared = o
            .inputs
            .iter()
            .any(|&t| t != input && self.storage_root(t) == input);
        declared
            && output != input
            && owns(output)
            && owns(input)
            && !kept
            && !shared
            && self.tensor(output).size == self.tensor(input).size
    }

    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.meta.as_ref()
    }
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }
    pub fn num_ops(&self) -> usize {
        self.ops.len()
    }
    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }
    pub fn op(&self, id: OpId) -> &Op {
        &self.ops[id.index()]
    }
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }
    pub fn op_ids(&self) -> impl ExactSizeIterator<Item = OpId> + DoubleEndedIterator {
        (0..self.ops.len()).map(OpId::new)
    }
    pub fn tensor_ids(&self) -> impl ExactSizeIterator<Item = TensorId> + DoubleEndedIterator {
        (0..self.tensors.len()).map(TensorId::new)
    }
    /// Tensors that must be resident when the step ends.
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }
    pub fn loss(&self) -> Option<TensorId> {
        self.loss
    }
    pub fn tensor_by_name(&self, name: &str) -> Option<TensorId> {
        self.tensor_ids.get(name).copied()
    }
    pub fn op_by_name(&self, name: &str) -> Option<OpId> {
        self.op_ids.get(name).copied()
    }
    /// The op that produces a tensor (none for inputs and persistent tensors).
    pub fn producer(&self, t: TensorId) -> Option<OpId> {
        self.producer[t.index()]
    }
    /// The distinct ops that read a tensor, in order.
    pub fn consumers(&self, t: TensorId) -> &[OpId] {
        &self.consumers[t.index()]
    }
    /// The tensor that owns `t`'s storage: `t` itself, or the end of its `alias_of` chain.
    pub fn storage_root(&self, t: TensorId) -> TensorId {
        self.root[t.index()]
    }
    /// Bytes of `t`'s storage (its root's size).
    pub fn storage_bytes(&self, t: TensorId) -> u64 {
        self.tensors[self.root[t.index()].index()].size
    }
    /// Whether `t`'s storage lives for the whole step.
    pub fn is_persistent(&self, t: TensorId) -> bool {
        self.tensors[self.root[t.index()].index()]
            .kind
            .is_persistent()
    }
    /// Bytes that `t` adds on its own: its size unless it is a view.
    pub fn own_bytes(&self, t: TensorId) -> u64 {
        let tensor = &self.tensors[t.index()];
        if tensor.alias_of.is_some() {
            0
        } else {
            tensor.size
        }
    }
    /// The effective phase of an op: as written, else inferred from `loss`.
    pub fn phase(&self, op: OpId) -> Option<Phase> {
        self.phases[op.index()]
    }

    /// The ops an op depends on directly (producers of its inputs), deduplicated.
    pub fn predecessors(&self, op: OpId) -> Vec<OpId> {
        let mut v: Vec<OpId> = self
            .deps
            .neighbors_directed(NodeIndex::new(op.index()), petgraph::Direction::Incoming)
            .map(|n| self.deps[n])
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Every op that `t`'s value depends on (its producer and that producer's ancestors).
    pub fn ancestors_of_tensor(&self, t: TensorId) -> Vec<OpId> {
        let Some(p) = self.producer(t) else {
            return Vec::new();
        };
        let rev = petgraph::visit::Reversed(&self.deps);
        let mut dfs = petgraph::visit::Dfs::new(rev, NodeIndex::new(p.index()));
        let mut out = Vec::new();
        while let Some(n) = dfs.next(rev) {
            out.push(self.deps[n]);
        }
        out.sort();
        out
    }

    /// Cost of one op and where it came from: `time_us`, else `flops`, else the bytes it
    /// reads plus the bytes it writes.
    pub fn op_cost(&self, op: OpId) -> (f64, CostSource) {
        let o = &self.ops[op.index()];
        if let Some(t) = o.time_us {
            (t, CostSource::TimeUs)
        } else if let Some(f) = o.flops {
            (f, CostSource::Flops)
        } else {
            // u128: an op may read one tensor several times, so its bytes moved can pass
            // the graph's total storage (which fits in 64 bits).
            let moved: u128 = o
                .inputs
                .iter()
                .chain(&o.outputs)
                .map(|&t| u128::from(self.storage_bytes(t)))
                .sum();
            (moved as f64, CostSource::Bytes)
        }
    }

    /// Number of elements of a tensor (saturating).
    pub fn numel(&self, t: TensorId) -> u64 {
        self.tensors[t.index()]
            .shape
            .iter()
            .fold(1u64, |a, &d| a.saturating_mul(d))
    }

    fn infer_phases(&self) -> Vec<Option<Phase>> {
        let in_forward: Option<Vec<bool>> = self.loss.map(|loss| {
            let mut fwd = vec![false; self.ops.len()];
            for op in self.ancestors_of_tensor(loss) {
                fwd[op.index()] = true;
            }
            fwd
        });
        self.ops
            .iter()
            .enumerate()
            .map(|(i, o)| {
                o.phase.or_else(|| {
                    in_forward.as_ref().map(|f| {
                        if f[i] {
                            Phase::Forward
                        } else {
                            Phase::Backward
                        }
                    })
                })
            })
            .collect()
    }
}

fn dependency_graph(ops: &[Op], producer: &[Option<OpId>]) -> DiGraph<OpId, TensorId> {
    let mut g = DiGraph::with_capacity(ops.len(), ops.len() * 2);
    for i in 0..ops.len() {
        g.add_node(OpId::new(i));
    }
    for (i, op) in ops.iter().enumerate() {
        for &t in &op.inputs {
            if let Some(p) = producer[t.index()] {
                g.add_edge(NodeIndex::new(p.index()), NodeIndex::new(i), t);
            }
        }
    }
    g
}
