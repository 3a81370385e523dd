//! The memory model of the format doc, the one implementation every tool uses.
//!
//! Bytes are counted per *storage*: a tensor and every view of it (`alias_of`) share the
//! storage of the chain's root, which is counted once. Persistent storage (roots of kind
//! `param`, `state`, `const`) counts for the whole step. Other storage lives in
//! *instances*: an activation's storage is allocated when the op producing its root runs
//! (before it runs, while its inputs are resident) and freed after the last step that
//! reads or writes any tensor of the storage, unless one of them is a graph output (then it
//! stays to the end). An input's storage is resident from the start of the step; an input
//! no op reads is freed after the first op.
//!
//! [`simulate`] applies this to any sequence of ops, so the same code gives the unplanned
//! peak (the traced order) and the peak of a planned schedule in which ops run again to
//! recompute freed tensors: each new run of a root's producer starts a new instance, and
//! the previous instance ends at its own last use. The resident bytes at a step are the
//! sum over instances that span it; the peak is the largest such sum plus persistent bytes.

use crate::graph::Graph;
use crate::ids::{OpId, TensorId, TensorKind};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One lifetime of one storage in a schedule: resident from step `start` to step `end`,
/// both inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StorageInstance {
    /// The storage's root tensor.
    pub root: TensorId,
    pub start: usize,
    pub end: usize,
    pub bytes: u64,
}

/// Resident memory over a schedule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryProfile {
    /// Bytes of `param`, `state` and `const` storage.
    pub persistent_bytes: u64,
    /// Non-persistent bytes resident while each step runs.
    pub resident: Vec<u64>,
    /// `persistent_bytes + max(resident)`.
    pub peak: u64,
    /// The first step at which the peak is reached.
    pub peak_step: Option<usize>,
    /// Every non-persistent storage lifetime, ordered by start step then root.
    pub instances: Vec<StorageInstance>,
}

/// The per-op lower bound: no schedule peaks below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LowerBound {
    /// Persistent bytes plus the largest op's distinct non-persistent storage.
    pub bytes: u64,
    /// The op that sets it.
    pub op: Option<OpId>,
}

/// A schedule that cannot run under the memory model.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ScheduleError {
    #[error("step {step} (op `{op}`) reads tensor `{tensor}`, which no earlier step produced")]
    NotProduced {
        step: usize,
        op: String,
        tensor: String,
    },
    #[error("step {step} (op `{op}`) reads view `{tensor}`, made before its base was recomputed: run the view's producer again")]
    StaleView {
        step: usize,
        op: String,
        tensor: String,
    },
    #[error("offload {index} of `{tensor}`: {reason}")]
    BadOffload {
        index: usize,
        tensor: String,
        reason: String,
    },
}

/// One storage's trip to host memory and back within a schedule (step indices into it).
///
/// The copy to host starts when step `copy_after` has ended; the device storage stays
/// allocated to the end of step `free_after` (the compute stream waits for the copy before
/// the next step, so bytes in flight are device bytes). The copy back starts when step
/// `fetch_after` has ended, into a new instance of the storage that starts at step
/// `fetch_after + 1`, and step `needed_at`, the first to touch the storage again, waits
/// for it. In between, steps `free_after + 1 ..= fetch_after`, the storage is not on the
/// device. Rules ([`simulate_offloaded`] refuses any other):
/// `copy_after < free_after < fetch_after < needed_at` (the copy reads the storage while
/// step `copy_after + 1` runs, so that step cannot take its bytes in place); one instance of the storage spans
/// `copy_after ..= needed_at` (no recomputation in between); no step after `copy_after`
/// writes it, and no step after `free_after` touches it, before `needed_at`, which reads it.
/// The host holds the bytes from step `copy_after + 1` through step `needed_at`: the copy
/// back has ended only when `needed_at` starts, so a copy to host that starts after step
/// `needed_at - 1` may not reuse those bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offload {
    /// The storage root copied.
    pub root: TensorId,
    pub copy_after: usize,
    pub free_after: usize,
    pub fetch_after: usize,
    pub needed_at: usize,
}

impl Offload {
    /// The host instance of this offload: the bytes of `root`, held on the host from
    /// step `copy_after + 1` through step `needed_at` (see [`Offload`]).
    pub fn host_instance(&self, graph: &Graph) -> StorageInstance {
        StorageInstance {
            root: self.root,
            start: self.copy_after + 1,
            end: self.needed_at.max(self.copy_after + 1),
            bytes: graph.tensor(self.root).size,
        }
    }
}

impl Graph {
    /// Bytes of persistent storage (counted once per storage).
    pub fn persistent_bytes(&self) -> u64 {
        self.tensor_ids()
            .filter(|&t| self.storage_root(t) == t && self.tensor(t).kind.is_persistent())
            .map(|t| self.tensor(t).size)
            .fold(0, u64::saturating_add)
    }

    /// Distinct non-persistent storage roots an op touches (inputs and outputs).
    pub fn op_storage(&self, op: OpId) -> Vec<TensorId> {
        let o = self.op(op);
        let mut roots: Vec<TensorId> = o
            .inputs
            .iter()
            .chain(&o.outputs)
            .map(|&t| self.storage_root(t))
            .filter(|&r| !self.tensor(r).kind.is_persistent())
            .collect();
        roots.sort();
        roots.dedup();
        roots
    }

    /// Bytes of an op's distinct non-persistent storage.
    pub fn op_footprint(&self, op: OpId) -> u64 {
        self.op_storage(op)
            .into_iter()
            .map(|r| self.tensor(r).size)
            .fold(0, u64::saturating_add)
    }

    /// The per-op lower bound of the format doc.
    pub fn lower_bound(&self) -> LowerBound {
        let best = self.op_ids().map(|o| (self.op_footprint(o), o)).max_by(
            |a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)), // first op wins ties
        );
        LowerBound {
            bytes: self
                .persistent_bytes()
                .saturating_add(best.map_or(0, |b| b.0)),
            op: best.map(|b| b.1),
        }
    }

    /// The profile of the traced order with free-after-last-use: the unplanned peak.
    pub fn memory_profile(&self) -> MemoryProfile {
        let order: Vec<OpId> = self.op_ids().collect();
        simulate(self, &order).expect("a validated graph runs in its own order")
    }
}

/// Simulates a sequence of ops (ops may repeat: recomputation) under the memory model,
/// freeing every storage after its last use.
pub fn simulate(graph: &Graph, steps: &[OpId]) -> Result<MemoryProfile, ScheduleError> {
    let mut tracker = Tracker::new(graph);
    for (s, &op) in steps.iter().enumerate() {
        tracker.step(s, op)?;
    }
    let instances = tracker.finish(steps.len());
    Ok(profile_of(graph, instances, steps.len()))
}

/// [`simulate`], with storages offloaded to host memory and fetched back ([`Offload`]):
/// each offload splits its storage's instance in two, the first ending at `free_after`
/// and the second starting at `fetch_after + 1`. Offloads that break the rules of
/// [`Offload`] are refused, naming the offload and the tensor.
pub fn simulate_offloaded(
    graph: &Graph,
    steps: &[OpId],
    offloads: &[Offload],
) -> Result<MemoryProfile, ScheduleError> {
    let base = simulate(graph, steps)?;
    if offloads.is_empty() {
        return Ok(base);
    }
    let mut instances = base.instances;
    for (index, o) in offloads.iter().enumerate() {
        let bad = |reason: String| ScheduleError::BadOffload {
            index,
            tensor: graph.tensor(o.root).name.clone(),
            reason,
        };
        check_offload(graph, steps, o).map_err(bad)?;
        let Some(at) = instances
            .iter()
            .position(|i| i.root == o.root && i.start <= o.copy_after && i.end >= o.needed_at)
        else {
            return Err(bad(format!(
                "no instance of the storage spans steps {}..={}: it must be produced before the copy and live until its reader",
                o.copy_after, o.needed_at
            )));
        };
        let whole = instances[at];
        instances[at].end = o.free_after;
        instances.push(StorageInstance {
            start: o.fetch_after + 1,
            ..whole
        });
    }
    instances.sort_by_key(|i| (i.start, i.root, i.end));
    Ok(profile_of(graph, instances, steps.len()))
}

/// Checks one offload's steps against the schedule: the order of its four steps, no write
/// after the copy starts and no touch while away, and a read at `needed_at`.
fn check_offload(graph: &Graph, steps: &[OpId], o: &Offload) -> Result<(), String> {
    if graph.tensor(o.root).kind.is_persistent() || graph.storage_root(o.root) != o.root {
        return Err("only the root of a non-persistent storage can be offloaded".into());
    }
    if !(o.copy_after < o.free_after && o.free_after < o.fetch_after && o.fetch_after < o.needed_at)
    {
        return Err(format!(
            "steps copy_after {} < free_after {} < fetch_after {} < needed_at {} do not hold",
            o.copy_after, o.free_after, o.fetch_after, o.needed_at
        ));
    }
    if o.needed_at >= steps.len() {
        return Err(format!(
            "needed_at {} is past the schedule's {} steps",
            o.needed_at,
            steps.len()
        ));
    }
    let touches = |list: &[TensorId]| list.iter().any(|&t| graph.storage_root(t) == o.root);
    for (s, &step_op) in steps
        .iter()
        .enumerate()
        .take(o.needed_at)
        .skip(o.copy_after + 1)
    {
        let op = graph.op(step_op);
        let (reads, writes) = (touches(&op.inputs), touches(&op.outputs));
        if writes || (reads && s > o.free_after) {
            return Err(format!(
                "step {s} (op `{}`) {} the storage while it is {}",
                op.name,
                if writes { "writes" } else { "reads" },
                if s > o.free_after {
                    "away"
                } else {
                    "being copied"
                }
            ));
        }
    }
    let reader = graph.op(steps[o.needed_at]);
    if !touches(&reader.inputs) {
        return Err(format!(
            "step {} (op `{}`) does not read the storage",
            o.needed_at, reader.name
        ));
    }
    Ok(())
}

/// The resident bytes and peak of a list of instances over `num_steps` steps.
fn profile_of(graph: &Graph, instances: Vec<StorageInstance>, num_steps: usize) -> MemoryProfile {
    let mut delta = vec![0i128; num_steps + 1];
    for i in &instances {
        delta[i.start] += i.bytes as i128;
        delta[i.end + 1] -= i.bytes as i128;
    }
    let mut resident = Vec::with_capacity(num_steps);
    let mut acc = 0i128;
    for d in &delta[..num_steps] {
        acc += d;
        resident.push(u64::try_from(acc).unwrap_or(u64::MAX));
    }
    let persistent_bytes = graph.persistent_bytes();
    let (peak_step, max) = resident
        .iter()
        .enumerate()
        .fold((None, 0u64), |(bs, bm), (s, &r)| {
            if bs.is_none() || r > bm {
                (Some(s), r)
            } else {
                (bs, bm)
            }
        });
    MemoryProfile {
        persistent_bytes,
        peak: persistent_bytes.saturating_add(max),
        peak_step,
        resident,
        instances,
    }
}

/// Per-storage state while walking a schedule.
struct Tracker<'g> {
    graph: &'g Graph,
    /// Current instance of each root: (start, last use), if any.
    open: Vec<Option<(usize, usize)>>,
    /// Step of each tensor's latest production.
    produced: Vec<Option<usize>>,
    closed: Vec<StorageInstance>,
}

impl<'g> Tracker<'g> {
    fn new(graph: &'g Graph) -> Self {
        let mut open = vec![None; graph.num_tensors()];
        for t in graph.tensor_ids() {
            if graph.storage_root(t) == t && graph.tensor(t).kind == TensorKind::Input {
                open[t.index()] = Some((0, 0));
            }
        }
        Tracker {
            graph,
            open,
            produced: vec![None; graph.num_tensors()],
            closed: Vec::new(),
        }
    }

    fn step(&mut self, s: usize, op: OpId) -> Result<(), ScheduleError> {
        let g = self.graph;
        let o = g.op(op);
        for &t in &o.inputs {
            self.read(s, op, t)?;
        }
        for &t in &o.outputs {
            let root = g.storage_root(t);
            self.produced[t.index()] = Some(s);
            if g.tensor(root).kind.is_persistent() {
                continue;
            }
            if root == t {
                if let Some((start, last)) = self.open[root.index()].take() {
                    self.close(root, start, last);
                }
                self.open[root.index()] = Some((s, s));
            } else {
                self.touch(s, op, t, root)?;
            }
        }
        Ok(())
    }

    fn read(&mut self, s: usize, op: OpId, t: TensorId) -> Result<(), ScheduleError> {
        let g = self.graph;
        let root = g.storage_root(t);
        let tensor = g.tensor(t);
        let needs_producer = tensor.kind == TensorKind::Activation;
        if needs_producer && self.produced[t.index()].is_none() {
            return Err(ScheduleError::NotProduced {
                step: s,
                op: g.op(op).name.clone(),
                tensor: tensor.name.clone(),
            });
        }
        if g.tensor(root).kind.is_persistent() {
            return Ok(());
        }
        if root != t && needs_producer {
            let start = self.open[root.index()].map_or(usize::MAX, |i| i.0);
            if self.produced[t.index()].is_some_and(|p| p < start) {
                return Err(ScheduleError::StaleView {
                    step: s,
                    op: g.op(op).name.clone(),
                    tensor: tensor.name.clone(),
                });
            }
        }
        self.touch(s, op, t, root)
    }

    fn touch(
        &mut self,
        s: usize,
        op: OpId,
        t: TensorId,
        root: TensorId,
    ) -> Result<(), ScheduleError> {
        match &mut self.open[root.index()] {
            Some((_, last)) => {
                *last = s;
                Ok(())
            }
            None => Err(ScheduleError::NotProduced {
                step: s,
                op: self.graph.op(op).name.clone(),
                tensor: self.graph.tensor(t).name.clone(),
            }),
        }
    }

    fn close(&mut self, root: TensorId, start: usize, last: usize) {
        self.closed.push(StorageInstance {
            root,
            start,
            end: last,
            bytes: self.graph.tensor(root).size,
        });
    }

    fn finish(mut self, num_steps: usize) -> Vec<StorageInstance> {
        let g = self.graph;
        let end = num_steps.saturating_sub(1);
        let mut kept = vec![false; g.num_tensors()];
        for &t in g.outputs() {
            kept[g.storage_root(t).index()] = true;
        }
        let open = std::mem::take(&mut self.open);
        for (r, instance) in open.into_iter().enumerate() {
            if let (Some((start, last)), true) = (instance, num_steps > 0) {
                let last = if kept[r] { end } else { last };
                self.close(TensorId::new(r), start, last);
            }
        }
        self.closed.sort_by_key(|i| (i.start, i.root, i.end));
        self.closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy back has ended only when its reader starts, so the host holds the bytes
    /// through `needed_at`: an offload whose copy to host starts after the step before that
    /// reader must not be given the same host bytes (its instance overlaps).
    #[test]
    fn the_host_holds_an_offload_through_its_reader() {
        let text = r#"{"format": "sgc-graph", "version": 1,
          "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "kind": "input"},
                      {"name": "y", "dtype": "f32", "shape": [4]}],
          "ops": [{"name": "relu", "op": "relu", "inputs": ["x"], "outputs": ["y"]}],
          "outputs": ["y"]}"#;
        let g = crate::format::from_str(text).unwrap();
        let x = g.tensor_ids().next().unwrap();
        let a = Offload {
            root: x,
            copy_after: 2,
            free_after: 3,
            fetch_after: 5,
            needed_at: 8,
        };
        let h = a.host_instance(&g);
        assert_eq!((h.start, h.end, h.bytes), (3, 8, 16));
        let b = Offload {
            copy_after: a.needed_at - 1,
            ..a
        };
        assert!(
            b.host_instance(&g).start <= h.end,
            "a reuse that races the copy back"
        );
    }
}
