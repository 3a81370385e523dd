//! Rescaling a training graph to another batch size.
//!
//! The batch enters a graph through the tensors that declare a `batch_dim` and are not
//! produced by an op (normally the `input`s): all of them must agree on its size `B`.
//! [`batch_axes`] then walks the ops in file order (a valid execution order) and decides,
//! for every tensor, whether its shape depends on the batch and where: a [`BatchAxis`]
//! says that axis `axis` has size `outer * B * inner`, the batch index running between an
//! outer and an inner factor. Inputs have `outer = inner = 1`; merged axes such as the
//! `[B*T, d]` rows of a transformer have `inner = T`.
//!
//! Each op kind of the vocabulary ([`crate::ops`]) has a [`BatchRule`] from its inputs'
//! axes to its outputs' axes: element-wise ops broadcast (operands aligned on their last
//! axes; an operand that does not depend on the batch but is as long as the batch on the
//! batch axis is refused, as its size would disagree at another batch); row-wise and image
//! ops carry the axis over, with a [`Keep`] saying where it may not be (a channel axis,
//! the rows a softmax or norm works on, the axis of a `dim` attribute); permutations move
//! it; reductions over it, weight gradients and losses give batch-independent outputs;
//! `mm`/`addmm` carry it from the rows of the first operand or the columns of the second
//! and contract it away when both carry it on the inner axis. A view keeps the batch at
//! the same element stride: with `s = inner * prod(x.shape[axis+1..])`, the output axis
//! `j` is one whose suffix product `p_j = prod(y.shape[j+1..])` divides `s` and whose size
//! is a multiple of `B * s / p_j` (the first such, or the output's declared `batch_dim`
//! when it qualifies); that covers flatten `[N, C, H, W] -> [N, C*H*W]` and
//! `[B*T, d] <-> [B, T, d]`. An op whose inputs do not depend on the batch is not
//! inspected: its outputs carry the batch only where the file declares `batch_dim` (the
//! batch entering through a constant: an LSTM's zero state, a class token expanded to the
//! batch; the PyTorch exporter marks them by tracing twice). An op type outside the
//! vocabulary, or whose operands break its rule, is an error naming the op. Every
//! declared `batch_dim` must agree with the rules.
//!
//! [`rescale`] then replaces every batch-carrying axis of size `outer * B * inner` by
//! `outer * B' * inner`, scales a `bytes` override by `B'/B` when that is exact (else an
//! error), and scales the `flops` and `time_us` of every op that reads or writes a
//! batch-dependent tensor by `B'/B`. **Assumption:** an op's cost is linear in the batch.
//! It holds exactly for the flops formulas of `docs/ops.md` (each is a multiple of the
//! batch-carrying element counts); for measured times it is an approximation. `meta.batch_size`
//! becomes `B'`, and attributes follow: a shape attribute (`size`, `input_sizes`) gets the
//! new extent where it held the old one, `stride` beside it scales outside the batch axis,
//! and element counts (`count` of the batch-norm statistics update) scale with the batch.
//! Rescaling to `B' = B` returns a graph equal to the input.

use crate::error::GraphError;
use crate::graph::{Graph, GraphDef, Op};
use crate::ids::{OpId, TensorId};
use crate::ops::{self, BatchRule, Keep, PermAttr, Slots, BATCH_COUNT_ATTRS, SHAPE_ATTRS};
use serde_json::Value;
use thiserror::Error;

/// Where the batch lives in a tensor's shape: `shape[axis] = outer * batch * inner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchAxis {
    pub axis: usize,
    /// Elements of `axis` per batch index (1 unless the batch was merged with inner axes).
    pub inner: u64,
}

/// Why a graph cannot be rescaled.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum RescaleError {
    #[error("no tensor declares a batch_dim: add \"batch_dim\" to the data inputs so the batch can be found")]
    NoBatchDim,
    #[error("the batch size must be at least 1")]
    ZeroBatch,
    #[error("tensor `{tensor}` has batch size {found} on its batch_dim, but tensor `{first}` has {expected}: every batch_dim must have the same size")]
    InconsistentBatch {
        tensor: String,
        found: u64,
        first: String,
        expected: u64,
    },
    #[error(
        "meta.batch_size is {meta}, but the inputs' batch_dim has size {inputs}: fix one of them"
    )]
    MetaMismatch { meta: String, inputs: u64 },
    #[error("op `{op}` has type `{op_type}`, which the rescaler does not know, and reads a tensor that depends on the batch: only the op types of docs/ops.md can be rescaled")]
    UnknownOp { op: String, op_type: String },
    #[error("op `{op}` (`{op_type}`): {reason}; the graph cannot be rescaled")]
    Unsupported {
        op: String,
        op_type: String,
        reason: String,
    },
    #[error("tensor `{tensor}`: axis {axis} of shape {shape:?} should carry the batch ({batch} x {inner}) but its size is not a multiple of it; the graph's shapes disagree with its op types")]
    Indivisible {
        tensor: String,
        axis: usize,
        shape: Vec<u64>,
        batch: u64,
        inner: u64,
    },
    #[error("tensor `{tensor}` declares batch_dim {declared}, but its shape carries the batch on axis {inferred:?}")]
    BatchDimMismatch {
        tensor: String,
        declared: usize,
        inferred: Option<usize>,
    },
    #[error("tensor `{tensor}`: its bytes override {bytes} does not scale exactly from batch {from} to {to}: remove the override or pick another batch")]
    BytesOverride {
        tensor: String,
        bytes: u64,
        from: u64,
        to: u64,
    },
    #[error("tensor `{tensor}`: at batch {batch} its size (or the graph's storage summed up to it) overflows 64 bits")]
    Overflow { tensor: String, batch: u64 },
    #[error("the rescaled graph is invalid: {0}")]
    Invalid(#[from] GraphError),
}

type R<T> = Result<T, RescaleError>;

/// The graph's batch size: the size of every `batch_dim` of a tensor no op produces.
pub fn batch_size(graph: &Graph) -> R<u64> {
    let mut found: Option<(TensorId, u64)> = None;
    for t in seeds(graph) {
        let tensor = graph.tensor(t);
        let size = tensor.shape[tensor.batch_dim.unwrap_or(0)];
        match found {
            None => found = Some((t, size)),
            Some((first, expected)) if expected != size => {
                return Err(RescaleError::InconsistentBatch {
                    tensor: tensor.name.clone(),
                    found: size,
                    first: graph.tensor(first).name.clone(),
                    expected,
                })
            }
            Some(_) => {}
        }
    }
    let batch = found.map(|f| f.1).ok_or(RescaleError::NoBatchDim)?;
    if let Some(meta) = graph.meta().and_then(|m| m.get("batch_size")) {
        if meta.as_u64() != Some(batch) {
            return Err(RescaleError::MetaMismatch {
                meta: meta.to_string(),
                inputs: batch,
            });
        }
    }
    Ok(batch)
}

/// Tensors that bring the batch in: a `batch_dim` and no producer.
fn seeds(graph: &Graph) -> impl Iterator<Item = TensorId> + '_ {
    graph
        .tensor_ids()
        .filter(move |&t| graph.tensor(t).batch_dim.is_some() && graph.producer(t).is_none())
}

/// For every tensor (by index), where its shape carries the batch, if it does.
pub fn batch_axes(graph: &Graph) -> R<Vec<Option<BatchAxis>>> {
    let batch = batch_size(graph)?;
    let mut axes: Vec<Option<BatchAxis>> = vec![None; graph.num_tensors()];
    for t in seeds(graph) {
        let axis = graph.tensor(t).batch_dim.unwrap_or(0);
        axes[t.index()] = Some(BatchAxis { axis, inner: 1 });
    }
    for id in graph.op_ids() {
        let op = graph.op(id);
        let ins: Vec<Option<BatchAxis>> = op.inputs.iter().map(|t| axes[t.index()]).collect();
        let outs = if ins.iter().all(Option::is_none) {
            declared_sources(graph, op, batch)
        } else {
            OpCtx { graph, id, batch }.infer(&ins)?
        };
        for (&t, a) in op.outputs.iter().zip(outs) {
            check_divisible(graph, t, a, batch)?;
            axes[t.index()] = a;
        }
    }
    check_declared(graph, &axes)?;
    Ok(axes)
}

/// The outputs of an op that reads nothing batch-dependent carry the batch only where the
/// file declares `batch_dim` (a constant sized by the batch: an LSTM's zero state, a class
/// token expanded to the batch); the axis may merge the batch with inner elements.
fn declared_sources(graph: &Graph, op: &Op, batch: u64) -> Vec<Option<BatchAxis>> {
    op.outputs
        .iter()
        .map(|&t| {
            let tensor = graph.tensor(t);
            let axis = tensor.batch_dim?;
            let inner = tensor
                .shape
                .get(axis)
                .map_or(1, |&d| (d / batch.max(1)).max(1));
            Some(BatchAxis { axis, inner })
        })
        .collect()
}

fn check_divisible(graph: &Graph, t: TensorId, a: Option<BatchAxis>, batch: u64) -> R<()> {
    let Some(a) = a else { return Ok(()) };
    let tensor = graph.tensor(t);
    let unit = batch.saturating_mul(a.inner);
    match tensor.shape.get(a.axis) {
        Some(&d) if unit > 0 && d % unit == 0 => Ok(()),
        _ => Err(RescaleError::Indivisible {
            tensor: tensor.name.clone(),
            axis: a.axis,
            shape: tensor.shape.clone(),
            batch,
            inner: a.inner,
        }),
    }
}

/// A produced tensor that declares `batch_dim` must carry the batch there.
fn check_declared(graph: &Graph, axes: &[Option<BatchAxis>]) -> R<()> {
    for t in graph.tensor_ids() {
        let tensor = graph.tensor(t);
        if let Some(declared) = tensor.batch_dim {
            let inferred = axes[t.index()].map(|a| a.axis);
            if inferred != Some(declared) {
                return Err(RescaleError::BatchDimMismatch {
                    tensor: tensor.name.clone(),
                    declared,
                    inferred,
                });
            }
        }
    }
    Ok(())
}

/// The graph at batch size `batch`.
pub fn rescale(graph: &Graph, batch: u64) -> R<Graph> {
    if batch == 0 {
        return Err(RescaleError::ZeroBatch);
    }
    let old = batch_size(graph)?;
    let axes = batch_axes(graph)?;
    let mut def: GraphDef = graph.to_def();
    for (t, a) in def.tensors.iter_mut().zip(&axes) {
        let Some(a) = a else { continue };
        let overflow = || RescaleError::Overflow {
            tensor: t.name.clone(),
            batch,
        };
        let dim = t.shape[a.axis] / old;
        t.shape[a.axis] = dim.checked_mul(batch).ok_or_else(overflow)?;
        if let Some(bytes) = t.bytes {
            let scaled = u128::from(bytes) * u128::from(batch);
            if scaled % u128::from(old) != 0 {
                return Err(RescaleError::BytesOverride {
                    tensor: t.name.clone(),
                    bytes,
                    from: old,
                    to: batch,
                });
            }
            t.bytes = Some(u64::try_from(scaled / u128::from(old)).map_err(|_| overflow())?);
        }
    }
    for (i, o) in def.ops.iter_mut().enumerate() {
        let op = graph.op(OpId::new(i));
        if touches_batch(op, &axes) {
            o.flops = o.flops.map(|f| scale_cost(f, old, batch));
            o.time_us = o.time_us.map(|f| scale_cost(f, old, batch));
        }
        if let (Some(attrs), Some(_)) = (o.attrs.as_mut(), op.kind) {
            rescale_attrs(graph, op, &axes, attrs, old, batch);
        }
    }
    if let Some(meta) = def.meta.as_mut() {
        if meta.get("batch_size").and_then(Value::as_u64) != Some(batch)
            && meta.contains_key("batch_size")
        {
            meta.insert("batch_size".into(), Value::from(batch));
        }
    }
    // The graph was valid at its own batch: a size that overflows now is the batch's doing
    // (a shape product, or the graph's total storage), which callers such as `fit` treat as
    // "too large" rather than as a broken graph.
    Graph::from_def(def).map_err(|e| match e {
        GraphError::SizeOverflow { tensor, .. } => RescaleError::Overflow { tensor, batch },
        e => e.into(),
    })
}

/// The attributes of a known op that hold a shape ([`SHAPE_ATTRS`]: the size of output 0)
/// or count batch elements ([`BATCH_COUNT_ATTRS`]) follow the batch: an entry equal to the
/// old extent of the batch axis becomes the new one (a `-1` stays), counts scale exactly,
/// and a `stride` beside a shape scales on the axes outside the batch.
fn rescale_attrs(
    graph: &Graph,
    op: &Op,
    axes: &[Option<BatchAxis>],
    attrs: &mut serde_json::Map<String, Value>,
    old: u64,
    new: u64,
) {
    let scale = |v: u64| {
        (u128::from(v) * u128::from(new) % u128::from(old) == 0)
            .then(|| u64::try_from(u128::from(v) * u128::from(new) / u128::from(old)).ok())
            .flatten()
    };
    for key in BATCH_COUNT_ATTRS {
        if let Some(v) = attrs.get(*key).and_then(Value::as_u64).and_then(scale) {
            attrs.insert((*key).to_string(), Value::from(v));
        }
    }
    let Some((&out, Some(a))) = op.outputs.first().map(|t| (t, axes[t.index()])) else {
        return;
    };
    let shape = &graph.tensor(out).shape;
    for key in SHAPE_ATTRS {
        let Some(Value::Array(dims)) = attrs.get_mut(*key) else {
            continue;
        };
        if dims.len() != shape.len() || dims[a.axis].as_u64() != Some(shape[a.axis]) {
            continue;
        }
        if let Some(v) = scale(shape[a.axis]) {
            dims[a.axis] = Value::from(v);
        }
        if let Some(Value::Array(stride)) = attrs.get_mut("stride") {
            for s in stride.iter_mut().take(a.axis) {
                if let Some(v) = s.as_u64().and_then(scale) {
                    *s = Value::from(v);
                }
            }
        }
    }
}

fn touches_batch(op: &Op, axes: &[Option<BatchAxis>]) -> bool {
    op.inputs
        .iter()
        .chain(&op.outputs)
        .any(|t| axes[t.index()].is_some())
}

/// `cost * to / from`, exact in integers when the cost is a whole number (as every
/// builder flops count is), so that rescaling to the same batch changes nothing and a
/// rescaled count equals the one the builder writes at the new batch.
fn scale_cost(cost: f64, from: u64, to: u64) -> f64 {
    if cost.fract() == 0.0 && (0.0..1.8e19).contains(&cost) {
        let scaled = (cost as u128) * u128::from(to);
        if scaled % u128::from(from) == 0 {
            return (scaled / u128::from(from)) as f64;
        }
    }
    cost * (to as f64) / (from as f64)
}

/// One op under inference.
struct OpCtx<'a> {
    graph: &'a Graph,
    id: OpId,
    batch: u64,
}

type Axes = Vec<Option<BatchAxis>>;

impl OpCtx<'_> {
    fn op(&self) -> &Op {
        self.graph.op(self.id)
    }

    fn fail(&self, reason: impl Into<String>) -> RescaleError {
        RescaleError::Unsupported {
            op: self.op().name.clone(),
            op_type: self.op().op_type.clone(),
            reason: reason.into(),
        }
    }

    fn input_name(&self, i: usize) -> &str {
        &self.graph.tensor(self.op().inputs[i]).name
    }

    fn input_rank(&self, i: usize) -> usize {
        self.graph.tensor(self.op().inputs[i]).shape.len()
    }

    fn outputs_like(&self, a: Option<BatchAxis>) -> Axes {
        vec![a; self.op().outputs.len()]
    }

    /// Output axes from input axes, by the op kind's [`BatchRule`].
    fn infer(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let Some(kind) = self.op().kind else {
            return Err(RescaleError::UnknownOp {
                op: self.op().name.clone(),
                op_type: self.op().op_type.clone(),
            });
        };
        match kind.spec().batch {
            BatchRule::Map => self.map(ins),
            BatchRule::Rows { data, outs, keep } => self.rows(ins, data, outs, keep),
            BatchRule::Reshape => self.reshape(ins),
            BatchRule::Permute(attr) => self.permute(ins, attr),
            BatchRule::Reduce => self.reduce(ins),
            BatchRule::MatMul { first } => self.matmul(ins, usize::from(first)),
            BatchRule::Remove => self.remove(ins),
            BatchRule::Insert => self.insert(ins),
            BatchRule::Source => Ok(self.outputs_like(None)),
            BatchRule::Refuse(reason) => Err(self.fail(reason)),
        }
    }

    fn output_rank(&self, i: usize) -> usize {
        self.graph.tensor(self.op().outputs[i]).shape.len()
    }

    /// Element-wise with broadcasting: operands aligned on their last axes.
    fn map(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let mut first: Option<(usize, usize, BatchAxis)> = None; // (operand, axes from the end, axis)
        for (i, a) in ins.iter().enumerate() {
            let Some(a) = *a else { continue };
            let from_end = self.input_rank(i) - a.axis;
            match first {
                None => first = Some((i, from_end, a)),
                Some((j, e, b)) if e != from_end || b.inner != a.inner => {
                    return Err(self.fail(format!(
                        "its operands must carry the batch on the same broadcast axis, but `{}` has {} and `{}` has {}",
                        self.input_name(j),
                        describe(Some(b)),
                        self.input_name(i),
                        describe(Some(a))
                    )))
                }
                Some(_) => {}
            }
        }
        let Some((j, from_end, a)) = first else {
            return Ok(self.outputs_like(None));
        };
        for (i, b) in ins.iter().enumerate() {
            let shape = &self.graph.tensor(self.op().inputs[i]).shape;
            let unbatched_extent = shape.len().checked_sub(from_end).map(|k| shape[k]);
            if b.is_none() && unbatched_extent.is_some_and(|d| d != 1) {
                return Err(self.fail(format!(
                    "operand `{}` does not depend on the batch, but it is broadcast against `{}` on the batch axis (size {}), so their sizes would disagree at another batch; re-export the graph with `batch_dim` on the tensors the batch reaches",
                    self.input_name(i),
                    self.input_name(j),
                    unbatched_extent.unwrap_or(0)
                )));
            }
        }
        (0..self.op().outputs.len())
            .map(|o| match self.output_rank(o).checked_sub(from_end) {
                Some(axis) => Ok(Some(BatchAxis {
                    axis,
                    inner: a.inner,
                })),
                None => Err(self.fail("an output has fewer axes than the batch needs")),
            })
            .collect()
    }

    /// The operands in `data` carry the batch alike, the others not; results in `outs`
    /// carry it as they do.
    fn rows(&self, ins: &[Option<BatchAxis>], data: Slots, outs: Slots, keep: Keep) -> R<Axes> {
        let idx: Vec<usize> = (0..ins.len()).filter(|&i| data.contains(i)).collect();
        if idx.is_empty() {
            return Err(self.fail("none of its operands may depend on the batch"));
        }
        let a = self.same_at(ins, &idx)?;
        for i in (0..ins.len()).filter(|i| !data.contains(*i)) {
            self.independent(ins, i, "operand")?;
        }
        let lead = idx
            .iter()
            .copied()
            .find(|&i| !self.is_empty(i))
            .unwrap_or(idx[0]);
        self.keep(a, keep, lead)?;
        Ok(self
            .result_slots()
            .into_iter()
            .map(|slot| outs.contains(slot).then_some(a))
            .collect())
    }

    /// The result slot of each output: through `output_mask` when the op has one.
    fn result_slots(&self) -> Vec<usize> {
        let n = self.op().outputs.len();
        let mask = self
            .op()
            .attrs
            .as_ref()
            .and_then(|m| m.get("output_mask"))
            .and_then(Value::as_array);
        if let Some(mask) = mask {
            let present: Vec<usize> = (0..mask.len())
                .filter(|&i| mask[i].as_bool() == Some(true))
                .collect();
            if present.len() == n {
                return present;
            }
        }
        (0..n).collect()
    }

    fn keep(&self, a: BatchAxis, keep: Keep, i: usize) -> R<()> {
        match keep {
            Keep::Any => Ok(()),
            Keep::Axis0 => self.on_axis0(a).map(|_| ()),
            Keep::NotAxis(k) => self.not_axis(a, usize::from(k), "an axis the op works on"),
            Keep::NotTrailing(n) => self.leading(a, i, usize::from(n)),
            Keep::NotAttr(name) => {
                self.not_axis(a, self.attr_axis(name, i)?, &format!("the `{name}` axis"))
            }
            Keep::NotAttrAxes(name) => {
                for axis in self.attr_axes(name, i)? {
                    self.not_axis(a, axis, &format!("an axis of `{name}`"))?;
                }
                Ok(())
            }
            Keep::NotPadded => {
                let rank = self.input_rank(i);
                let pad = self.attr_ints("pad")?;
                // Pair k pads axis rank - 1 - k.
                let padded = pad
                    .chunks(2)
                    .enumerate()
                    .filter(|(_, p)| p.iter().any(|&v| v != 0));
                for (k, _) in padded {
                    if let Some(axis) = rank.checked_sub(k + 1) {
                        self.not_axis(a, axis, "a padded axis")?;
                    }
                }
                Ok(())
            }
        }
    }

    /// List attribute `key` of integers.
    fn attr_ints(&self, key: &str) -> R<Vec<i64>> {
        let list = self.attr(key).and_then(Value::as_array);
        list.and_then(|l| l.iter().map(Value::as_i64).collect())
            .ok_or_else(|| self.fail(format!("attribute `{key}` must be a list of integers")))
    }

    /// List attribute `key` as axes of input `i` (negative values count from the end); an
    /// absent or empty list is every axis.
    fn attr_axes(&self, key: &str, i: usize) -> R<Vec<usize>> {
        let rank = self.input_rank(i);
        let listed = match self.attr(key) {
            None => Vec::new(),
            Some(_) => self.attr_ints(key)?,
        };
        if listed.is_empty() {
            return Ok((0..rank).collect());
        }
        listed
            .iter()
            .map(|&d| ops::axis(d, rank))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| self.fail(format!("attribute `{key}` names an axis the operand lacks")))
    }

    /// A permutation of the axes: the batch moves with its axis.
    fn permute(&self, ins: &[Option<BatchAxis>], attr: PermAttr) -> R<Axes> {
        let a = self.dependent(ins, 0)?;
        let rank = self.input_rank(0);
        let mut perm: Vec<usize> = (0..rank).collect();
        match attr {
            PermAttr::Perm | PermAttr::Dims => {
                let key = if attr == PermAttr::Perm {
                    "perm"
                } else {
                    "dims"
                };
                let list = self.attr(key).and_then(Value::as_array);
                let parsed: Option<Vec<usize>> = list.map(|l| {
                    l.iter()
                        .filter_map(|v| v.as_i64().and_then(|d| ops::axis(d, rank)))
                        .collect()
                });
                match parsed {
                    Some(p) if p.len() == rank => perm = p,
                    _ => {
                        return Err(self.fail(format!(
                            "attribute `{key}` is missing or not a permutation of {rank} axes"
                        )))
                    }
                }
            }
            PermAttr::Swap => {
                let (d0, d1) = (self.attr_axis("dim0", 0)?, self.attr_axis("dim1", 0)?);
                perm.swap(d0, d1);
            }
            PermAttr::Matrix if rank == 2 => perm.swap(0, 1),
            PermAttr::Matrix => {}
        }
        let axis = perm
            .iter()
            .position(|&p| p == a.axis)
            .ok_or_else(|| self.fail(format!("its permutation does not move axis {}", a.axis)))?;
        Ok(self.outputs_like(Some(BatchAxis {
            axis,
            inner: a.inner,
        })))
    }

    /// A reduction over attribute `dim` (all axes when absent), `keepdim` keeping them.
    fn reduce(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let a = self.dependent(ins, 0)?;
        let rank = self.input_rank(0);
        let dims: Vec<usize> = match self.attr("dim") {
            None | Some(Value::Null) => (0..rank).collect(),
            Some(Value::Array(l)) => l
                .iter()
                .filter_map(|v| v.as_i64().and_then(|d| ops::axis(d, rank)))
                .collect(),
            Some(v) => v
                .as_i64()
                .and_then(|d| ops::axis(d, rank))
                .into_iter()
                .collect(),
        };
        if dims.contains(&a.axis) {
            return Ok(self.outputs_like(None));
        }
        let keepdim = self
            .attr("keepdim")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let axis = if keepdim {
            a.axis
        } else {
            a.axis - dims.iter().filter(|&&d| d < a.axis).count()
        };
        Ok(self.outputs_like(Some(BatchAxis {
            axis,
            inner: a.inner,
        })))
    }

    /// `a [M, K] @ b [K, N]` over operands `first` and `first + 1`.
    fn matmul(&self, ins: &[Option<BatchAxis>], first: usize) -> R<Axes> {
        for i in (0..ins.len()).filter(|&i| i != first && i != first + 1) {
            self.independent(ins, i, "operand")?;
        }
        let (a, b) = (
            ins.get(first).copied().flatten(),
            ins.get(first + 1).copied().flatten(),
        );
        let out = match (a, b) {
            (Some(a), None) if a.axis == 0 => Some(a),
            (None, Some(b)) if b.axis == 1 => Some(b),
            (Some(a), Some(b)) if a.axis == 1 && b.axis == 0 && a.inner == b.inner => None,
            _ => {
                return Err(self.fail(format!(
                    "its operands carry the batch as {} and {}: only on the rows of the first, the columns of the second, or the contracted axis of both",
                    describe(a),
                    describe(b)
                )))
            }
        };
        Ok(self.outputs_like(out))
    }

    /// Removes axis `dim` (default 0).
    fn remove(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let a = self.dependent(ins, 0)?;
        let dim = self.attr_axis_or0("dim", self.input_rank(0))?;
        self.not_axis(a, dim, "the removed axis")?;
        let axis = if a.axis > dim { a.axis - 1 } else { a.axis };
        Ok(self.outputs_like(Some(BatchAxis {
            axis,
            inner: a.inner,
        })))
    }

    /// Inserts axis `dim` (default 0) into the operands' shape.
    fn insert(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let idx: Vec<usize> = (0..ins.len()).collect();
        let a = self.same_at(ins, &idx)?;
        let dim = self.attr_axis_or0("dim", self.output_rank(0))?;
        let axis = if a.axis >= dim { a.axis + 1 } else { a.axis };
        Ok(self.outputs_like(Some(BatchAxis {
            axis,
            inner: a.inner,
        })))
    }

    fn attr(&self, key: &str) -> Option<&Value> {
        self.op().attrs.as_ref().and_then(|m| m.get(key))
    }

    fn attr_axis_or0(&self, key: &str, rank: usize) -> R<usize> {
        match self.attr(key) {
            None => Ok(0),
            Some(v) => v.as_i64().and_then(|d| ops::axis(d, rank)).ok_or_else(|| {
                self.fail(format!(
                    "attribute `{key}` is not an axis of a rank-{rank} shape"
                ))
            }),
        }
    }

    fn dependent(&self, ins: &[Option<BatchAxis>], i: usize) -> R<BatchAxis> {
        ins.get(i).copied().flatten().ok_or_else(|| {
            self.fail(format!(
                "operand {i} does not depend on the batch but another operand does"
            ))
        })
    }

    fn independent(&self, ins: &[Option<BatchAxis>], i: usize, what: &str) -> R<()> {
        match ins.get(i).copied().flatten() {
            None => Ok(()),
            Some(_) => Err(self.fail(format!(
                "{what} `{}` depends on the batch",
                self.input_name(i)
            ))),
        }
    }

    /// The batch must sit on one of the first `rank - trailing` axes of input `i`.
    fn leading(&self, a: BatchAxis, i: usize, trailing: usize) -> R<()> {
        if a.axis + trailing < self.input_rank(i) {
            return Ok(());
        }
        Err(self.fail(format!(
            "the batch is on axis {} of `{}`, one of the last {trailing} axes the op works on",
            a.axis,
            self.input_name(i)
        )))
    }

    fn on_axis0(&self, a: BatchAxis) -> R<BatchAxis> {
        if a.axis == 0 {
            return Ok(a);
        }
        Err(self.fail(format!(
            "the batch is on axis {}, but this image op needs it on axis 0 (N of NCHW)",
            a.axis
        )))
    }

    fn not_axis(&self, a: BatchAxis, axis: usize, what: &str) -> R<()> {
        if a.axis != axis {
            return Ok(());
        }
        Err(self.fail(format!("the batch is on {what} ({axis})")))
    }

    /// Attribute `key` as an axis of input `i` (negative values count from the end);
    /// an absent `dim` is axis 0, as in ATen.
    fn attr_axis(&self, key: &str, i: usize) -> R<usize> {
        let rank = self.input_rank(i);
        match self.attr(key) {
            None if key == "dim" => Ok(0),
            attr => attr
                .and_then(Value::as_i64)
                .and_then(|d| ops::axis(d, rank))
                .ok_or_else(|| {
                    self.fail(format!(
                        "attribute `{key}` is missing or not an axis of the operand"
                    ))
                }),
        }
    }

    /// Operands `idx` carry the batch alike, the first of them (skipping empty tensors:
    /// a legacy `[0]`-shaped operand of a concatenation holds nothing) at least.
    fn is_empty(&self, i: usize) -> bool {
        self.graph.tensor(self.op().inputs[i]).shape.contains(&0)
    }

    fn same_at(&self, ins: &[Option<BatchAxis>], idx: &[usize]) -> R<BatchAxis> {
        let idx: Vec<usize> = idx.iter().copied().filter(|&i| !self.is_empty(i)).collect();
        let Some(&lead) = idx.first() else {
            return Err(self.fail("its operands are empty"));
        };
        let first = self.dependent(ins, lead)?;
        for &i in &idx[1..] {
            if ins.get(i).copied().flatten() != Some(first) {
                return Err(self.fail(format!(
                    "operand `{}` must carry the batch as `{}` does ({})",
                    self.input_name(i),
                    self.input_name(lead),
                    describe(Some(first))
                )));
            }
        }
        Ok(first)
    }

    /// A view with another shape: the batch keeps its element stride (module docs).
    fn reshape(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let a = self.dependent(ins, 0)?;
        let x = &self.graph.tensor(self.op().inputs[0]).shape;
        let stride = a
            .inner
            .saturating_mul(x[a.axis + 1..].iter().product::<u64>());
        let mut out = Vec::new();
        for &t in &self.op().outputs {
            let y = &self.graph.tensor(t).shape;
            let declared = self.graph.tensor(t).batch_dim;
            out.push(Some(self.reshaped_axis(stride, y, declared).ok_or_else(
                || {
                    self.fail(format!(
                    "the batch (axis {} of {x:?}) is split across axes of the output shape {y:?}",
                    a.axis
                ))
                },
            )?));
        }
        Ok(out)
    }

    /// The output axis that keeps the batch at element stride `stride`: the first that
    /// can, unless the output declares a `batch_dim` that can too (with size-1 axes around
    /// the batch, or at batch 1, several axes can; the file's word breaks the tie).
    fn reshaped_axis(&self, stride: u64, y: &[u64], declared: Option<usize>) -> Option<BatchAxis> {
        let fits = |j: usize| {
            let suffix: u64 = y[j + 1..].iter().product();
            if suffix == 0 || stride == 0 || stride % suffix != 0 {
                return None;
            }
            let inner = stride / suffix;
            let unit = inner.checked_mul(self.batch)?;
            (y[j] % unit == 0 && y[j] > 0).then_some(BatchAxis { axis: j, inner })
        };
        declared
            .filter(|&j| j < y.len())
            .and_then(fits)
            .or_else(|| (0..y.len()).find_map(fits))
    }
}

fn describe(a: Option<BatchAxis>) -> String {
    match a {
        None => "no batch".to_string(),
        Some(BatchAxis { axis, inner: 1 }) => format!("the batch on axis {axis}"),
        Some(BatchAxis { axis, inner }) => format!("the batch on axis {axis} (times {inner})"),
    }
}
