//! One rank's share of a training step: the optimizer's state, and what FSDP2 holds per
//! rank at a world size. The graph of one step says what a single process allocates; the
//! same trace answers "what fits per GPU" once the persistent bytes are those of a rank.
//!
//! # Optimizer state
//! A traced step without update ops (`meta.update: "none"`: gradients are outputs) holds no
//! optimizer state, but the optimizer that runs after it does, for every parameter, for the
//! whole step: [`Optimizer::Adam`] (and AdamW) two tensors the shape and dtype of each
//! parameter (`exp_avg`, `exp_avg_sq`), [`Optimizer::Momentum`] one (the momentum
//! buffer), [`Optimizer::Sgd`] none. They become one `state` tensor, `optimizer.state`.
//!
//! # FSDP2 (`fully_shard` per block and on the root, as torchtitan applies it)
//! Every parameter, its gradient and its optimizer state are split evenly over the `N`
//! ranks; each rank holds its shard for the whole step. To compute, a unit's parameters
//! are all-gathered into one buffer (the unsharded parameters are views of it) and freed
//! after the unit's forward and again after its backward; the gradients a unit's backward
//! produces go to one reduce-scatter input buffer, whose output is the rank's gradient
//! shard. So, per rank:
//!
//! - each parameter takes `ceil(bytes / N)` (its shard);
//! - `fsdp2.gradient_shards`: `sum ceil(bytes / N)` over the parameters (the sharded
//!   gradients, held from the backward to the optimizer step);
//! - `optimizer.state`: the optimizer's state of the shards (`k * sum ceil(bytes / N)`);
//! - `fsdp2.unsharded`: the unsharded-block term, `3 * U`, where `U` is the largest
//!   unit's parameter bytes: the all-gather buffer of the unit being computed, that of the
//!   next unit (FSDP2 prefetches one all-gather ahead in the forward and in the backward),
//!   and one unit's unsharded gradients in the reduce-scatter input;
//! - the gradients leave the graph's outputs: a unit's gradients go into the reduce-scatter
//!   buffer (counted above) instead of staying until the step ends.
//!
//! Units follow the parameters' names: a parameter belongs to the block named by its path
//! up to and including its first numeric component (`transformer.h.3.attn.c_attn.weight`
//! is in `transformer.h.3`), the container of repeated blocks that `fully_shard` is
//! applied to; a parameter with no numeric component belongs to the root unit
//! (embeddings, final norm, head). Activations are unchanged: each rank runs the whole
//! step on its own batch.
//!
//! The result is an ordinary graph with these persistent tensors, so every planner, the
//! verifier and `fit` work on it unchanged; [`PerRank`] reports the terms.

use crate::error::GraphError;
use crate::graph::{Graph, TensorDef};
use crate::ids::{DType, TensorKind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The optimizer whose state the step's parameters carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// None counted: what the graph itself holds (its update ops, if any).
    #[default]
    None,
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one buffer per parameter.
    Momentum,
    /// Adam or AdamW: two buffers per parameter.
    Adam,
}

impl Optimizer {
    pub const ALL: [Optimizer; 4] = [
        Optimizer::None,
        Optimizer::Sgd,
        Optimizer::Momentum,
        Optimizer::Adam,
    ];

    /// State tensors per parameter, each the parameter's size.
    pub fn states(self) -> u64 {
        match self {
            Optimizer::None | Optimizer::Sgd => 0,
            Optimizer::Momentum => 1,
            Optimizer::Adam => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Optimizer::None => "none",
            Optimizer::Sgd => "sgd",
            Optimizer::Momentum => "momentum",
            Optimizer::Adam => "adam",
        }
    }
}

impl FromStr for Optimizer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "adamw" => return Ok(Optimizer::Adam),
            "sgd-momentum" => return Ok(Optimizer::Momentum),
            _ => {}
        }
        Optimizer::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| {
                format!("unknown optimizer {s:?}: use none, sgd, momentum or adam (adamw)")
            })
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the step is spread over ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Shard {
    /// Every rank holds everything (one process, or DDP).
    #[default]
    None,
    /// FSDP2: parameters, gradients and optimizer state sharded over the ranks.
    Fsdp2,
}

impl Shard {
    pub fn as_str(self) -> &'static str {
        match self {
            Shard::None => "none",
            Shard::Fsdp2 => "fsdp2",
        }
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "ddp" => Ok(Shard::None),
            "fsdp2" | "fsdp" => Ok(Shard::Fsdp2),
            other => Err(format!(
                "unknown sharding {other:?}: use none (one process or DDP) or fsdp2"
            )),
        }
    }
}

/// The per-rank setting: world size, sharding and optimizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Distribution {
    pub world_size: u64,
    pub shard: Shard,
    pub optimizer: Optimizer,
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution {
            world_size: 1,
            shard: Shard::None,
            optimizer: Optimizer::None,
        }
    }
}

impl Distribution {
    /// Whether the graph is used as traced (nothing added or sharded).
    pub fn is_identity(&self) -> bool {
        self.shard == Shard::None && self.optimizer == Optimizer::None
    }
}

/// What [`per_rank`] put in a rank's graph, each term in bytes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PerRank {
    pub world_size: u64,
    pub shard: Shard,
    pub optimizer: Optimizer,
    /// The parameters' bytes on one process (the traced graph's).
    pub parameter_bytes: u64,
    /// Per rank: the parameters (their shards under FSDP2).
    pub rank_parameter_bytes: u64,
    /// Per rank: the gradients kept for the optimizer (shards; 0 without FSDP2, where the
    /// graph's own gradient outputs hold them).
    pub gradient_bytes: u64,
    /// Per rank: the optimizer's state.
    pub optimizer_bytes: u64,
    /// Per rank: the unsharded-block term (`3 * U`; 0 without FSDP2).
    pub unsharded_bytes: u64,
    /// The largest FSDP unit and its parameter bytes (`U`).
    pub largest_unit: Option<(String, u64)>,
    /// FSDP units found (0 without FSDP2).
    pub units: usize,
    /// The per-rank graph's persistent bytes (all of the above and the graph's own state).
    pub persistent_bytes: u64,
}

/// Why a per-rank graph cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum DistributedError {
    #[error("world size {0}: it must be at least 1")]
    WorldSize(u64),
    #[error("--world-size {0} without --shard: every rank of DDP or a single process holds the whole step; say --shard fsdp2 to shard it")]
    WorldWithoutShard(u64),
    #[error("the graph updates its parameters in place (op `{0}`): FSDP2 updates the shards after the step; trace it without update ops (gradients as outputs)")]
    UpdateOps(String),
    #[error("the graph has no parameters to shard")]
    NoParameters,
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// The graph of one rank's step under `d` (see the module doc), with what was added.
pub fn per_rank(graph: &Graph, d: &Distribution) -> Result<(Graph, PerRank), DistributedError> {
    if d.world_size == 0 {
        return Err(DistributedError::WorldSize(0));
    }
    if d.world_size > 1 && d.shard == Shard::None {
        return Err(DistributedError::WorldWithoutShard(d.world_size));
    }
    let n = d.world_size;
    let mut def = graph.to_def();
    let params: Vec<usize> = (0..def.tensors.len())
        .filter(|&i| def.tensors[i].kind == TensorKind::Param && def.tensors[i].alias_of.is_none())
        .collect();
    let param_bytes = |t: &TensorDef| {
        t.bytes
            .unwrap_or_else(|| t.shape.iter().product::<u64>() * t.dtype.size())
    };
    let parameter_bytes: u64 = params.iter().map(|&i| param_bytes(&def.tensors[i])).sum();
    let mut report = PerRank {
        world_size: n,
        shard: d.shard,
        optimizer: d.optimizer,
        parameter_bytes,
        rank_parameter_bytes: parameter_bytes,
        gradient_bytes: 0,
        optimizer_bytes: 0,
        unsharded_bytes: 0,
        largest_unit: None,
        units: 0,
        persistent_bytes: 0,
    };
    let shard = |b: u64| b.div_ceil(n);
    if d.shard == Shard::Fsdp2 {
        if params.is_empty() {
            return Err(DistributedError::NoParameters);
        }
        if let Some(op) = def
            .ops
            .iter()
            .find(|o| o.phase == Some(crate::Phase::Update))
        {
            return Err(DistributedError::UpdateOps(op.name.clone()));
        }
        let mut units: BTreeMap<String, u64> = BTreeMap::new();
        for &i in &params {
            *units.entry(unit_of(&def.tensors[i].name)).or_default() +=
                param_bytes(&def.tensors[i]);
        }
        let (name, largest) = units
            .iter()
            .max_by_key(|(name, b)| (**b, std::cmp::Reverse((*name).clone())))
            .map(|(name, b)| (name.clone(), *b))
            .unwrap_or_default();
        report.units = units.len();
        report.largest_unit = Some((name, largest));
        let mut sharded = 0;
        for &i in &params {
            let t = &mut def.tensors[i];
            let s = shard(param_bytes(t));
            t.bytes = Some(s);
            sharded += s;
        }
        report.rank_parameter_bytes = sharded;
        report.gradient_bytes = sharded;
        report.unsharded_bytes = 3 * largest;
        let grads: std::collections::HashSet<&str> = gradient_outputs(graph).into_iter().collect();
        def.outputs.retain(|o| !grads.contains(o.as_str()));
        def.tensors.push(persistent(
            "fsdp2.gradient_shards",
            sharded,
            TensorKind::State,
        ));
        def.tensors.push(persistent(
            "fsdp2.unsharded",
            report.unsharded_bytes,
            TensorKind::State,
        ));
    }
    report.optimizer_bytes = d.optimizer.states() * report.rank_parameter_bytes;
    if report.optimizer_bytes > 0 {
        def.tensors.push(persistent(
            "optimizer.state",
            report.optimizer_bytes,
            TensorKind::State,
        ));
    }
    let out = Graph::from_def(def)?;
    report.persistent_bytes = out.persistent_bytes();
    Ok((out, report))
}

/// A persistent tensor of `bytes` bytes (u8, one axis).
fn persistent(name: &str, bytes: u64, kind: TensorKind) -> TensorDef {
    let mut t = TensorDef::new(name, DType::U8, vec![bytes]);
    t.kind = kind;
    t
}

/// The FSDP unit of a parameter name: its path up to its first numeric component, else
/// the root (`""`).
pub fn unit_of(param: &str) -> String {
    let parts: Vec<&str> = param.split('.').collect();
    match parts
        .iter()
        .position(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Some(k) if k + 1 < parts.len() => parts[..=k].join("."),
        _ => String::new(),
    }
}

/// The graph's outputs that are gradients of parameters: made in the backward, not the
/// loss (`outputs` less the loss and whatever the forward makes).
fn gradient_outputs(graph: &Graph) -> Vec<&str> {
    let loss = graph.loss();
    graph
        .outputs()
        .iter()
        .filter(|&&t| Some(t) != loss)
        .filter(|&&t| {
            graph
                .producer(t)
                .is_some_and(|op| graph.phase(op) == Some(crate::Phase::Backward))
        })
        .map(|&t| graph.tensor(t).name.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_blocks_and_root() {
        assert_eq!(
            unit_of("transformer.h.3.attn.c_attn.weight"),
            "transformer.h.3"
        );
        assert_eq!(unit_of("layers.10.w"), "layers.10");
        assert_eq!(unit_of("transformer.wte.weight"), "");
        assert_eq!(unit_of("fc1.weight"), "");
        assert_eq!(unit_of("x.0"), "");
    }

    #[test]
    fn names_parse() {
        assert_eq!("AdamW".parse::<Optimizer>(), Ok(Optimizer::Adam));
        assert_eq!("fsdp2".parse::<Shard>(), Ok(Shard::Fsdp2));
        assert!("lamb".parse::<Optimizer>().unwrap_err().contains("adam"));
    }
}
