//! The verifier's replay of offloads ([`sgc_ir::Offload`]), by the rules of their format
//! alone (it does not ask `sgc_ir::simulate_offloaded`).
//!
//! An offload copies a storage to host after step `copy_after`, frees its device storage
//! after `free_after`, copies it back after `fetch_after` into a new device instance that
//! starts at step `fetch_after + 1`, and step `needed_at` reads it. The replay keeps the
//! plan's frees as they are (the offload's free is one of them) and opens the new instance
//! itself, so the lifetimes it compares with the plan's are the split ones. Along the way
//! it checks that
//! - the offload names the root of a non-persistent storage, its steps are in order
//!   (`copy_after < free_after < fetch_after < needed_at`, inside the schedule: the step after
//!   the copy starts must not take the storage's bytes in place while the copy reads them), and two
//!   offloads of one storage do not overlap in time;
//! - the storage is resident when its copy starts, the same instance lives until
//!   `free_after` and is freed there;
//! - no step writes it while its copy to host runs (`copy_after + 1 ..= free_after`), no
//!   step reads or writes it while it is away (`free_after + 1 ..= fetch_after`) or while
//!   the copy back may still run (before `needed_at`), and `needed_at` reads it;
//!
//! and, at the end, the host pool: one offset per offload, each inside the pool, no two
//! offloads on the host at the same time (steps `copy_after + 1 ..= needed_at`: a copy back
//! has ended only when its reader starts) sharing
//! bytes, the claimed host peak the replayed one, and that peak within the plan's
//! `host_memory`.

use super::{Replay, ViolationKind as K};
use crate::offload::HostLayout;
use crate::plan::Plan;
use rustc_hash::FxHashMap;
use sgc_ir::{Offload, OpId, TensorId};

/// The plan's offloads that name a storage root and keep their step order, indexed by
/// root and by the steps where the replay acts on them.
#[derive(Default)]
pub(super) struct Offloads {
    list: Vec<Offload>,
    by_root: FxHashMap<TensorId, Vec<usize>>,
    /// Per step: the offloads whose copy to host starts after it.
    copy_after: Vec<Vec<usize>>,
    /// Per step: the offloads whose device storage is freed after it.
    free_after: Vec<Vec<usize>>,
    /// Per step: the offloads whose new instance starts at it (`fetch_after + 1`).
    fetched_by: Vec<Vec<usize>>,
    /// Per step: the offloads whose reader it is.
    needed_at: Vec<Vec<usize>>,
}

/// The offloads of `per_step` at step `s` (none past the end).
fn at(per_step: &[Vec<usize>], s: usize) -> Vec<usize> {
    per_step.get(s).cloned().unwrap_or_default()
}

impl Replay<'_> {
    /// Checks each offload's root and step order, and indexes the ones that pass.
    pub(super) fn index_offloads(&mut self, plan: &Plan) {
        let steps = plan.steps.len();
        let mut valid: Vec<Offload> = Vec::new();
        for o in &plan.offloads {
            let t = self.known(o.root);
            let root_ok =
                t.is_some_and(|t| self.g.storage_root(t) == t && !self.g.is_persistent(t));
            if !root_ok {
                self.violation(None, None, t, K::OffloadNotRoot);
                continue;
            }
            if !(o.copy_after < o.free_after
                && o.free_after < o.fetch_after
                && o.fetch_after < o.needed_at
                && o.needed_at < steps)
            {
                let kind = K::OffloadOrder {
                    copy_after: o.copy_after,
                    free_after: o.free_after,
                    fetch_after: o.fetch_after,
                    needed_at: o.needed_at,
                    steps,
                };
                self.violation(None, None, t, kind);
                continue;
            }
            valid.push(*o);
        }
        valid.sort_by_key(|o| (o.root, o.copy_after));
        let mut kept: Vec<Offload> = Vec::with_capacity(valid.len());
        for o in valid {
            match kept.last() {
                Some(prev) if prev.root == o.root && o.copy_after < prev.needed_at => {
                    let kind = K::OffloadsOverlap {
                        needed_at: prev.needed_at,
                        next_copy_after: o.copy_after,
                    };
                    self.violation(Some(o.copy_after), None, Some(o.root), kind);
                }
                _ => kept.push(o),
            }
        }
        self.offloads = Offloads::of(kept, steps);
    }

    /// Before step `s`: each storage fetched back gets its new instance (unless the
    /// plan never freed the old one: reported after `free_after`).
    pub(super) fn open_fetched(&mut self, s: usize) {
        for k in at(&self.offloads.fetched_by, s) {
            let root = self.offloads.list[k].root;
            if self.live[root.index()].is_none() {
                self.live[root.index()] = Some(s);
                self.bytes += self.g.tensor(root).size;
            }
        }
    }

    /// Reports a read or write of `t` at step `s` that an offload of its storage forbids;
    /// whether it did (the caller then skips its generic checks of that read).
    pub(super) fn offload_touch(&mut self, s: usize, op: OpId, t: TensorId, write: bool) -> bool {
        let root = self.g.storage_root(t);
        let Some(ks) = self.offloads.by_root.get(&root) else {
            return false;
        };
        let kind = ks.iter().find_map(|&k| {
            let o = &self.offloads.list[k];
            if write && o.copy_after < s && s <= o.free_after {
                Some(K::WrittenWhileCopied {
                    copy_after: o.copy_after,
                })
            } else if o.free_after < s && s <= o.fetch_after {
                Some(K::TouchedWhileAway {
                    write,
                    free_after: o.free_after,
                    fetch_after: o.fetch_after,
                })
            } else if o.fetch_after < s && s < o.needed_at {
                Some(K::TouchedBeforeFetch {
                    write,
                    needed_at: o.needed_at,
                })
            } else {
                None
            }
        });
        let found = kind.is_some();
        if let Some(kind) = kind {
            self.violation(Some(s), Some(op), Some(t), kind);
        }
        found
    }

    /// At step `s`: every offload it is the reader of is read.
    pub(super) fn check_fetch_readers(&mut self, s: usize, op: OpId) {
        for k in at(&self.offloads.needed_at, s) {
            let root = self.offloads.list[k].root;
            let g = self.g;
            if !g.op(op).inputs.iter().any(|&t| g.storage_root(t) == root) {
                self.violation(Some(s), Some(op), Some(root), K::FetchNotRead);
            }
        }
    }

    /// After step `s`'s op, before its frees: each copy starting now has a resident
    /// source, and each copy's source instance lived since its copy started.
    pub(super) fn check_copy_sources(&mut self, s: usize, op: OpId) {
        for k in at(&self.offloads.copy_after, s) {
            let root = self.offloads.list[k].root;
            if self.live[root.index()].is_none() {
                self.violation(Some(s), Some(op), Some(root), K::CopySourceNotResident);
            }
        }
        for k in at(&self.offloads.free_after, s) {
            let o = self.offloads.list[k];
            if self.live[o.root.index()].is_none_or(|start| start > o.copy_after) {
                let kind = K::CopySourceFreedEarly {
                    free_after: o.free_after,
                };
                self.violation(Some(s), Some(op), Some(o.root), kind);
            }
        }
    }

    /// After step `s`'s frees: every storage offloaded with `free_after == s` is freed.
    pub(super) fn check_offload_frees(&mut self, s: usize, op: OpId) {
        for k in at(&self.offloads.free_after, s) {
            let root = self.offloads.list[k].root;
            if self.live[root.index()].is_some() {
                self.violation(Some(s), Some(op), Some(root), K::OffloadNotFreed);
            }
        }
    }

    /// The host pool (see the module docs).
    pub(super) fn check_host(&mut self, plan: &Plan) {
        let offloads = &plan.offloads;
        let host = match &plan.host {
            Some(h) => h,
            None if offloads.is_empty() => return,
            None => return self.violation(None, None, None, K::HostMissing),
        };
        if host.offsets.len() != offloads.len() {
            let kind = K::HostCount {
                offsets: host.offsets.len(),
                offloads: offloads.len(),
            };
            return self.violation(None, None, None, kind);
        }
        // Each offload on the host: (first step, last step, bytes, root), when it is known.
        let spans: Vec<Option<(usize, usize, u64, TensorId)>> = offloads
            .iter()
            .map(|o| {
                let t = self.known(o.root)?;
                let last = o.needed_at;
                (o.copy_after < last).then_some((o.copy_after + 1, last, self.g.tensor(t).size, t))
            })
            .collect();
        for (span, &offset) in spans.iter().zip(&host.offsets) {
            let Some((_, _, bytes, t)) = *span else {
                continue;
            };
            let end = offset.saturating_add(bytes);
            if bytes > 0 && end > host.size {
                let size = host.size;
                self.violation(None, None, Some(t), K::HostOutside { offset, end, size });
            }
        }
        self.check_host_overlaps(host, &spans);
        self.check_host_peak(plan, host, &spans);
    }

    /// No two offloads on the host at once share bytes.
    fn check_host_overlaps(
        &mut self,
        host: &HostLayout,
        spans: &[Option<(usize, usize, u64, TensorId)>],
    ) {
        let mut order: Vec<usize> = (0..spans.len())
            .filter(|&k| spans[k].is_some_and(|s| s.2 > 0))
            .collect();
        order.sort_by_key(|&k| (spans[k].map(|s| s.0), k));
        let mut active: Vec<usize> = Vec::new();
        for &b in &order {
            let Some((first, _, bytes_b, tb)) = spans[b] else {
                continue;
            };
            active.retain(|&a| spans[a].is_some_and(|s| s.1 >= first));
            let ob = host.offsets[b];
            for &a in &active {
                let Some((_, _, bytes_a, ta)) = spans[a] else {
                    continue;
                };
                let oa = host.offsets[a];
                if oa < ob.saturating_add(bytes_b) && ob < oa.saturating_add(bytes_a) {
                    let kind = K::HostOverlap {
                        other: self.g.tensor(tb).name.clone(),
                        offset: oa,
                        other_offset: ob,
                    };
                    self.violation(Some(first), None, Some(ta), kind);
                }
            }
            active.push(b);
        }
    }

    /// The most bytes on the host at once: the claimed peak; and the pool (what is pinned,
    /// at least the peak) within the limit.
    fn check_host_peak(
        &mut self,
        plan: &Plan,
        host: &HostLayout,
        spans: &[Option<(usize, usize, u64, TensorId)>],
    ) {
        let mut events: Vec<(usize, i128)> = Vec::with_capacity(2 * spans.len());
        for &(first, last, bytes, _) in spans.iter().flatten() {
            events.push((first, i128::from(bytes)));
            events.push((last + 1, -i128::from(bytes)));
        }
        events.sort();
        let (mut now, mut peak) = (0i128, 0i128);
        for (_, delta) in events {
            now += delta;
            peak = peak.max(now);
        }
        let replayed = u64::try_from(peak).unwrap_or(u64::MAX);
        if host.peak != replayed {
            let claimed = host.peak;
            self.violation(None, None, None, K::HostPeakMismatch { claimed, replayed });
        }
        let pinned = host.size.max(replayed);
        if let Some(limit) = plan.options.host_memory.filter(|&l| pinned > l) {
            self.violation(
                None,
                None,
                None,
                K::HostOverLimit {
                    pool: pinned,
                    limit,
                },
            );
        }
    }
}

impl Offloads {
    fn of(list: Vec<Offload>, steps: usize) -> Offloads {
        if list.is_empty() {
            return Offloads::default();
        }
        let mut o = Offloads {
            copy_after: vec![Vec::new(); steps],
            free_after: vec![Vec::new(); steps],
            fetched_by: vec![Vec::new(); steps],
            needed_at: vec![Vec::new(); steps],
            ..Default::default()
        };
        for (k, off) in list.iter().enumerate() {
            o.by_root.entry(off.root).or_default().push(k);
            o.copy_after[off.copy_after].push(k);
            o.free_after[off.free_after].push(k);
            o.fetched_by[off.fetch_after + 1].push(k);
            o.needed_at[off.needed_at].push(k);
        }
        o.list = list;
        o
    }
}
