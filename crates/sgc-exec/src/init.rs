//! Deterministic values for every input and persistent tensor, from a seed.
//!
//! A splitmix64 stream per tensor (seeded by the seed and the tensor's name, so adding a
//! tensor does not change the others) gives uniform values:
//! - f32 inputs: uniform in [-1, 1);
//! - integer inputs (embedding ids, labels): uniform in `0..classes`, the class count read
//!   from the consuming op: the `embedding` weight's rows, the `cross_entropy` logits'
//!   last axis (an integer input read by no such op is an error);
//! - params: norm scales (`gamma` of `batch_norm`/`layer_norm`) 1, rank-1 params otherwise
//!   0 (biases, norm shifts); weights uniform in `±1/sqrt(fan_in)` with fan_in the rows of
//!   a matrix or `C*kh*kw` of a convolution kernel;
//! - state and consts: 0.

use crate::error::ExecError;
use crate::host::HostTensor;
use sgc_ir::ops::Init;
use sgc_ir::{DType, Graph, TensorId, TensorKind};

pub use sgc_ir::rng::SplitMix64;

/// FNV-1a of a name, to derive one stream per tensor.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Seeded values for every input and persistent storage root of `graph`, by name.
pub fn seeded(graph: &Graph, seed: u64) -> Result<Vec<(String, HostTensor)>, ExecError> {
    let mut out = Vec::new();
    for t in graph.tensor_ids() {
        let d = graph.tensor(t);
        let wanted = d.kind == TensorKind::Input || d.kind.is_persistent();
        if !wanted || graph.storage_root(t) != t {
            continue;
        }
        let mut rng = SplitMix64::new(seed ^ name_hash(&d.name));
        out.push((d.name.clone(), value(graph, t, &mut rng)?));
    }
    Ok(out)
}

fn value(graph: &Graph, t: TensorId, rng: &mut SplitMix64) -> Result<HostTensor, ExecError> {
    let d = graph.tensor(t);
    let shape: Vec<usize> = d.shape.iter().map(|&x| x as usize).collect();
    let n: usize = shape.iter().product();
    let err = |detail: &str| ExecError::Init {
        tensor: d.name.clone(),
        detail: detail.to_string(),
    };
    match (d.kind, d.dtype) {
        (TensorKind::Input, DType::F32) => Ok(HostTensor::f32(
            shape,
            (0..n).map(|_| 2.0 * rng.next_f32() - 1.0).collect(),
        )),
        (TensorKind::Input, DType::I64 | DType::I32) => {
            let classes = class_count(graph, t).ok_or_else(|| {
                err("integer input read by no embedding or cross_entropy op: no range to draw from")
            })?;
            let ids: Vec<i64> = (0..n).map(|_| (rng.next_u64() % classes) as i64).collect();
            Ok(if d.dtype == DType::I64 {
                HostTensor::i64(shape, ids)
            } else {
                HostTensor {
                    shape,
                    data: crate::host::HostData::I32(ids.into_iter().map(|v| v as i32).collect()),
                }
            })
        }
        (TensorKind::Param, DType::F32) => Ok(HostTensor::f32(
            shape.clone(),
            param_values(graph, t, &shape, rng),
        )),
        (_, DType::F32) => Ok(HostTensor::f32(shape, vec![0.0; n])),
        // f64 and half-precision inputs and parameters: the f32 values widened or
        // rounded, so a graph traced in f64, f16 or bf16 starts from the same numbers as
        // its f32 twin.
        (TensorKind::Input | TensorKind::Param, DType::F64 | DType::F16 | DType::Bf16) => {
            let wide = if d.kind == TensorKind::Input {
                (0..n).map(|_| 2.0 * rng.next_f32() - 1.0).collect()
            } else {
                param_values(graph, t, &shape, rng)
            };
            HostTensor::floats(d.dtype, shape, &wide).ok_or_else(|| err("not a float"))
        }
        (_, DType::F64 | DType::F16 | DType::Bf16) => {
            HostTensor::floats(d.dtype, shape, &vec![0.0; n]).ok_or_else(|| err("not a float"))
        }
        // A counter kept across steps (BatchNorm's `num_batches_tracked`).
        (TensorKind::State, DType::I64) => Ok(HostTensor::i64(shape, vec![0; n])),
        _ => Err(err(&format!(
            "no initialiser for a {} {}",
            d.kind.as_str(),
            d.dtype.as_str()
        ))),
    }
}

/// The class count of an integer input: the size of the axis it indexes in the op that
/// reads it (the op vocabulary's `ids`), looking through views of it (a target reshaped
/// before the loss).
fn class_count(graph: &Graph, t: TensorId) -> Option<u64> {
    let mut todo = vec![t];
    let mut seen = 0;
    while let Some(t) = todo.pop() {
        seen += 1;
        if seen > graph.num_tensors() {
            return None;
        }
        for &o in graph.consumers(t) {
            let op = graph.op(o);
            if let Some(c) = indexed_axis(graph, o, t) {
                return Some(c);
            }
            // Follow views: outputs that share the integer tensor's storage.
            todo.extend(
                op.outputs
                    .iter()
                    .copied()
                    .filter(|&out| graph.storage_root(out) == graph.storage_root(t)),
            );
        }
    }
    None
}

/// The size of the axis `t` indexes as an operand of op `o`, if `o` reads ids there.
fn indexed_axis(graph: &Graph, o: sgc_ir::OpId, t: TensorId) -> Option<u64> {
    let op = graph.op(o);
    let ids = op.kind?.spec().ids?;
    if op.inputs.get(usize::from(ids.ids)) != Some(&t) {
        return None;
    }
    let shape = &graph.tensor(*op.inputs.get(usize::from(ids.of))?).shape;
    let axis = if ids.axis < 0 {
        shape.len().checked_sub(ids.axis.unsigned_abs().into())?
    } else {
        usize::from(ids.axis.unsigned_abs())
    };
    shape.get(axis).copied().filter(|&c| c > 0)
}

/// How parameter `t` is initialised: as the first op that reads it says (the op
/// vocabulary's `params`).
fn param_init(graph: &Graph, t: TensorId) -> Option<Init> {
    graph.consumers(t).iter().find_map(|&o| {
        let op = graph.op(o);
        let spec = op.kind?.spec();
        (0..op.inputs.len())
            .filter(|&slot| op.inputs[slot] == t)
            .find_map(|slot| spec.init(slot))
    })
}

/// A parameter's values: ones or zeros, else uniform in `±1/sqrt(fan_in)`. Without an op
/// that says, a vector is zeros, a 4-D filter has fan-in `prod(shape[1..])`, any other
/// weight `shape[0]`.
fn param_values(graph: &Graph, t: TensorId, shape: &[usize], rng: &mut SplitMix64) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let init = param_init(graph, t);
    let fan_in = match init {
        Some(Init::Ones) => return vec![1.0; n],
        Some(Init::Zeros) => return vec![0.0; n],
        None if shape.len() <= 1 => return vec![0.0; n],
        Some(Init::FanInCols) => shape.get(1).copied().unwrap_or(1),
        Some(Init::FanInFilter) => shape.iter().skip(1).product(),
        None if shape.len() == 4 => shape[1..].iter().product(),
        Some(Init::FanInRows) | None => shape[0],
    };
    let bound = 1.0 / (fan_in.max(1) as f32).sqrt();
    (0..n)
        .map(|_| bound * (2.0 * rng.next_f32() - 1.0))
        .collect()
}
