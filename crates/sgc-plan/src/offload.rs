//! A plan's offloads: their copies, their time and their figures
//! ([`sgc_plan_format::offload`], re-exported here), and what the planner adds: each
//! offload's offset in one pinned host pool ([`host_layout`]), its host instance
//! (`copy_after + 1 ..= needed_at`: the copy back has ended only when its reader starts)
//! packed by the arena allocator ([`crate::alloc`]).

use crate::alloc::{self, AllocOptions, Buffer};
use crate::error::PlanError;
use sgc_ir::{Graph, Offload};
pub use sgc_plan_format::offload::*;

/// Each offload's host instance as a buffer to place.
fn host_buffers(graph: &Graph, offloads: &[Offload]) -> Vec<Buffer> {
    offloads
        .iter()
        .map(|o| {
            let h = o.host_instance(graph);
            Buffer {
                lower: h.start as u64,
                upper: h.end as u64 + 1,
                size: h.bytes,
            }
        })
        .collect()
}

/// Each offload's offset in one pinned host pool (see the module docs).
pub fn host_layout(graph: &Graph, offloads: &[Offload]) -> Result<HostLayout, PlanError> {
    let placed = alloc::allocate(&host_buffers(graph, offloads), &AllocOptions::default())
        .map_err(|e| PlanError::InvalidOption(format!("the host pool of the offloads: {e}")))?;
    Ok(HostLayout {
        size: placed.arena,
        peak: placed.lower_bound,
        offsets: placed.offsets,
    })
}
