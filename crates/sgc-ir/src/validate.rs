//! The reader's rules (format doc, "Rules a reader enforces"), applied to a
//! [`GraphDef`] to produce a [`Graph`]. One function per concern; each error names the
//! op or tensor at fault. The first violation found is returned, checking tensors
//! before ops and ops in file order, so the message is stable.

use crate::error::GraphError;
use crate::graph::{Graph, GraphDef, Lookup, Op, OpDef, Tensor, TensorDef};
use crate::ids::{OpId, TensorId, TensorKind};
use crate::ops::{Effect, OpKind};

use std::collections::HashMap;

impl Graph {
    /// Validates a definition against every rule of the format doc.
    pub fn from_def(def: GraphDef) -> Result<Graph, GraphError> {
        build(def)
    }
}

pub(crate) fn build(def: GraphDef) -> Result<Graph, GraphError> {
    let tensor_ids = index_tensors(&def.tensors)?;
    let mut tensors = Vec::with_capacity(def.tensors.len());
    for t in &def.tensors {
        tensors.push(check_tensor(t, &tensor_ids)?);
    }
    let root = resolve_aliases(&tensors)?;
    check_total_storage(&tensors)?;
    let op_ids = index_ops(&def.ops)?;
    let mut ops = Vec::with_capacity(def.ops.len());
    for o in &def.ops {
        ops.push(check_op(o, &tensor_ids)?);
    }
    let producer = find_producers(&ops, &tensors)?;
    check_order(&ops, &tensors, &producer)?;
    check_views(&ops, &tensors, &producer, &root)?;
    let outputs = def
        .outputs
        .iter()
        .map(|n| {
            tensor_ids
                .get(n)
                .copied()
                .ok_or_else(|| GraphError::UndeclaredOutput(n.clone()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let loss = match &def.loss {
        Some(n) => Some(
            tensor_ids
                .get(n)
                .copied()
                .ok_or_else(|| GraphError::UndeclaredLoss(n.clone()))?,
        ),
        None => None,
    };
    let lookup = Lookup {
        tensor_ids,
        op_ids,
        producer,
        root,
    };
    Ok(Graph::assemble(def, tensors, ops, (outputs, loss), lookup))
}

fn index_tensors(defs: &[TensorDef]) -> Result<HashMap<String, TensorId>, GraphError> {
    index(
        defs.iter().map(|t| &t.name),
        TensorId::new,
        GraphError::DuplicateTensor,
    )
}

fn index_ops(defs: &[OpDef]) -> Result<HashMap<String, OpId>, GraphError> {
    index(
        defs.iter().map(|o| &o.name),
        OpId::new,
        GraphError::DuplicateOp,
    )
}

/// Each name to the id of its position; a name given twice is `duplicate(name)`.
fn index<'a, Id>(
    names: impl ExactSizeIterator<Item = &'a String>,
    id: fn(usize) -> Id,
    duplicate: fn(String) -> GraphError,
) -> Result<HashMap<String, Id>, GraphError> {
    let mut ids = HashMap::with_capacity(names.len());
    for (i, name) in names.enumerate() {
        if ids.insert(name.clone(), id(i)).is_some() {
            return Err(duplicate(name.clone()));
        }
    }
    Ok(ids)
}

fn check_tensor(t: &TensorDef, ids: &HashMap<String, TensorId>) -> Result<Tensor, GraphError> {
    let overflow = |what: &str| GraphError::SizeOverflow {
        tensor: t.name.clone(),
        what: what.to_string(),
    };
    let numel = t
        .shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or_else(|| overflow("the product of its shape"))?;
    let computed = numel
        .checked_mul(t.dtype.size())
        .ok_or_else(|| overflow("product(shape) * size_of(dtype)"))?;
    let batch_dim = match t.batch_dim {
        Some(d) if d >= t.shape.len() as u64 => {
            return Err(GraphError::BadBatchDim {
                tensor: t.name.clone(),
                batch_dim: d.to_string(),
                rank: t.shape.len(),
            })
        }
        Some(d) => Some(d as usize),
        None => None,
    };
    let alias_of = match &t.alias_of {
        Some(a) => Some(*ids.get(a).ok_or_else(|| GraphError::UndeclaredAlias {
            tensor: t.name.clone(),
            alias_of: a.clone(),
        })?),
        None => None,
    };
    Ok(Tensor {
        name: t.name.clone(),
        dtype: t.dtype,
        shape: t.shape.clone(),
        bytes_override: t.bytes,
        kind: t.kind,
        alias_of,
        batch_dim,
        size: t.bytes.unwrap_or(computed),
    })
}

/// The bytes of every storage (each tensor that is not a view) add up within 64 bits.
/// Every figure of the memory model (resident bytes at a step, peak, lower bound, an
/// arena's live bytes) is a sum of distinct storages, so none of them can overflow, and
/// none is reported saturated at `u64::MAX` instead of its true value. The error names the
/// tensor at which the running sum passes `u64::MAX`.
fn check_total_storage(tensors: &[Tensor]) -> Result<(), GraphError> {
    let mut total = 0u64;
    for t in tensors.iter().filter(|t| t.alias_of.is_none()) {
        total = total
            .checked_add(t.size)
            .ok_or_else(|| GraphError::SizeOverflow {
                tensor: t.name.clone(),
                what: "the graph's storage (the bytes of every tensor that is not a view, added up to this one)".into(),
            })?;
    }
    Ok(())
}

/// Follows every `alias_of` chain to the tensor that owns the storage. A chain that
/// comes back to a tensor already on it is a cycle; the error names that tensor, which is
/// on the cycle (the chain's start may only lead into it).
fn resolve_aliases(tensors: &[Tensor]) -> Result<Vec<TensorId>, GraphError> {
    const UNKNOWN: u32 = u32::MAX;
    let mut root = vec![TensorId(UNKNOWN); tensors.len()];
    let mut on_path = vec![false; tensors.len()];
    for start in 0..tensors.len() {
        let mut path = Vec::new();
        let mut cur = start;
        let found = loop {
            if root[cur].0 != UNKNOWN {
                break root[cur];
            }
            if on_path[cur] {
                return Err(GraphError::AliasCycle(tensors[cur].name.clone()));
            }
            on_path[cur] = true;
            path.push(cur);
            match tensors[cur].alias_of {
                Some(next) => cur = next.index(),
                None => break TensorId::new(cur),
            }
        };
        for p in path {
            root[p] = found;
            on_path[p] = false;
        }
    }
    Ok(root)
}

fn check_op(o: &OpDef, ids: &HashMap<String, TensorId>) -> Result<Op, GraphError> {
    let resolve = |names: &[String]| -> Result<Vec<TensorId>, GraphError> {
        names
            .iter()
            .map(|n| {
                ids.get(n)
                    .copied()
                    .ok_or_else(|| GraphError::UndeclaredTensor {
                        op: o.name.clone(),
                        tensor: n.clone(),
                    })
            })
            .collect()
    };
    let inputs = resolve(&o.inputs)?;
    let outputs = resolve(&o.outputs)?;
    let kind = OpKind::parse(&o.op);
    check_effect(o, kind)?;
    for (field, v) in [("time_us", o.time_us), ("flops", o.flops)] {
        if let Some(v) = v {
            if !v.is_finite() || v < 0.0 {
                return Err(GraphError::BadCost {
                    op: o.name.clone(),
                    field: field.to_string(),
                    value: v.to_string(),
                });
            }
        }
    }
    let mut inplace = Vec::with_capacity(o.inplace.len());
    for &(out, inp) in &o.inplace {
        let bad = |why: String| GraphError::BadInplace {
            op: o.name.clone(),
            pair: format!("[{out}, {inp}]"),
            why,
        };
        if out >= outputs.len() as u64 {
            return Err(bad(format!("the op has {} outputs", outputs.len())));
        }
        if inp >= inputs.len() as u64 {
            return Err(bad(format!("the op has {} inputs", inputs.len())));
        }
        inplace.push((out as usize, inp as usize));
    }
    Ok(Op {
        name: o.name.clone(),
        op_type: o.op.clone(),
        kind,
        inputs,
        outputs,
        phase: o.phase,
        time_us: o.time_us,
        flops: o.flops,
        attrs: o.attrs.clone(),
        inplace,
        recomputable: o.recomputable,
    })
}

/// The op table decides what an op does besides computing its outputs: a type it lists as
/// drawing random numbers or writing state must not be `recomputable`, whatever the file
/// says (the planners and the verifier read the flag). A type the table does not know
/// keeps the file's flag.
fn check_effect(o: &OpDef, kind: Option<OpKind>) -> Result<(), GraphError> {
    let effect = match kind.map(|k| k.spec().effect) {
        Some(Effect::Random) => "draws random numbers",
        Some(Effect::Writes) => "writes state",
        Some(Effect::Pure) | None => return Ok(()),
    };
    if !o.recomputable {
        return Ok(());
    }
    Err(GraphError::EffectfulRecomputable {
        op: o.name.clone(),
        op_type: o.op.clone(),
        effect,
    })
}

fn find_producers(ops: &[Op], tensors: &[Tensor]) -> Result<Vec<Option<OpId>>, GraphError> {
    let mut producer: Vec<Option<OpId>> = vec![None; tensors.len()];
    for (i, op) in ops.iter().enumerate() {
        for &t in &op.outputs {
            let tensor = &tensors[t.index()];
            if tensor.kind != TensorKind::Activation {
                return Err(GraphError::NonActivationProduced {
                    op: op.name.clone(),
                    tensor: tensor.name.clone(),
                    kind: tensor.kind.as_str().to_string(),
                });
            }
            if let Some(first) = producer[t.index()] {
                return Err(GraphError::ProducedTwice {
                    tensor: tensor.name.clone(),
                    first: ops[first.index()].name.clone(),
                    second: op.name.clone(),
                });
            }
            producer[t.index()] = Some(OpId::new(i));
        }
    }
    for (t, p) in tensors.iter().zip(&producer) {
        if t.kind == TensorKind::Activation && p.is_none() {
            return Err(GraphError::NeverProduced(t.name.clone()));
        }
    }
    Ok(producer)
}

fn check_order(
    ops: &[Op],
    tensors: &[Tensor],
    producer: &[Option<OpId>],
) -> Result<(), GraphError> {
    for (i, op) in ops.iter().enumerate() {
        for &t in &op.inputs {
            if let Some(p) = producer[t.index()] {
                if p.index() >= i {
                    return Err(GraphError::ReadBeforeProduced {
                        op: op.name.clone(),
                        tensor: tensors[t.index()].name.clone(),
                        producer: ops[p.index()].name.clone(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// A view shares its base's storage, so that storage must exist whenever the view is made
/// or read: when the root of a view's `alias_of` chain is an activation, its producer runs
/// before any op that reads the view, and before (or, listing the root first among its
/// outputs, as) the op that makes it. Without this rule the memory model would meet a view
/// of storage that is not allocated yet.
fn check_views(
    ops: &[Op],
    tensors: &[Tensor],
    producer: &[Option<OpId>],
    root: &[TensorId],
) -> Result<(), GraphError> {
    for (i, op) in ops.iter().enumerate() {
        let uses = op.inputs.iter().map(|&t| (t, None));
        let makes = op.outputs.iter().enumerate().map(|(k, &t)| (t, Some(k)));
        for (t, out_pos) in uses.chain(makes) {
            let r = root[t.index()];
            let Some(p) = producer[r.index()].filter(|_| r != t) else {
                continue;
            };
            let root_first = |k: usize| op.outputs[..k].contains(&r);
            let ok = p.index() < i || (p.index() == i && out_pos.is_some_and(root_first));
            if !ok {
                return Err(GraphError::ViewBeforeBase {
                    op: op.name.clone(),
                    view: tensors[t.index()].name.clone(),
                    base: tensors[r.index()].name.clone(),
                    producer: ops[p.index()].name.clone(),
                });
            }
        }
    }
    Ok(())
}
