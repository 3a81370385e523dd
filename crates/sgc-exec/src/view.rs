//! Views of an exported graph: PyTorch's `t`, `transpose`, `permute`, `expand`, `slice`
//! (with any step: a stride multiple), `split`, `select` and `unbind` return views of their
//! input, and the exporter declares their outputs as aliases (`alias_of`), so they take no
//! memory of their own. The executor runs such an op
//! as a no-op and hands each reader of the view a [`View`] operand: the stored tensor of
//! the alias chain's root plus the steps from it to the view, which the CPU backend
//! materialises on read. Views are read-only in a traced step (functionalisation leaves
//! writes to `copy_` into state), so materialising on read is exact.

use crate::backend::{View, ViewStep};
use crate::error::ExecError;
use crate::ops::shape::slice_bounds;
use serde_json::Value;
use sgc_ir::ops::OpKind;
use sgc_ir::{Graph, TensorId};

/// The view from `t`'s storage root to `t`, or `None` when `t` is the root or every step
/// keeps the row-major layout (a reshape reads the stored tensor as it is).
pub(crate) fn view_of(graph: &Graph, t: TensorId) -> Result<Option<View>, ExecError> {
    let mut steps = Vec::new();
    let mut cur = t;
    while graph.tensor(cur).alias_of.is_some() {
        let Some(op) = graph.producer(cur) else { break };
        let o = graph.op(op);
        let slot = o.outputs.iter().position(|&x| x == cur).unwrap_or(0);
        if o.kind == Some(OpKind::AtenSelect) {
            // The slice keeps the selected axis (of length 1); the select drops it.
            let y = graph.tensor(cur).shape.iter().map(|&d| d as usize);
            steps.push(ViewStep::Reshape(y.collect()));
        }
        steps.push(step(graph, op, slot, cur)?);
        cur = o.inputs[0];
    }
    if steps.iter().all(|s| matches!(s, ViewStep::Reshape(_))) {
        return Ok(None);
    }
    steps.reverse();
    let base = graph
        .tensor(cur)
        .shape
        .iter()
        .map(|&d| d as usize)
        .collect();
    Ok(Some(View { base, steps }))
}

fn step(
    graph: &Graph,
    op: sgc_ir::OpId,
    slot: usize,
    out: TensorId,
) -> Result<ViewStep, ExecError> {
    let o = graph.op(op);
    let shape =
        |t: TensorId| -> Vec<usize> { graph.tensor(t).shape.iter().map(|&d| d as usize).collect() };
    let (x, y) = (shape(o.inputs[0]), shape(out));
    let attr = |k: &str| o.attrs.as_ref().and_then(|m| m.get(k));
    let axis = |k: &str, rank: usize| -> Option<usize> {
        sgc_ir::ops::axis(attr(k).map_or(Some(0), Value::as_i64)?, rank)
    };
    let bad = || ExecError::BadAttr {
        op: o.name.clone(),
        op_type: o.op_type.clone(),
        detail: format!("the view it makes ({x:?} -> {y:?}) cannot be read by the executor"),
    };
    use OpKind as K;
    Ok(match o.kind.ok_or_else(bad)? {
        K::AtenView
        | K::AtenUnsafeView
        | K::AtenAlias
        | K::Reshape
        | K::AtenUnsqueeze
        | K::AtenSqueezeDim => ViewStep::Reshape(y),
        K::AtenT if x.len() == 2 => ViewStep::Permute(vec![1, 0]),
        K::AtenT => ViewStep::Reshape(y),
        K::AtenTranspose => {
            let (a, b) = (
                axis("dim0", x.len()).ok_or_else(bad)?,
                axis("dim1", x.len()).ok_or_else(bad)?,
            );
            let mut perm: Vec<usize> = (0..x.len()).collect();
            perm.swap(a, b);
            ViewStep::Permute(perm)
        }
        K::AtenPermute => {
            let dims = attr("dims").and_then(Value::as_array).ok_or_else(bad)?;
            let perm = dims
                .iter()
                .map(|d| d.as_i64().and_then(|d| sgc_ir::ops::axis(d, x.len())))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(bad)?;
            ViewStep::Permute(perm)
        }
        K::AtenExpand => ViewStep::Expand(y),
        K::AtenSlice | K::AtenSplit | K::AtenSelect | K::AtenUnbind => {
            let a = axis("dim", x.len()).ok_or_else(bad)?;
            let len = x[a];
            let (start, end, step) = match o.kind {
                Some(K::AtenSlice) => {
                    let bound = |k: &str| attr(k).and_then(Value::as_i64);
                    let step = attr("step")
                        .map_or(Some(1), Value::as_u64)
                        .ok_or_else(bad)?;
                    let (start, end) = slice_bounds(len, bound("start"), bound("end"));
                    (start, end, step as usize)
                }
                Some(K::AtenUnbind) => (slot, slot + 1, 1),
                Some(K::AtenSplit) => {
                    let size = attr("split_size").and_then(Value::as_u64).ok_or_else(bad)? as usize;
                    ((slot * size).min(len), ((slot + 1) * size).min(len), 1)
                }
                _ => {
                    let i = attr("index").and_then(Value::as_i64).ok_or_else(bad)?;
                    let i = if i < 0 { i + len as i64 } else { i } as usize;
                    (i, i + 1, 1)
                }
            };
            let slice = ViewStep::Slice {
                axis: a,
                start,
                end,
                step,
            };
            if !slice.fits(&x) {
                return Err(bad());
            }
            // A select drops the sliced axis too: the same elements in the same order.
            slice
        }
        _ => return Err(bad()),
    })
}
