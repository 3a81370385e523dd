//! Incremental candidate evaluation: a child candidate is walked only from the last
//! snapshot before its first differing decision until its schedule joins its parent's;
//! the rest of the parent's evaluation is reused on both sides.
//!
//! **Why a walk can start late.** The split walk ([`crate::schedule::walk_recorded`]) is
//! deterministic, and a discard decision acts only when its storage's largest gap opens.
//! So up to the boundary before the first differing gap opens, the child's walk is the
//! parent's. At a boundary the walk's whole state follows from the set of readable
//! tensors and the position ([`State::restore`]); a trace keeps that set every
//! `stride` boundaries, and the child resumes from the last one in time.
//!
//! **Why a walk can stop early.** From the boundary before traced position `i` on, the walk
//! depends only on the readable set there and on the decisions of storages whose largest
//! gap opens at or after `i`. The walk keeps a Zobrist hash of the readable set. When the
//! child's decisions differ from its parent's only for gaps opening before `i`, and the two
//! hashes agree at `i`, the child's remaining steps are the parent's, and the walk stops.
//! A mutation or crossover in the forward pass changes decisions in a few blocks; the walks
//! rejoin once the backward pass has recomputed those blocks, so the forward pass before
//! the change, the backward pass of every earlier block and the whole update phase are
//! reused.
//!
//! **Why the peak is still exact.** The memory model counts a storage from its production to
//! its last use in the step sequence. The trace keeps the live bytes of every step. The
//! child's own steps are profiled; storages readable at either seam are live across it
//! when the other side uses them before making them anew: storages the walk counts have a
//! traced access ahead, graph outputs stay to the end, and for the rest (graph inputs and
//! outputs of ops that cannot run again, which a recomputation may still read; outputs of
//! multi-output ops, which recomputing a sibling makes anew) the traces record every use
//! and production (`events`). Where such a storage's fate after the first seam differs
//! between child and parent, the parent's live bytes before the seam are corrected over
//! the stretch since its last use. Recompute costs are integers
//! ([`crate::context::Context::cost_units`]), so they add up exactly too. Tests check
//! that every incremental trace equals the trace of a full walk, field by field.
//!
//! A trace is kept only for the current population (it is O(steps) in size), and the
//! final plan is always rebuilt by a full walk, simulated and verified.

use crate::context::{Context, Validity, NO_INDEX};
use crate::schedule::{walk_recorded, Boundaries, Join, State};
use sgc_ir::{OpId, TensorId};
use std::sync::Arc;

const NONE: u32 = u32::MAX;

/// Everything a child needs from an evaluated candidate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Trace {
    /// Per boundary (`n + 1`): steps before it.
    pub step_at: Vec<u32>,
    /// Per boundary: the walk's state hash.
    pub hash: Vec<u64>,
    /// Per boundary: recompute cost units spent before it.
    pub units_at: Vec<u64>,
    /// Per boundary: the largest live bytes over the steps from it to the end.
    pub tail_max: Vec<u64>,
    /// Per step: live (non-persistent) bytes under the memory model.
    pub live: Vec<u64>,
    /// The readable set at every boundary that is a multiple of the stride, by boundary.
    pub snaps: Vec<(usize, Arc<[u32]>)>,
    /// Per tracked root ([`Context::tracked`]): its uses and productions, in step order.
    pub events: Events,
    /// Total steps and recompute units.
    pub len: u32,
    pub units: u64,
    /// The plan's peak (persistent bytes included).
    pub peak: u64,
}

impl Trace {
    /// `(peak, recompute units)`.
    pub fn outcome(&self) -> (u64, u64) {
        (self.peak, self.units)
    }

    /// Whether tracked root `k` is used from `step` on before it is made anew (a graph
    /// output with no later event runs to the end).
    fn uses_from(&self, k: usize, step: u32, kept: bool) -> bool {
        extends(self.events.between(k, step, u32::MAX), kept)
    }
}

/// Boundaries between snapshots of the readable set: about 32 per walk, at least 64 apart.
fn stride(n: usize) -> usize {
    #[cfg(test)]
    if let Some(s) = tests::STRIDE.with(|s| s.get()) {
        return s;
    }
    (n / 32).max(64)
}

/// A stretch of a trace's events: `(events, from step, to step, new first step)`.
type Part<'a> = (&'a Events, u32, u32, u32);

/// Uses and productions of the tracked roots, each encoded `step << 1 | produced`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Events {
    /// Root `k`'s events are `codes[start[k]..start[k + 1]]`.
    start: Vec<u32>,
    pub codes: Vec<u32>,
}

impl Events {
    /// Groups `(root, code)` pairs given in step order by root.
    fn new(roots: usize, pairs: &[(u32, u32)]) -> Events {
        let mut start = vec![0u32; roots + 1];
        for &(k, _) in pairs {
            start[k as usize + 1] += 1;
        }
        for k in 0..roots {
            start[k + 1] += start[k];
        }
        let mut fill = start.clone();
        let mut codes = vec![0; pairs.len()];
        for &(k, c) in pairs {
            codes[fill[k as usize] as usize] = c;
            fill[k as usize] += 1;
        }
        Events { start, codes }
    }

    /// Root by root, the events of each part `(events, from, to, base)`: steps
    /// `from..to`, moved to start at `base`. Parts are in step order.
    fn concat(roots: usize, parts: &[Part<'_>]) -> Events {
        let mut start = Vec::with_capacity(roots + 1);
        let mut codes = Vec::with_capacity(parts.iter().map(|p| p.0.codes.len()).sum());
        start.push(0);
        for k in 0..roots {
            for &(e, from, to, base) in parts {
                let shift = |c: u32| c - (from << 1) + (base << 1);
                codes.extend(e.between(k, from, to).iter().map(|&c| shift(c)));
            }
            start.push(codes.len() as u32);
        }
        Events { start, codes }
    }

    fn of(&self, k: usize) -> &[u32] {
        &self.codes[self.start[k] as usize..self.start[k + 1] as usize]
    }

    /// Root `k`'s events in steps `from..to`.
    fn between(&self, k: usize, from: u32, to: u32) -> &[u32] {
        let e = self.of(k);
        let a = e.partition_point(|&c| c >> 1 < from);
        let b = e.partition_point(|&c| c >> 1 < to);
        &e[a..b]
    }

    /// Root `k`'s last event before `step`.
    fn last_before(&self, k: usize, step: u32) -> Option<u32> {
        self.between(k, 0, step).last().map(|&c| c >> 1)
    }
}

/// A parent to evaluate against: the last boundary up to which the child's walk is surely
/// the parent's (`resume`), and the first from which their decisions agree (`from`).
#[derive(Clone, Copy)]
pub(crate) struct Parent<'a> {
    pub trace: &'a Trace,
    pub resume: usize,
    pub from: usize,
}

/// For a child with decision key `child` and a parent with key `parent` (the sorted
/// discarded roots of each): the boundary up to which their walks agree, the first
/// boundary from which their decisions agree, and the last traced access of a storage
/// whose decision differs (the walks cannot join before it; the parent with the smallest
/// one is the best to join).
pub(crate) fn join_bounds(ctx: &Context<'_>, child: &[u32], parent: &[u32]) -> (usize, usize, u32) {
    let (mut resume, mut from, mut until) = (ctx.n, 0usize, 0u32);
    for r in symmetric_difference(child, parent) {
        if let Some((a, _)) = ctx.gap[r as usize] {
            resume = resume.min(a as usize);
            from = from.max(a as usize + 1);
        }
        until = until.max(ctx.last_access(TensorId::new(r as usize)).unwrap_or(0));
    }
    (resume.min(from), from, until)
}

/// Elements in exactly one of two sorted, distinct lists.
fn symmetric_difference<'x>(a: &'x [u32], b: &'x [u32]) -> impl Iterator<Item = u32> + 'x {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || loop {
        match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                i += 1;
                j += 1;
            }
            (Some(&x), Some(&y)) if x < y => {
                i += 1;
                return Some(x);
            }
            (_, Some(&y)) => {
                j += 1;
                return Some(y);
            }
            (Some(&x), None) => {
                i += 1;
                return Some(x);
            }
            (None, None) => return None,
        }
    })
}

/// Statistics of one evaluation: traced positions walked.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Walked {
    pub positions: usize,
    /// Whether the walk started from a parent's snapshot, and whether it joined the
    /// parent's walk before the end.
    pub resumed: bool,
    pub joined: bool,
}

/// The trace of a discard decision: a full walk, or one against `parent`.
#[cfg(test)]
pub(crate) fn trace(
    ctx: &Context<'_>,
    discard: &[bool],
    parent: Option<Parent<'_>>,
) -> Option<Trace> {
    trace_counted(ctx, discard, parent).map(|t| t.0)
}

/// [`trace`] with what it walked.
pub(crate) fn trace_counted(
    ctx: &Context<'_>,
    discard: &[bool],
    parent: Option<Parent<'_>>,
) -> Option<(Trace, Walked)> {
    // The last snapshot at or before `resume` (none: the walk starts at the beginning).
    let snap = parent.and_then(|pp| {
        let t = pp.trace;
        let i = t.snaps.partition_point(|s| s.0 <= pp.resume);
        i.checked_sub(1)
            .map(|i| (pp, t.snaps[i].0, t.snaps[i].1.clone()))
    });
    let start = snap.as_ref().map(|(pp, p, readable)| {
        let t = pp.trace;
        State::restore(ctx, *p, readable, t.units_at[*p], t.step_at[*p] as usize)
    });
    let join = parent.map(|pp| Join {
        hash: &pp.trace.hash,
        from: pp.from,
    });
    let walk = walk_recorded(ctx, discard, start, join, stride(ctx.n)).ok()?;
    let first = walk.bounds.first;
    let walked = Walked {
        positions: walk.joined.unwrap_or(ctx.n) - first,
        resumed: first > 0,
        joined: walk.joined.is_some(),
    };
    let seams = Seams {
        head: snap
            .as_ref()
            .map(|(pp, p, readable)| (pp.trace, *p, &readable[..])),
        tail: walk.joined.zip(parent).map(|(q, pp)| (pp.trace, q)),
    };
    seams
        .assemble(ctx, &walk.state, walk.bounds)
        .map(|t| (t, walked))
}

/// Where a child's own walk meets its parent's trace: the snapshot it started from (the
/// parent's trace, the boundary and the readable set there) and the boundary where it
/// joined the parent's walk.
struct Seams<'a> {
    head: Option<(&'a Trace, usize, &'a [u32])>,
    tail: Option<(&'a Trace, usize)>,
}

impl Seams<'_> {
    /// The child's trace: the parent's before the head seam (corrected), the child's own
    /// walk, the parent's after the tail seam (shifted).
    fn assemble(&self, ctx: &Context<'_>, st: &State<'_>, b: Boundaries) -> Option<Trace> {
        let (own, own_events) = live_profile(ctx, &st.steps, self.head.map(|h| (h.1, h.2)), |r| {
            self.crosses(ctx, st, r)
        })?;
        let own_len = st.steps.len() as u32;
        let (p, p_step) = self.head.map_or((0, 0), |(t, p, _)| (p, t.step_at[p]));
        let base = p_step + own_len;
        let mut t = Trace {
            step_at: Vec::with_capacity(ctx.n + 1),
            hash: Vec::with_capacity(ctx.n + 1),
            units_at: Vec::with_capacity(ctx.n + 1),
            tail_max: Vec::new(),
            live: Vec::new(),
            snaps: Vec::new(),
            events: Events::default(),
            len: base,
            units: st.recompute_units,
            peak: 0,
        };
        let mut parts: Vec<Part<'_>> = Vec::with_capacity(3);
        // Before the head seam: the parent's, with its live bytes corrected.
        if let Some((pt, p, readable)) = self.head {
            t.step_at.extend_from_slice(&pt.step_at[..p]);
            t.hash.extend_from_slice(&pt.hash[..p]);
            t.units_at.extend_from_slice(&pt.units_at[..p]);
            t.snaps
                .extend(pt.snaps.iter().filter(|s| s.0 <= p).cloned());
            t.live = self.head_live(ctx, pt, p_step, readable, &own_events);
            parts.push((&pt.events, 0, p_step, 0));
        }
        // The child's own walk.
        let own_bounds = self.tail.map_or(b.step_at.len(), |(_, q)| q - p);
        t.step_at
            .extend(b.step_at[..own_bounds].iter().map(|&s| s + p_step));
        t.hash.extend_from_slice(&b.hash[..own_bounds]);
        t.units_at.extend_from_slice(&b.units_at[..own_bounds]);
        t.snaps.extend(b.snaps.iter().cloned());
        t.live.extend_from_slice(&own);
        parts.push((&own_events, 0, own_len, p_step));
        // After the tail seam: the parent's, shifted.
        if let Some((pt, q)) = self.tail {
            let q_step = pt.step_at[q];
            t.step_at
                .extend(pt.step_at[q..].iter().map(|&s| s - q_step + base));
            t.hash.extend_from_slice(&pt.hash[q..]);
            let q_units = pt.units_at[q];
            t.units_at.extend(
                pt.units_at[q..]
                    .iter()
                    .map(|&u| u - q_units + st.recompute_units),
            );
            t.snaps
                .extend(pt.snaps.iter().filter(|s| s.0 >= q).cloned());
            t.live.extend_from_slice(&pt.live[q_step as usize..]);
            parts.push((&pt.events, q_step, pt.len, base));
            t.len = base + pt.len - q_step;
            t.units = st.recompute_units + pt.units - q_units;
        }
        t.events = Events::concat(ctx.tracked.len(), &parts);
        t.tail_max = tail_max(&t.live, &t.step_at);
        t.peak = ctx.persistent_bytes.saturating_add(t.tail_max[0]);
        Some(t)
    }

    /// The parent's live bytes before the head seam, corrected for the tracked roots
    /// readable there whose next use differs: live from their last use to the seam in one
    /// schedule and not in the other.
    fn head_live(
        &self,
        ctx: &Context<'_>,
        pt: &Trace,
        p_step: u32,
        readable: &[u32],
        own_events: &Events,
    ) -> Vec<u64> {
        let mut live = pt.live[..p_step as usize].to_vec();
        for &r in readable {
            let r = r as usize;
            let k = ctx.tracked_index[r];
            if k == NO_INDEX || ctx.g.storage_root(TensorId::new(r)).index() != r {
                continue;
            }
            let (k, kept) = (k as usize, ctx.kept[r]);
            let theirs = pt.uses_from(k, p_step, kept);
            let ours = match (own_events.of(k), self.tail) {
                ([], Some((tt, q))) => tt.uses_from(k, tt.step_at[q], kept),
                (e, _) => extends(e, kept),
            };
            if theirs == ours {
                continue;
            }
            let from = pt
                .events
                .last_before(k, p_step)
                .map_or(1, |u| u as usize + 1);
            let size = ctx.bytes[r];
            for v in &mut live[from.min(p_step as usize)..] {
                *v = if ours { *v + size } else { *v - size };
            }
        }
        live
    }

    /// Whether root `r`, whose instance is open at the end of the child's own steps, is used
    /// again by what follows (so its instance runs through that end).
    fn crosses(&self, ctx: &Context<'_>, st: &State<'_>, r: usize) -> bool {
        let Some((pt, q)) = self.tail else {
            return ctx.kept[r];
        };
        let root = TensorId::new(r);
        if !st.valid(root) {
            return false;
        }
        match ctx.tracked_index[r] {
            NO_INDEX => ctx.kept[r] || ctx.last_access(root).is_some_and(|l| l as usize >= q),
            k => pt.uses_from(k as usize, pt.step_at[q], ctx.kept[r]),
        }
    }
}

/// Whether a storage whose events from some step on are `e` is used before being made
/// anew (its instance runs on); with no event, whether it is a graph output.
fn extends(e: &[u32], kept: bool) -> bool {
    e.first().map_or(kept, |&c| c & 1 == 0)
}

/// For each boundary (at the given step indices), the largest value of `live` from that
/// step on (0 past the end).
fn tail_max(live: &[u64], step_at: &[u32]) -> Vec<u64> {
    let mut from = vec![0; live.len() + 1];
    for s in (0..live.len()).rev() {
        from[s] = from[s + 1].max(live[s]);
    }
    step_at.iter().map(|&s| from[s as usize]).collect()
}

/// Live non-persistent bytes at every step of `steps` under the IR's memory model
/// (`sgc_ir::simulate`: a storage from its production to its last use), and the events of
/// the tracked roots. `start` is `(p, readable)` when the steps begin at boundary `p`
/// with the `readable` tensors already made; each of their storages is live from the
/// first step if it is used before being made anew. An instance still open after the last
/// step runs through the last step when `cross(root)` says the storage is used later
/// (graph outputs, or storages read after the steps given), else it ends at its last use.
/// `None` where `simulate` reports an error. `evaluate::tests` check it against `simulate`.
pub(crate) fn live_profile(
    ctx: &Context<'_>,
    steps: &[(OpId, bool)],
    start: Option<(usize, &[u32])>,
    cross: impl Fn(usize) -> bool,
) -> Option<(Vec<u64>, Events)> {
    let g = ctx.g;
    let nt = g.num_tensors();
    // Per root: the open instance's (start, last use; NONE: not used yet); per tensor: the
    // step it was made.
    let mut open = vec![(NONE, NONE); nt];
    let mut produced = vec![NONE; nt];
    let mut delta = vec![0i128; steps.len() + 1];
    match start {
        None => {
            for &t in &ctx.input_roots {
                open[t.index()] = (0, 0);
            }
        }
        Some((p, readable)) => {
            for t in g.tensor_ids() {
                if g.producer(t).is_some_and(|o| o.index() < p) {
                    produced[t.index()] = 0;
                }
            }
            for &t in readable {
                let t = t as usize;
                if ctx.validity[t] == Validity::Current
                    && g.storage_root(TensorId::new(t)).index() == t
                {
                    open[t] = (0, NONE);
                }
            }
        }
    }
    let mut events: Vec<(u32, u32)> = Vec::new();
    let mut note = |root: usize, code: u32| {
        let k = ctx.tracked_index[root];
        if k != NO_INDEX {
            events.push((k, code));
        }
    };
    let close = |delta: &mut [i128], r: usize, (start, last): (u32, u32)| {
        if last != NONE {
            delta[start as usize] += i128::from(ctx.bytes[r]);
            delta[last as usize + 1] -= i128::from(ctx.bytes[r]);
        }
    };
    for (s, &(op, _)) in steps.iter().enumerate() {
        let s = s as u32;
        let o = g.op(op);
        for &t in &o.inputs {
            let (ti, root) = (t.index(), g.storage_root(t).index());
            if ctx.activation[ti] && produced[ti] == NONE {
                return None;
            }
            if ctx.validity[ti] != Validity::Current {
                continue;
            }
            if root != ti && ctx.activation[ti] && produced[ti] < open[root].0 {
                return None;
            }
            touch(&mut open[root], s)?;
            note(root, s << 1);
        }
        for &t in &o.outputs {
            let (ti, root) = (t.index(), g.storage_root(t).index());
            produced[ti] = s;
            if ctx.validity[ti] != Validity::Current {
                continue;
            }
            if root == ti {
                if open[root].0 != NONE {
                    close(&mut delta, root, open[root]);
                }
                open[root] = (s, s);
                note(root, s << 1 | 1);
            } else {
                touch(&mut open[root], s)?;
                note(root, s << 1);
            }
        }
    }
    if let Some(end) = steps.len().checked_sub(1) {
        for (r, &(start, last)) in open.iter().enumerate() {
            if start != NONE {
                let last = if cross(r) { end as u32 } else { last };
                close(&mut delta, r, (start, last));
            }
        }
    }
    let mut acc = 0i128;
    let live = delta[..steps.len()]
        .iter()
        .map(|d| {
            acc += d;
            u64::try_from(acc).unwrap_or(u64::MAX)
        })
        .collect();
    Some((live, Events::new(ctx.tracked.len(), &events)))
}

/// Marks a use of an open instance at step `s` (`None`: the storage is not allocated).
fn touch(instance: &mut (u32, u32), s: u32) -> Option<()> {
    (instance.0 != NONE).then(|| instance.1 = s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::{decision_key, discards, peak_of, Genome};
    use sgc_ir::testgen::{random_graph, GenConfig, SplitMix64};
    use sgc_ir::Graph;

    fn genome(rng: &mut SplitMix64, n: usize) -> Genome {
        let k = rng.index(n.min(16) + 1);
        Genome::from_splits((0..k).map(|_| rng.index(n.max(1)) as u32).collect())
    }

    /// A child of `p`: one split moved, added or removed, or a crossover with `other`.
    fn child(rng: &mut SplitMix64, p: &Genome, other: &Genome, n: usize) -> Genome {
        let mut s = p.splits.clone();
        match rng.index(4) {
            0 if !s.is_empty() => {
                let j = rng.index(s.len());
                s[j] = rng.index(n.max(1)) as u32;
            }
            1 => s.push(rng.index(n.max(1)) as u32),
            2 if !s.is_empty() => {
                s.remove(rng.index(s.len()));
            }
            _ => {
                let cut = rng.index(n.max(1)) as u32;
                s.retain(|&x| x < cut);
                s.extend(other.splits.iter().copied().filter(|&x| x >= cut));
            }
        }
        let mut c = Genome::from_splits(s);
        if rng.chance(0.2) {
            c.keep = p.keep.clone();
            c.keep.push(rng.index(n.max(1)) as u32);
            c.keep.sort_unstable();
            c.keep.dedup();
        }
        c
    }

    /// Asserts equal traces, naming the first difference.
    fn same(a: &Trace, b: &Trace, what: &str) {
        fn first<T: PartialEq + std::fmt::Debug>(x: &[T], y: &[T], field: &str, what: &str) {
            if let Some(i) = (0..x.len().max(y.len())).find(|&i| x.get(i) != y.get(i)) {
                panic!(
                    "{field}[{i}] of {}/{}: incremental {:?}, full {:?} ({what})",
                    x.len(),
                    y.len(),
                    x.get(i),
                    y.get(i)
                );
            }
        }
        first(&a.step_at, &b.step_at, "step_at", what);
        first(&a.hash, &b.hash, "hash", what);
        first(&a.units_at, &b.units_at, "units_at", what);
        first(&a.tail_max, &b.tail_max, "tail_max", what);
        first(&a.live, &b.live, "live", what);
        let snaps = |t: &Trace| {
            let sorted = |v: &[u32]| {
                let mut v = v.to_vec();
                v.sort_unstable();
                v
            };
            t.snaps
                .iter()
                .map(|s| (s.0, sorted(&s.1)))
                .collect::<Vec<_>>()
        };
        first(&snaps(a), &snaps(b), "snaps", what);
        first(&a.events.codes, &b.events.codes, "events", what);
        let sorted = |t: &Trace| {
            let mut t = t.clone();
            for s in &mut t.snaps {
                let mut v = s.1.to_vec();
                v.sort_unstable();
                s.1 = v.into();
            }
            t
        };
        assert_eq!(sorted(a), sorted(b), "{what}");
    }

    thread_local! {
        /// Snapshot stride forced by a test (small graphs would get none otherwise).
        pub(super) static STRIDE: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    }

    /// Every incremental trace equals the full trace of the same decision; returns how
    /// many of the walks resumed from a snapshot and how many joined their parent early.
    fn check(g: &Graph, rng: &mut SplitMix64, pairs: usize) -> (usize, usize) {
        let ctx = Context::new(g);
        let (mut resumed, mut joined) = (0, 0);
        for _ in 0..pairs {
            let (p, other) = (genome(rng, ctx.n), genome(rng, ctx.n));
            let c = child(rng, &p, &other, ctx.n);
            let (dp, dc) = (discards(&ctx, &p), discards(&ctx, &c));
            let Some(tp) = trace(&ctx, &dp, None) else {
                continue;
            };
            let full = trace(&ctx, &dc, None);
            let (resume, from, _) = join_bounds(&ctx, &decision_key(&dc), &decision_key(&dp));
            let inc = trace_counted(
                &ctx,
                &dc,
                Some(Parent {
                    trace: &tp,
                    resume,
                    from,
                }),
            );
            if let (Some((a, _)), Some(b)) = (&inc, &full) {
                same(a, b, &format!("{p:?} -> {c:?}"));
            }
            assert_eq!(inc.is_some(), full.is_some(), "{p:?} -> {c:?}");
            if let Some(full) = &full {
                let steps = crate::schedule::walk_discards(&ctx, &dc)
                    .ok()
                    .map(|s| s.steps);
                let steps = steps.expect("a traced decision has a schedule");
                assert_eq!(Some(full.peak), peak_of(&ctx, &steps));
                let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
                assert_eq!(
                    full.peak,
                    sgc_ir::simulate(g, &ops).expect("simulates").peak
                );
            }
            resumed += usize::from(inc.as_ref().is_some_and(|t| t.1.resumed));
            joined += usize::from(inc.is_some_and(|t| t.1.joined));
        }
        (resumed, joined)
    }

    #[test]
    fn incremental_traces_equal_full_traces_on_random_graphs() {
        let (mut resumed, mut joined) = (0, 0);
        for seed in 0..80 {
            STRIDE.with(|s| s.set(Some(1 + seed as usize % 4)));
            let g = random_graph(seed, &GenConfig::small());
            let (r, j) = check(&g, &mut SplitMix64::new(seed), 10);
            (resumed, joined) = (resumed + r, joined + j);
        }
        for seed in 0..6 {
            STRIDE.with(|s| s.set(Some(3 + seed as usize)));
            let g = random_graph(1000 + seed, &GenConfig::large());
            let (r, j) = check(&g, &mut SplitMix64::new(seed), 6);
            (resumed, joined) = (resumed + r, joined + j);
        }
        STRIDE.with(|s| s.set(None));
        assert!(
            resumed > 100,
            "walks that resumed from a snapshot: {resumed}"
        );
        assert!(joined > 100, "walks that joined their parent: {joined}");
    }

    #[test]
    fn incremental_traces_equal_full_traces_on_zoo_graphs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../graphs");
        for name in [
            "tiny_transformer",
            "resnet50",
            "gpt2",
            "unet",
            "vgg16",
            "tiny_cnn",
        ] {
            let g = sgc_ir::load_any(dir.join(format!("{name}.json"))).expect("zoo graph");
            STRIDE.with(|s| s.set(Some(7)));
            let (resumed, joined) = check(&g, &mut SplitMix64::new(name.len() as u64), 12);
            STRIDE.with(|s| s.set(None));
            assert!(resumed > 0, "{name}: no walk resumed from a snapshot");
            assert!(joined > 0, "{name}: no walk joined its parent");
        }
    }
}
