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
//! Each op type of `docs/ops.md` has a rule from its inputs' axes to its outputs' axes:
//! element-wise, row-wise and image ops carry the axis over (images only on axis 0, row
//! ops only on a leading axis); `transpose` moves it with its permutation; reductions over
//! the batch (`matmul_tn`, `bias_add_grad`, `conv2d_grad_weight`, `embedding_grad`,
//! `cross_entropy`, the `dgamma`/`dbeta` of the norm gradients) give batch-independent
//! outputs; `batch_norm` statistics are per channel, `layer_norm` statistics per row. A
//! `reshape` keeps the batch at the same element stride: with `s = inner * prod(x.shape[axis+1..])`,
//! the output axis `j` is the first whose suffix product `p_j = prod(y.shape[j+1..])`
//! divides `s` and whose size is a multiple of `B * s / p_j`; that covers flatten
//! `[N, C, H, W] -> [N, C*H*W]` and `[B*T, d] <-> [B, T, d]`. An op whose inputs do not
//! depend on the batch is never inspected, whatever its type; any other op whose type has
//! no rule, or whose operands break its rule (the batch on a channel axis, a weight that
//! depends on the batch, ...), is an error naming the op.
//!
//! [`rescale`] then replaces every batch-carrying axis of size `outer * B * inner` by
//! `outer * B' * inner`, scales a `bytes` override by `B'/B` when that is exact (else an
//! error), and scales the `flops` and `time_us` of every op that reads or writes a
//! batch-dependent tensor by `B'/B`. **Assumption:** an op's cost is linear in the batch.
//! It holds exactly for the flops formulas of `docs/ops.md` (each is a multiple of the
//! batch-carrying element counts); for measured times it is an approximation. `meta.batch_size`
//! becomes `B'`. Rescaling to `B' = B` returns a graph equal to the input.

use crate::error::GraphError;
use crate::graph::{Graph, GraphDef, Op};
use crate::ids::{OpId, TensorId};
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
    #[error("tensor `{tensor}`: at batch {batch} its size overflows 64 bits")]
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
            vec![None; op.outputs.len()]
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
    }
    if let Some(meta) = def.meta.as_mut() {
        if meta.get("batch_size").and_then(Value::as_u64) != Some(batch)
            && meta.contains_key("batch_size")
        {
            meta.insert("batch_size".into(), Value::from(batch));
        }
    }
    Ok(Graph::from_def(def)?)
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

    /// Output axes from input axes, by op type.
    fn infer(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let ty = self.op().op_type.as_str();
        match ty {
            "relu" | "gelu" | "add" | "mul" | "relu_grad" | "gelu_grad" => {
                Ok(self.outputs_like(Some(self.all_same(ins, 0..ins.len())?)))
            }
            "softmax" | "softmax_grad" => {
                let a = self.all_same(ins, 0..ins.len())?;
                self.leading(a, 0, 1)?;
                Ok(self.outputs_like(Some(a)))
            }
            "bias_add" => self.bias_add(ins),
            "bias_add_grad" => {
                let a = self.dependent(ins, 0)?;
                self.not_axis(a, self.attr_axis(0)?, "the bias axis")?;
                Ok(self.outputs_like(None))
            }
            "matmul" => {
                self.independent(ins, 1, "the weight operand")?;
                let a = self.dependent(ins, 0)?;
                self.leading(a, 0, 1)?;
                Ok(self.outputs_like(Some(a)))
            }
            "matmul_tn" => {
                let a = self.all_same(ins, 0..2)?;
                self.leading(a, 0, 1)?;
                Ok(self.outputs_like(None))
            }
            "batched_matmul" => {
                let a = self.all_same(ins, 0..2)?;
                self.leading(a, 0, 2)?;
                Ok(self.outputs_like(Some(a)))
            }
            "conv2d" | "conv2d_grad_input" => {
                self.independent(ins, 1, "the weight operand")?;
                let a = self.dependent(ins, 0)?;
                Ok(self.outputs_like(Some(self.on_axis0(a)?)))
            }
            "conv2d_grad_weight" => {
                self.on_axis0(self.all_same(ins, 0..2)?)?;
                Ok(self.outputs_like(None))
            }
            "max_pool2d"
            | "global_avg_pool"
            | "global_avg_pool_grad"
            | "upsample_nearest2x"
            | "upsample_nearest2x_grad"
            | "max_pool2d_grad" => {
                let a = self.all_same(ins, 0..ins.len())?;
                Ok(self.outputs_like(Some(self.on_axis0(a)?)))
            }
            "batch_norm" | "batch_norm_grad" => self.batch_norm(ins),
            "layer_norm" | "layer_norm_grad" => self.layer_norm(ins),
            "embedding" => {
                self.independent(ins, 1, "the embedding table")?;
                Ok(self.outputs_like(Some(self.dependent(ins, 0)?)))
            }
            "embedding_grad" => {
                self.all_same(ins, 0..2)?;
                Ok(self.outputs_like(None))
            }
            "cross_entropy" | "cross_entropy_grad" => {
                let a = self.all_same(ins, 0..2)?;
                self.leading(a, 0, 1)?;
                let out = if ty == "cross_entropy" { None } else { Some(a) };
                Ok(self.outputs_like(out))
            }
            "transpose" => self.transpose(ins),
            "concat" => {
                let a = self.all_same(ins, 0..ins.len())?;
                self.not_axis(a, self.attr_axis(0)?, "the concatenation axis")?;
                Ok(self.outputs_like(Some(a)))
            }
            "slice" => {
                let a = self.dependent(ins, 0)?;
                self.not_axis(a, self.attr_axis(0)?, "the sliced axis")?;
                Ok(self.outputs_like(Some(a)))
            }
            "reshape" => self.reshape(ins),
            "sgd_update" => {
                Err(self
                    .fail("the parameter update reads a tensor whose shape depends on the batch"))
            }
            _ => Err(RescaleError::UnknownOp {
                op: self.op().name.clone(),
                op_type: ty.to_string(),
            }),
        }
    }

    /// Inputs `range` (equal shapes, or equal leading axes) must all carry the batch alike.
    fn all_same(&self, ins: &[Option<BatchAxis>], range: std::ops::Range<usize>) -> R<BatchAxis> {
        let (start, end) = (range.start, range.end.min(ins.len()));
        let first = (start..end)
            .find(|&i| ins[i].is_some())
            .ok_or_else(|| self.fail("none of its operands depends on the batch"))?;
        for i in start..end {
            if ins[i] != ins[first] {
                return Err(self.fail(format!(
                    "its operands must carry the batch alike, but `{}` has {} and `{}` has {}",
                    self.input_name(first),
                    describe(ins[first]),
                    self.input_name(i),
                    describe(ins[i])
                )));
            }
        }
        Ok(ins[first].unwrap_or(BatchAxis { axis: 0, inner: 1 }))
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

    /// The `axis` attribute, negative values counting from the end of input `i`'s shape.
    fn attr_axis(&self, i: usize) -> R<usize> {
        let attr = self.op().attrs.as_ref().and_then(|m| m.get("axis"));
        let rank = self.input_rank(i) as i64;
        match attr.and_then(Value::as_i64) {
            Some(a) if (0..rank).contains(&a) => Ok(a as usize),
            Some(a) if (-rank..0).contains(&a) => Ok((a + rank) as usize),
            _ => Err(self.fail("attribute `axis` is missing or not an axis of the operand")),
        }
    }

    fn bias_add(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        self.independent(ins, 1, "the bias")?;
        let a = self.dependent(ins, 0)?;
        self.not_axis(a, self.attr_axis(0)?, "the bias axis")?;
        Ok(self.outputs_like(Some(a)))
    }

    /// `batch_norm (x, gamma, beta) -> (y, mean, invstd)` and
    /// `batch_norm_grad (x, gamma, mean, invstd, dy) -> (dx, dgamma, dbeta)`: statistics and
    /// parameter gradients are per channel (axis 1).
    fn batch_norm(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let grad = self.op().op_type == "batch_norm_grad";
        let data: &[usize] = if grad { &[0, 4] } else { &[0] };
        let a = self.same_at(ins, data)?;
        for i in (0..ins.len()).filter(|i| !data.contains(i)) {
            self.independent(ins, i, "a per-channel operand")?;
        }
        self.not_axis(a, 1, "the channel axis")?;
        let mut out = self.outputs_like(None);
        out[0] = Some(a);
        Ok(out)
    }

    /// `layer_norm (x, gamma, beta) -> (y, mean, rstd)`, statistics per row;
    /// `layer_norm_grad (x, gamma, mean, rstd, dy) -> (dx, dgamma, dbeta)`.
    fn layer_norm(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let grad = self.op().op_type == "layer_norm_grad";
        let data: &[usize] = if grad { &[0, 2, 3, 4] } else { &[0] };
        let a = self.same_at(ins, data)?;
        self.independent(ins, 1, "gamma")?;
        if !grad {
            self.independent(ins, 2, "beta")?;
        }
        self.leading(a, 0, 1)?;
        Ok(if grad {
            let mut out = self.outputs_like(None);
            out[0] = Some(a);
            out
        } else {
            self.outputs_like(Some(a))
        })
    }

    fn same_at(&self, ins: &[Option<BatchAxis>], idx: &[usize]) -> R<BatchAxis> {
        let first = self.dependent(ins, idx[0])?;
        for &i in &idx[1..] {
            if ins.get(i).copied().flatten() != Some(first) {
                return Err(self.fail(format!(
                    "operand `{}` must carry the batch as `{}` does ({})",
                    self.input_name(i),
                    self.input_name(idx[0]),
                    describe(Some(first))
                )));
            }
        }
        Ok(first)
    }

    /// `y.shape[i] = x.shape[perm[i]]`: the batch moves to the `i` with `perm[i] = axis`.
    fn transpose(&self, ins: &[Option<BatchAxis>]) -> R<Axes> {
        let a = self.dependent(ins, 0)?;
        let perm = self
            .op()
            .attrs
            .as_ref()
            .and_then(|m| m.get("perm"))
            .and_then(Value::as_array)
            .ok_or_else(|| self.fail("attribute `perm` is missing"))?;
        let axis = perm
            .iter()
            .position(|p| p.as_u64() == Some(a.axis as u64))
            .ok_or_else(|| self.fail(format!("attribute `perm` does not move axis {}", a.axis)))?;
        Ok(self.outputs_like(Some(BatchAxis {
            axis,
            inner: a.inner,
        })))
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
            out.push(Some(self.reshaped_axis(stride, y).ok_or_else(|| {
                self.fail(format!(
                    "the batch (axis {} of {x:?}) is split across axes of the output shape {y:?}",
                    a.axis
                ))
            })?));
        }
        Ok(out)
    }

    fn reshaped_axis(&self, stride: u64, y: &[u64]) -> Option<BatchAxis> {
        (0..y.len()).find_map(|j| {
            let suffix: u64 = y[j + 1..].iter().product();
            if suffix == 0 || stride == 0 || stride % suffix != 0 {
                return None;
            }
            let inner = stride / suffix;
            let unit = inner.checked_mul(self.batch)?;
            (y[j] % unit == 0 && y[j] > 0).then_some(BatchAxis { axis: j, inner })
        })
    }
}

fn describe(a: Option<BatchAxis>) -> String {
    match a {
        None => "no batch".to_string(),
        Some(BatchAxis { axis, inner: 1 }) => format!("the batch on axis {axis}"),
        Some(BatchAxis { axis, inner }) => format!("the batch on axis {axis} (times {inner})"),
    }
}
