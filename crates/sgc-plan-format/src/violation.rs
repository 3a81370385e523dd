//! What the plan verifier ([`crate::verify`]) reports: one [`Violation`] per broken rule,
//! naming the step, op and tensor at fault. Plain data, so errors and reports can carry
//! violations without depending on the verifier.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ViolationKind {
    GraphMismatch {
        expected: String,
        found: String,
    },
    UnknownOp,
    UnknownTensor {
        index: u32,
    },
    OriginalOutOfOrder {
        previous: String,
    },
    OriginalTwice,
    RecomputeBeforeOriginal,
    NonRecomputableRerun,
    NeverRun,
    NeverProduced,
    UseAfterFree {
        freed_at: usize,
    },
    StaleView,
    BaseNotResident,
    DirtyPersistent {
        writer: String,
    },
    FreeNotResident,
    FreePersistent,
    RunsTooOften {
        runs: u32,
    },
    RecomputeOverForward {
        recompute: f64,
        forward: f64,
    },
    OutputMissing,
    PeakMismatch {
        claimed: u64,
        replayed: u64,
    },
    LifetimesMismatch {
        claimed: usize,
        replayed: usize,
        first_difference: String,
    },
    ArenaCount {
        offsets: usize,
        lifetimes: usize,
    },
    ArenaMisaligned {
        offset: u64,
        align: u64,
    },
    ArenaOutside {
        offset: u64,
        end: u64,
        size: u64,
    },
    AddressOverlap {
        other: String,
        offset: u64,
        other_offset: u64,
    },
    /// An offload names a persistent tensor, a view or a tensor the graph does not have.
    OffloadNotRoot,
    /// An offload's steps are out of order or past the schedule.
    OffloadOrder {
        copy_after: usize,
        free_after: usize,
        fetch_after: usize,
        needed_at: usize,
        steps: usize,
    },
    /// Two offloads of one storage overlap in time.
    OffloadsOverlap {
        needed_at: usize,
        next_copy_after: usize,
    },
    /// The copy to host starts after a step where the storage is not resident.
    CopySourceNotResident,
    /// The device instance the copy reads ends before the offload's `free_after`.
    CopySourceFreedEarly {
        free_after: usize,
    },
    /// The plan does not free the device storage after the offload's `free_after`.
    OffloadNotFreed,
    /// A step writes the storage while its copy to host runs.
    WrittenWhileCopied {
        copy_after: usize,
    },
    /// A step reads or writes the storage while it is on the host only.
    TouchedWhileAway {
        write: bool,
        free_after: usize,
        fetch_after: usize,
    },
    /// A step reads or writes the storage before the offload's reader, while the copy back
    /// may still run.
    TouchedBeforeFetch {
        write: bool,
        needed_at: usize,
    },
    /// The offload's `needed_at` step does not read the storage.
    FetchNotRead,
    /// The plan has offloads but no host layout.
    HostMissing,
    HostCount {
        offsets: usize,
        offloads: usize,
    },
    HostOutside {
        offset: u64,
        end: u64,
        size: u64,
    },
    HostOverlap {
        other: String,
        offset: u64,
        other_offset: u64,
    },
    HostPeakMismatch {
        claimed: u64,
        replayed: u64,
    },
    HostOverLimit {
        pool: u64,
        limit: u64,
    },
}

/// One violation, naming the step, the op and the tensor it concerns where there are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    pub step: Option<usize>,
    pub op: Option<String>,
    pub tensor: Option<String>,
    #[serde(flatten)]
    pub kind: ViolationKind,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = self.step {
            write!(f, "step {s}")?;
        } else {
            write!(f, "plan")?;
        }
        if let Some(o) = &self.op {
            write!(f, " (op `{o}`)")?;
        }
        let t = self.tensor.as_deref().unwrap_or("?");
        use ViolationKind as K;
        match &self.kind {
            K::GraphMismatch { expected, found } => {
                write!(f, ": made for graph {expected}, checked against {found}")
            }
            K::UnknownOp => write!(f, ": names an op the graph does not have"),
            K::UnknownTensor { index } => write!(f, ": frees tensor #{index}, which the graph does not have"),
            K::OriginalOutOfOrder { previous } => write!(f, ": original run out of traced order (after op `{previous}`)"),
            K::OriginalTwice => write!(f, ": original run of an op that already ran"),
            K::RecomputeBeforeOriginal => write!(f, ": recomputed copy of an op that has not run yet"),
            K::NonRecomputableRerun => write!(f, ": runs a non-recomputable op a second time"),
            K::NeverRun => write!(f, ": the op never runs"),
            K::NeverProduced => write!(f, ": reads `{t}`, which no earlier step produced"),
            K::UseAfterFree { freed_at } => write!(f, ": reads `{t}`, freed after step {freed_at} and not recomputed since"),
            K::StaleView => write!(f, ": reads view `{t}`, made before its base was recomputed"),
            K::BaseNotResident => write!(f, ": makes view `{t}` of storage that is not resident"),
            K::DirtyPersistent { writer } => write!(f, ": recomputed copy reads `{t}` after non-recomputable op `{writer}` may have written it"),
            K::FreeNotResident => write!(f, ": frees `{t}`, which is not resident"),
            K::FreePersistent => write!(f, ": frees persistent `{t}`"),
            K::RunsTooOften { runs } => write!(f, ": runs {runs} times; a split-based plan recomputes an op at most once"),
            K::RecomputeOverForward { recompute, forward } => write!(f, ": recomputes {recompute:.4e}, more than one forward pass ({forward:.4e})"),
            K::OutputMissing => write!(f, ": graph output `{t}` is not resident (or stale) at the end"),
            K::PeakMismatch { claimed, replayed } => write!(f, ": claims a peak of {claimed} B, replay gives {replayed} B"),
            K::LifetimesMismatch { claimed, replayed, first_difference } => write!(f, ": {claimed} lifetimes claimed, {replayed} replayed; first difference: {first_difference}"),
            K::ArenaCount { offsets, lifetimes } => write!(f, ": the arena has {offsets} offsets for {lifetimes} lifetimes"),
            K::ArenaMisaligned { offset, align } => write!(f, ": `{t}` at arena offset {offset}, not a multiple of the alignment {align}"),
            K::ArenaOutside { offset, end, size } => write!(f, ": `{t}` at arena offset {offset} ends at {end}, past the arena of {size} B"),
            K::AddressOverlap { other, offset, other_offset } => write!(f, ": `{t}` (offset {offset}) and `{other}` (offset {other_offset}) are both live and share addresses"),
            K::OffloadNotRoot => write!(f, ": offloads `{t}`, which is not the root of a non-persistent storage"),
            K::OffloadOrder { copy_after, free_after, fetch_after, needed_at, steps } => write!(f, ": offload of `{t}`: copy_after {copy_after} < free_after {free_after} < fetch_after {fetch_after} < needed_at {needed_at} < {steps} steps does not hold"),
            K::OffloadsOverlap { needed_at, next_copy_after } => write!(f, ": `{t}` is offloaded again after step {next_copy_after}, before the previous offload's reader at step {needed_at}"),
            K::CopySourceNotResident => write!(f, ": `{t}` is copied to host after this step, where it is not resident"),
            K::CopySourceFreedEarly { free_after } => write!(f, ": `{t}` is freed before its copy to host ends after step {free_after}"),
            K::OffloadNotFreed => write!(f, ": `{t}` is offloaded but its device storage is not freed after this step"),
            K::WrittenWhileCopied { copy_after } => write!(f, ": writes `{t}` while its copy to host (after step {copy_after}) runs"),
            K::TouchedWhileAway { write, free_after, fetch_after } => write!(f, ": {} `{t}`, which is on the host only (freed after step {free_after}, fetched after step {fetch_after})", if *write { "writes" } else { "reads" }),
            K::TouchedBeforeFetch { write, needed_at } => write!(f, ": {} `{t}` before its copy back is waited for (at step {needed_at})", if *write { "writes" } else { "reads" }),
            K::FetchNotRead => write!(f, ": waits for the copy back of `{t}` but does not read it"),
            K::HostMissing => write!(f, ": has offloads but no host pool layout"),
            K::HostCount { offsets, offloads } => write!(f, ": the host pool has {offsets} offsets for {offloads} offloads"),
            K::HostOutside { offset, end, size } => write!(f, ": `{t}` at host offset {offset} ends at {end}, past the host pool of {size} B"),
            K::HostOverlap { other, offset, other_offset } => write!(f, ": `{t}` (host offset {offset}) and `{other}` (host offset {other_offset}) are both on the host and share bytes"),
            K::HostPeakMismatch { claimed, replayed } => write!(f, ": claims a host peak of {claimed} B, replay gives {replayed} B"),
            K::HostOverLimit { pool, limit } => write!(f, ": pins a host pool of {pool} B, above the host memory limit of {limit} B"),
        }
    }
}
