//! A plan's offloads at run time ([`sgc_ir::Offload`]): each is two copies between the
//! arena and the host pool, queued on the backend ([`Backend::offload`],
//! [`Backend::fetch`]) between steps, and two waits of the compute queue
//! ([`Backend::wait_copy`]).
//!
//! # Method
//!
//! The copy to host reads the storage's first device instance (the one that ends at
//! `free_after`); the copy back writes its second (the one that starts at
//! `fetch_after + 1`), each at its arena offset, and both use the offload's host offset.
//! Between step `i - 1` and step `i` the executor, in this order:
//! 1. queues the copies to host after step `i - 1` (`copy_after == i - 1`);
//! 2. waits for the copies to host whose device bytes are freed after step `i - 1`
//!    (`free_after == i - 1`);
//! 3. queues the copies back after step `i - 1` (`fetch_after == i - 1`);
//! 4. waits for the copies back that step `i` reads (`needed_at == i`), those of 3
//!    included (`fetch_after == needed_at - 1`).
//!
//! The order is what makes reuse safe while copies run beside kernels. Device bytes freed
//! by an offload are written again only by a step after `free_after` or by a copy back
//! queued at or after that boundary, and both come after the wait of 2. Host bytes are
//! shared only by offloads not on the host at the same time: a copy to host that reuses
//! the bytes of a copy back read before step `j` is queued at a later boundary than the
//! wait of 4 at `j` (the host holds an offload's bytes through `needed_at`). A copy back
//! writes an arena region that no kernel before it still uses (queued after step
//! `fetch_after`), and nothing reads it before the wait of 4 at its `needed_at` (the
//! verifier saw to it).

use crate::backend::{Backend, BufferId, HostCopy};
use crate::error::ExecError;
use sgc_ir::{Graph, Offload, TensorId};
use sgc_plan_format::Plan;
use std::collections::HashMap;

/// One offload's copies.
struct Trip {
    root: TensorId,
    out: HostCopy,
    back: HostCopy,
}

/// What happens before one step (see the [module docs](self)): offloads, by index.
#[derive(Clone, Default)]
struct Boundary {
    wait_back: Vec<usize>,
    offload: Vec<usize>,
    wait_out: Vec<usize>,
    fetch: Vec<usize>,
}

/// A plan's offloads, resolved to arena and host offsets, by the boundary they act at.
#[derive(Default)]
pub(crate) struct Offloads {
    trips: Vec<Trip>,
    /// One per step, and one after the last.
    boundaries: Vec<Boundary>,
}

/// The copies in flight during a step, by offload.
pub(crate) struct InFlight<D> {
    out: Vec<Option<D>>,
    back: Vec<Option<D>>,
}

impl Offloads {
    /// The offloads of a verified `plan` of `graph` whose arena is `arena` (its layout
    /// present).
    pub(crate) fn of(graph: &Graph, plan: &Plan, arena: BufferId) -> Result<Offloads, ExecError> {
        if plan.offloads.is_empty() {
            return Ok(Offloads::default());
        }
        let offsets = plan.arena.as_ref().map_or(&[][..], |a| &a.offsets[..]);
        let host = plan.host.as_ref().map_or(&[][..], |h| &h.offsets[..]);
        let mut by_root: HashMap<TensorId, Vec<usize>> = HashMap::new();
        for (i, l) in plan.lifetimes.iter().enumerate() {
            by_root.entry(l.root).or_default().push(i);
        }
        // The arena offset of `root`'s instance that `is` picks.
        let offset = |root: TensorId, is: &dyn Fn(&sgc_plan_format::Lifetime) -> bool| {
            let mut at = by_root.get(&root).into_iter().flatten();
            at.find(|&&i| is(&plan.lifetimes[i]))
                .and_then(|&i| offsets.get(i).copied())
        };
        let mut trips = Vec::with_capacity(plan.offloads.len());
        for (k, o) in plan.offloads.iter().enumerate() {
            let missing = |what: &str| {
                let name = &graph.tensor(o.root).name;
                ExecError::Layout(format!("offload {k} of `{name}`: no {what} in the plan"))
            };
            let host_offset = *host.get(k).ok_or_else(|| missing("host offset"))?;
            let first = |l: &sgc_plan_format::Lifetime| {
                l.first_step <= o.copy_after && l.last_step == o.free_after
            };
            let second = |l: &sgc_plan_format::Lifetime| l.first_step == o.fetch_after + 1;
            let copy = |offset: u64| HostCopy {
                buffer: arena,
                offset,
                host_offset,
                bytes: graph.tensor(o.root).size,
            };
            let out = offset(o.root, &first).ok_or_else(|| missing("instance to copy from"))?;
            let back = offset(o.root, &second).ok_or_else(|| missing("instance to fetch into"))?;
            trips.push(Trip {
                root: o.root,
                out: copy(out),
                back: copy(back),
            });
        }
        Ok(Offloads {
            boundaries: boundaries(&plan.offloads, plan.steps.len()),
            trips,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.trips.len()
    }

    /// Bytes copied each way per step.
    pub(crate) fn bytes(&self) -> u64 {
        self.trips.iter().map(|t| t.out.bytes).sum()
    }

    /// The storages whose second instance starts at step `s`.
    pub(crate) fn fetched_into(&self, s: usize) -> impl Iterator<Item = TensorId> + '_ {
        let fetch = self.boundaries.get(s).map_or(&[][..], |b| &b.fetch[..]);
        fetch.iter().map(|&k| self.trips[k].root)
    }

    /// Nothing in flight yet: the start of a step.
    pub(crate) fn in_flight<D>(&self) -> InFlight<D> {
        InFlight {
            out: (0..self.trips.len()).map(|_| None).collect(),
            back: (0..self.trips.len()).map(|_| None).collect(),
        }
    }

    /// Crosses the boundary before step `i` (`i` = the number of steps: after the last).
    pub(crate) fn cross<B: Backend>(
        &self,
        i: usize,
        backend: &mut B,
        flight: &mut InFlight<B::CopyDone>,
    ) -> Result<(), ExecError> {
        let Some(b) = self.boundaries.get(i) else {
            return Ok(());
        };
        for &k in &b.offload {
            flight.out[k] = Some(backend.offload(&self.trips[k].out)?);
        }
        for &k in &b.wait_out {
            backend.wait_copy(&self.queued(&mut flight.out, k)?)?;
        }
        for &k in &b.fetch {
            flight.back[k] = Some(backend.fetch(&self.trips[k].back)?);
        }
        for &k in &b.wait_back {
            backend.wait_copy(&self.queued(&mut flight.back, k)?)?;
        }
        Ok(())
    }

    /// The copy of offload `k` in `queue`, which must have been queued.
    fn queued<D>(&self, queue: &mut [Option<D>], k: usize) -> Result<D, ExecError> {
        queue[k].take().ok_or_else(|| {
            ExecError::Layout(format!(
                "offload {k} of tensor #{} waits for a copy that was not queued",
                self.trips[k].root.0
            ))
        })
    }
}

/// Each offload at the boundaries where it acts (see the [module docs](self)).
fn boundaries(offloads: &[Offload], steps: usize) -> Vec<Boundary> {
    let mut at = vec![Boundary::default(); steps + 1];
    let mut put = |step: usize, pick: fn(&mut Boundary) -> &mut Vec<usize>, k: usize| {
        if let Some(b) = at.get_mut(step) {
            pick(b).push(k);
        }
    };
    for (k, o) in offloads.iter().enumerate() {
        put(o.needed_at, |b| &mut b.wait_back, k);
        put(o.copy_after + 1, |b| &mut b.offload, k);
        put(o.free_after + 1, |b| &mut b.wait_out, k);
        put(o.fetch_after + 1, |b| &mut b.fetch, k);
    }
    at
}
