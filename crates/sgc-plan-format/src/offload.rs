//! Offloaded storages in a plan: the copies they make, their place in pinned host memory
//! and the step time they give.
//!
//! An offload ([`sgc_ir::Offload`]: copy to host after one step, free after another, fetch
//! back after a third, needed at a fourth) is part of the memory model: it splits its
//! storage's device instance in two ([`sgc_ir::simulate_offloaded`]). What this module adds
//! is its time and its host memory:
//!
//! - [`transfers`]: each offload is two copies on the stream of its direction
//!   ([`crate::streams`]): to host after `copy_after`, ending before `free_after + 1` (the
//!   step that may reuse the device bytes waits for it); back to device after
//!   `fetch_after`, following its copy to host and ending before `needed_at`. Each stream
//!   runs its copies in the order their start steps come, which never deadlocks: a copy
//!   queued ahead of the one a step waits for starts after an earlier step.
//! - [`step_times`]: each step's duration, µs (`time_us`, else the device profile's
//!   roofline estimate: copies need a clock).
//! - [`host_peak`]: the most host bytes held at once, each offload holding its storage's
//!   bytes over its host instance (`copy_after + 1 ..= needed_at`: the copy back has
//!   ended only when its reader starts). (The planner packs the instances into one pinned
//!   pool, the plan's [`HostLayout`]; the verifier checks its offsets.)
//! - [`summarize`]: the figures a plan reports: host peak, step time with and without
//!   the copies, and the time the copies add (exposed), from the three-stream replay.

use crate::error::FormatError;
use crate::streams::{self, Direction, HostLink, Timeline, Transfer};
use serde::{Deserialize, Serialize};
use sgc_ir::{CostSource, DeviceProfile, Graph, Offload, OpId};

/// Every offload's offset in the pinned host pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLayout {
    /// Bytes of the pool.
    pub size: u64,
    /// The most host bytes held at once: no pool is smaller.
    pub peak: u64,
    /// One offset per entry of the plan's `offloads`, in the same order.
    pub offsets: Vec<u64>,
}

/// What a plan's offloads cost, each figure beside its baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffloadSummary {
    pub offloads: usize,
    /// Bytes copied to host per step (each copied back once).
    pub bytes: u64,
    /// The most host bytes held at once.
    pub host_peak: u64,
    /// Time of the steps alone (the schedule's ops, recomputations included), µs.
    pub compute_us: f64,
    /// Time of the steps with the copies (the three-stream replay), µs.
    pub step_us: f64,
    /// What the copies add: `step_us - compute_us`.
    pub exposed_us: f64,
    /// Time the copies take on the link, both directions, µs (what overlap hides).
    pub transfer_us: f64,
}

/// The copies of `offloads` in queue order: every copy to host (by `copy_after`), then
/// every copy back (by `fetch_after`, then by reader), each following its copy to host.
/// The second value maps each offload to its (to host, to device) copy indices.
pub fn transfers(
    graph: &Graph,
    offloads: &[Offload],
    num_steps: usize,
) -> (Vec<Transfer>, Vec<(usize, usize)>) {
    let mut index = vec![(0, 0); offloads.len()];
    let mut copies = Vec::with_capacity(2 * offloads.len());
    for dir in [Direction::ToHost, Direction::ToDevice] {
        let mut order: Vec<usize> = (0..offloads.len()).collect();
        order.sort_by_key(|&i| match dir {
            Direction::ToHost => (offloads[i].copy_after, 0, i),
            Direction::ToDevice => (offloads[i].fetch_after, offloads[i].needed_at, i),
        });
        for i in order {
            let o = &offloads[i];
            let (after, before, follows) = match dir {
                Direction::ToHost => (o.copy_after, o.free_after + 1, None),
                Direction::ToDevice => (o.fetch_after, o.needed_at, Some(index[i].0)),
            };
            match dir {
                Direction::ToHost => index[i].0 = copies.len(),
                Direction::ToDevice => index[i].1 = copies.len(),
            }
            copies.push(Transfer {
                dir,
                bytes: graph.tensor(o.root).size,
                after: Some(after),
                before: Some(before).filter(|&b| b < num_steps),
                follows,
            });
        }
    }
    (copies, index)
}

/// Each step's duration in µs: the op's `time_us`, else its roofline estimate on `device`.
/// Refused when some op has neither (copies and ops need the same clock).
pub fn step_times(
    graph: &Graph,
    ops: &[OpId],
    device: Option<&DeviceProfile>,
) -> Result<Vec<f64>, FormatError> {
    let mut per_op = Vec::with_capacity(graph.num_ops());
    for op in graph.op_ids() {
        let (us, source) = graph.op_cost_with(op, device);
        if !matches!(source, CostSource::TimeUs | CostSource::Roofline) {
            return Err(FormatError::Offloads(format!(
                "offload times copies against ops, but op `{}` has no `time_us`: give a device profile (--device-profile h100) so ops without one get a roofline estimate, or --no-offload",
                graph.op(op).name
            )));
        }
        per_op.push(us);
    }
    Ok(ops.iter().map(|o| per_op[o.index()]).collect())
}

/// The most host bytes the offloads hold at once: each holds its storage's bytes over its
/// host instance (`copy_after + 1 ..= needed_at`). No pool is smaller.
/// (The same sweep as the planner's `alloc::lower_bound`, kept here so that the verifier,
/// which recomputes a plan's summary, shares no code with the planner it checks.)
pub fn host_peak(graph: &Graph, offloads: &[Offload]) -> u64 {
    let mut events: Vec<(usize, bool, u64)> = Vec::with_capacity(2 * offloads.len());
    for o in offloads {
        let h = o.host_instance(graph);
        events.push((h.start, true, h.bytes));
        events.push((h.end + 1, false, h.bytes));
    }
    // At equal steps the ends (false) come first: an instance ends before the next starts.
    events.sort_unstable();
    let (mut live, mut peak) = (0u64, 0u64);
    for (_, start, bytes) in events {
        if start {
            live = live.saturating_add(bytes);
            peak = peak.max(live);
        } else {
            live = live.saturating_sub(bytes);
        }
    }
    peak
}

/// The replay of a schedule's steps with the copies of its offloads.
pub fn timeline(
    graph: &Graph,
    ops: &[OpId],
    offloads: &[Offload],
    device: Option<&DeviceProfile>,
    link: &HostLink,
) -> Result<Timeline, FormatError> {
    let times = step_times(graph, ops, device)?;
    let (copies, _) = transfers(graph, offloads, ops.len());
    streams::simulate(&times, &copies, link)
        .map_err(|e| FormatError::Offloads(format!("the offloads' copies: {e}")))
}

/// The figures of a schedule's offloads (see [`OffloadSummary`]).
pub fn summarize(
    graph: &Graph,
    ops: &[OpId],
    offloads: &[Offload],
    device: Option<&DeviceProfile>,
    link: &HostLink,
) -> Result<OffloadSummary, FormatError> {
    let t = timeline(graph, ops, offloads, device, link)?;
    Ok(OffloadSummary {
        offloads: offloads.len(),
        bytes: offloads
            .iter()
            .map(|o| graph.tensor(o.root).size)
            .fold(0, u64::saturating_add),
        host_peak: host_peak(graph, offloads),
        compute_us: t.compute_us,
        step_us: t.total_us,
        exposed_us: t.exposed_us(),
        transfer_us: t.copies.iter().map(|c| c.end - c.start).sum(),
    })
}
