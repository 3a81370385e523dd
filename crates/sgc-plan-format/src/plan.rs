//! The plan: plain serde data that the planner writes, the verifier checks and the
//! executor (and the arena allocator) consume.
//!
//! A plan names the graph it was made for by a [`GraphRef`] (name, op and tensor counts and
//! a 64-bit FNV-1a fingerprint of the graph's canonical text), so a plan file is never
//! applied to another graph. Its `steps` are the schedule: each step runs an op of the
//! graph, either its one original run or a recomputed copy, and lists the storages freed
//! after it. `lifetimes` are the storage instances of that schedule under the IR's memory
//! model (`sgc_ir::memory::simulate`), exactly what an arena allocator needs.
//!
//! The file is deterministic: it holds the options and the seed but neither the wall time
//! nor the number of worker threads, so the same graph, options and seed give the same
//! bytes on any machine.

use crate::error::FormatError;
use crate::offload::{self, HostLayout, OffloadSummary};
use crate::options::PlanOptions;
use serde::{Deserialize, Serialize};
use sgc_ir::{
    CostSources, DeviceProfile, Graph, MemoryProfile, Offload, OpId, ScheduleError,
    StorageInstance, TensorId, TensorKind,
};

/// The `format` field of every plan file.
pub const PLAN_FORMAT: &str = "sgc-plan";
/// The plan file version this crate reads and writes.
pub const PLAN_VERSION: u32 = 1;

/// Which graph a plan belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphRef {
    pub name: Option<String>,
    /// The graph file the plan was made from, as given on the command line (not part of
    /// the identity: the fingerprint is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub ops: usize,
    pub tensors: usize,
    /// FNV-1a 64 of the graph's canonical text (`sgc_ir::format::to_string`), 16 hex digits.
    pub fingerprint: String,
}

impl GraphRef {
    /// The reference of a graph.
    pub fn of(graph: &Graph) -> GraphRef {
        GraphRef {
            name: graph.name().map(str::to_string),
            path: None,
            ops: graph.num_ops(),
            tensors: graph.num_tensors(),
            fingerprint: format!(
                "{:016x}",
                fnv1a(sgc_ir::format::to_string(graph).as_bytes())
            ),
        }
    }
}

impl std::fmt::Display for GraphRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` ({} ops, fingerprint {})",
            self.name.as_deref().unwrap_or("(unnamed)"),
            self.ops,
            self.fingerprint
        )
    }
}

/// 64-bit FNV-1a: small, stable across platforms and releases.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One step of the schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub op: OpId,
    /// `true` for a recomputed copy, `false` for the op's one original run.
    pub recompute: bool,
    /// Storage roots freed after this step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub free: Vec<TensorId>,
}

/// One storage instance: `bytes` of `root`'s storage, resident from step `first_step` to
/// step `last_step`, both inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lifetime {
    pub root: TensorId,
    pub first_step: usize,
    pub last_step: usize,
    pub bytes: u64,
}

impl From<&StorageInstance> for Lifetime {
    /// The memory model's storage instance (inclusive steps) as a plan lifetime.
    fn from(i: &StorageInstance) -> Self {
        Lifetime {
            root: i.root,
            first_step: i.start,
            last_step: i.end,
            bytes: i.bytes,
        }
    }
}

/// The figures of a plan, each next to its baseline or bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Peak of the traced order with free-after-last-use.
    pub unplanned_peak: u64,
    /// Peak of this plan's schedule (persistent bytes included).
    pub planned_peak: u64,
    /// The per-op lower bound.
    pub lower_bound: u64,
    pub persistent_bytes: u64,
    /// Cost of one unplanned step (every op once).
    pub step_cost: f64,
    /// Cost of the recomputed steps.
    pub recompute_cost: f64,
    /// `recompute_cost / step_cost`.
    pub recompute_share: f64,
    /// Where costs come from: `time_us`, `flops`, `bytes moved`, `roofline estimate (NAME)`,
    /// `time_us and roofline estimate (NAME)` or `mixed` (`sgc_ir::CostSources`).
    pub cost_source: String,
    pub steps: usize,
    pub recompute_steps: usize,
    /// Distinct ops recomputed at least once.
    pub recomputed_ops: usize,
    /// The most times any one op runs in the schedule (1 when nothing is recomputed; at
    /// most 2 for the split-based strategies).
    #[serde(default)]
    pub max_op_runs: u32,
    pub checkpoints: usize,
    /// What the plan's offloads cost (absent without offloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadSummary>,
}

/// A checkpointing plan for one graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub format: String,
    pub version: u32,
    pub graph: GraphRef,
    pub options: PlanOptions,
    pub steps: Vec<Step>,
    /// Stored activations that recomputation starts from: storage roots that a recomputed
    /// step reads from their original copy.
    pub checkpoints: Vec<TensorId>,
    pub lifetimes: Vec<Lifetime>,
    pub summary: Summary,
    /// Every lifetime's arena offset (absent when planned with `arena: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arena: Option<ArenaLayout>,
    /// Storages copied to host memory and back (`sgc_ir::Offload`), by their copy's step:
    /// their device instances are split in `lifetimes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offloads: Vec<Offload>,
    /// Every offload's place in the pinned host pool (present with offloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostLayout>,
}

impl Plan {
    /// The most bytes the plan's device storages hold at one step, the graph's inputs
    /// excluded: what a step allocates beyond what its caller already holds (parameters,
    /// state and the batch), as PyTorch's allocator statistics count a step. Persistent
    /// storages have no lifetimes; an input's lifetime is the caller's.
    pub fn step_peak(&self, graph: &Graph) -> u64 {
        let steps = self.steps.len();
        let mut delta = vec![0i128; steps + 1];
        for l in &self.lifetimes {
            if graph.tensor(l.root).kind == sgc_ir::TensorKind::Input || l.first_step >= steps {
                continue;
            }
            delta[l.first_step] += i128::from(l.bytes);
            delta[(l.last_step + 1).min(steps)] -= i128::from(l.bytes);
        }
        let mut live = 0i128;
        let mut most = 0i128;
        for d in &delta[..steps] {
            live += d;
            most = most.max(live);
        }
        u64::try_from(most).unwrap_or(u64::MAX)
    }

    /// The plan as pretty JSON (deterministic).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan serialises")
    }

    /// Reads a plan file's text, checking its format and version.
    pub fn from_json(text: &str) -> Result<Plan, FormatError> {
        sgc_ir::json::check_duplicate_keys(text)
            .map_err(|e| FormatError::NotAPlan(e.to_string()))?;
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| FormatError::NotAPlan(e.to_string()))?;
        if value.get("format").and_then(|f| f.as_str()) != Some(PLAN_FORMAT) {
            return Err(FormatError::NotAPlan(format!(
                "expected \"format\": \"{PLAN_FORMAT}\""
            )));
        }
        if value.get("version").and_then(|v| v.as_u64()) != Some(u64::from(PLAN_VERSION)) {
            return Err(FormatError::NotAPlan(format!(
                "unsupported plan version (this reader understands version {PLAN_VERSION})"
            )));
        }
        // Numbers are read from the parsed value (exact with `arbitrary_precision`; the
        // text deserializer rounds some f64 differently, and `--check` compares figures
        // exactly). A wrong or missing field is reported from the text, with its line and
        // column.
        serde_json::from_value(value).map_err(|e| {
            let located = serde_json::from_str::<Plan>(text).err();
            FormatError::NotAPlan(located.map_or_else(|| e.to_string(), |l| l.to_string()))
        })
    }

    /// This plan's summary recomputed from the graph, its steps and its own options (their
    /// device profile included), for a plan that [`crate::verify()`] accepted: `sgc plan
    /// --check` compares it with the stored one.
    pub fn summary_for(&self, graph: &Graph) -> Result<Summary, ScheduleError> {
        let schedule: Vec<(OpId, bool)> = self.steps.iter().map(|s| (s.op, s.recompute)).collect();
        let ops: Vec<OpId> = self.steps.iter().map(|s| s.op).collect();
        let profile = sgc_ir::simulate_offloaded(graph, &ops, &self.offloads)?;
        let checkpoints = checkpoints(graph, &schedule).len();
        let device = self.options.device_profile.as_ref();
        let mut summary = summarize(graph, &schedule, &profile, checkpoints, device);
        if let (false, Some(link)) = (self.offloads.is_empty(), &self.options.host_link) {
            summary.offload = offload::summarize(graph, &ops, &self.offloads, device, link).ok();
        }
        Ok(summary)
    }

    /// Refuses a plan made for another graph.
    pub fn check_graph(&self, graph: &Graph) -> Result<(), FormatError> {
        let found = GraphRef::of(graph);
        if found.fingerprint != self.graph.fingerprint || found.ops != self.graph.ops {
            return Err(FormatError::GraphMismatch {
                expected: self.graph.to_string(),
                found: found.to_string(),
            });
        }
        Ok(())
    }
}

/// Bytes a schedule keeps from its forward stretch for its backward stretch: the distinct
/// non-persistent storages that the backward stretch reads before making them itself,
/// except the graph's outputs (the loss), which the step holds for its caller anyway.
/// The backward stretch starts at the first original run of a backward op and holds the
/// recomputations and backward ops from there; forward and update ops run once after it
/// belong to the forward stretch. (What `torch.compile`'s partition saves for backward,
/// and what `sgc_trace` measures when it applies a plan.)
pub fn saved_bytes(graph: &Graph, schedule: &[(OpId, bool)]) -> u64 {
    let backward = |op: OpId| graph.phase(op) == Some(sgc_ir::Phase::Backward);
    let Some(first) = schedule.iter().position(|&(op, r)| !r && backward(op)) else {
        return 0;
    };
    let mut made = vec![false; graph.num_tensors()];
    let mut saved = vec![false; graph.num_tensors()];
    for &t in graph.outputs() {
        saved[graph.storage_root(t).index()] = true;
    }
    let mut total = 0u64;
    for &(op, recompute) in &schedule[first..] {
        if !recompute && !backward(op) {
            continue;
        }
        let o = graph.op(op);
        for &t in &o.inputs {
            let root = graph.storage_root(t);
            if made[t.index()] || graph.is_persistent(root) || saved[root.index()] {
                continue;
            }
            saved[root.index()] = true;
            total = total.saturating_add(graph.storage_bytes(root));
        }
        for &t in &o.outputs {
            made[t.index()] = true;
        }
    }
    total
}

/// Activation roots that a recomputed step reads from their original (stored) copy.
pub fn checkpoints(graph: &Graph, schedule: &[(OpId, bool)]) -> Vec<TensorId> {
    let mut from_recompute = vec![false; graph.num_tensors()];
    let mut anchor = vec![false; graph.num_tensors()];
    for &(op, rec) in schedule {
        if rec {
            for &t in &graph.op(op).inputs {
                let r = graph.storage_root(t);
                if !from_recompute[r.index()] && graph.tensor(r).kind == TensorKind::Activation {
                    anchor[r.index()] = true;
                }
            }
        }
        for &t in &graph.op(op).outputs {
            if graph.storage_root(t) == t {
                from_recompute[t.index()] = rec;
            }
        }
    }
    graph.tensor_ids().filter(|t| anchor[t.index()]).collect()
}

/// The summary of a schedule whose memory-model replay is `profile` (its offload figures
/// left out: [`offload::summarize`] adds them).
pub fn summarize(
    graph: &Graph,
    schedule: &[(OpId, bool)],
    profile: &MemoryProfile,
    checkpoints: usize,
    device: Option<&DeviceProfile>,
) -> Summary {
    let mut sources = CostSources::default();
    let step_cost: f64 = graph
        .op_ids()
        .map(|o| {
            let (c, s) = graph.op_cost_with(o, device);
            sources.insert(s);
            c
        })
        .fold(0.0, |a, c| a + c);
    let recompute: Vec<OpId> = schedule.iter().filter(|s| s.1).map(|s| s.0).collect();
    let recompute_cost: f64 = recompute
        .iter()
        .fold(0.0, |a, &o| a + graph.op_cost_with(o, device).0);
    let mut runs = vec![0u32; graph.num_ops()];
    for &(op, _) in schedule {
        runs[op.index()] += 1;
    }
    let mut distinct = recompute.clone();
    distinct.sort();
    distinct.dedup();
    Summary {
        unplanned_peak: graph.memory_profile().peak,
        planned_peak: profile.peak,
        lower_bound: graph.lower_bound().bytes,
        persistent_bytes: profile.persistent_bytes,
        step_cost,
        recompute_cost,
        recompute_share: if step_cost > 0.0 {
            recompute_cost / step_cost
        } else {
            0.0
        },
        cost_source: sources.describe(device),
        steps: schedule.len(),
        recompute_steps: recompute.len(),
        recomputed_ops: distinct.len(),
        max_op_runs: runs.into_iter().max().unwrap_or(0),
        checkpoints,
        offload: None,
    }
}

/// Offsets of every lifetime of a plan in one arena.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArenaLayout {
    /// Every offset is a multiple of this (bytes), and sizes are padded to it.
    pub align: u64,
    /// Arena bytes, padding counted.
    pub size: u64,
    /// The peak of aligned live bytes: no arena without in-place sharing is smaller.
    pub lower_bound: u64,
    /// One offset per entry of the plan's `lifetimes`, in the same order.
    pub offsets: Vec<u64>,
    /// The allocation algorithm that produced the offsets.
    pub algorithm: String,
    /// Lifetime pairs `(output, input)` (indices into `lifetimes`) that share an address
    /// in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_place: Vec<(usize, usize)>,
}

impl ArenaLayout {
    /// `size / lower_bound` (1.0 when both are empty).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            self.size as f64 / self.lower_bound as f64
        }
    }

    /// Fragmentation in percent: `100 * (size / lower_bound - 1)`.
    pub fn fragmentation_percent(&self) -> f64 {
        100.0 * (self.ratio() - 1.0)
    }
}
