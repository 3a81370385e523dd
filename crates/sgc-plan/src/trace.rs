//! Incremental candidate evaluation: a child candidate is walked only until its schedule
//! joins its parent's, and the rest of the parent's evaluation is reused.
//!
//! **Why a walk can stop early.** The split walk ([`crate::schedule::walk_recorded`]) is
//! deterministic, and what it does from the boundary before traced position `i` on depends
//! on two things only: which tensors can be read at that boundary (everything else it
//! tracks is a function of the position), and the discard decisions of the storages whose
//! largest gap opens at or after `i` (a decision acts only when its gap opens). The walk
//! keeps a Zobrist hash of the readable set. So when a child's decisions differ from its
//! parent's only for gaps opening before `i`, and the two hashes agree at `i`, the child's
//! remaining steps are the parent's remaining steps, and the walk stops there. A mutation
//! or crossover in the forward pass changes decisions in a few blocks; the walks rejoin once
//! the backward pass has recomputed those blocks, so the backward pass of every earlier
//! block and the whole update phase are reused.
//!
//! **Why the peak is still exact.** The memory model counts a storage from its production to
//! its last use in the step sequence, and whether a storage readable at the joining
//! boundary is used again is decided by the (shared) rest: storages the walk still counts
//! have a later traced access; graph outputs stay to the end; for the others (graph
//! inputs and outputs of ops that cannot run again, which a recomputation may still read;
//! outputs of multi-output ops, which recomputing a sibling makes anew) the parent's trace
//! records every use and production (`events`), and the rest's first event decides. The
//! child's own
//! steps are profiled with those storages extended through the boundary; the parent's
//! rest contributes the maximum it recorded there (`tail_max`). Recompute costs are
//! integers ([`crate::context::Context::cost_units`]), so they add up exactly too. Tests
//! check that every incremental trace equals the trace of a full walk, field by field.
//!
//! A trace is kept only for the current population (it is O(ops) in size), and the
//! final plan is always rebuilt by a full walk, simulated and verified.

use crate::context::{Context, Validity, NO_INDEX};
use crate::schedule::{walk_recorded, Join, State};
use sgc_ir::OpId;

const NONE: u32 = u32::MAX;

/// Everything a child needs from an evaluated candidate, per boundary between traced
/// positions (`n + 1` entries each).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Trace {
    /// Steps before each boundary.
    pub step_at: Vec<u32>,
    /// The walk's state hash at each boundary.
    pub hash: Vec<u64>,
    /// Recompute cost units spent before each boundary.
    pub units_at: Vec<u64>,
    /// Largest live (non-persistent) bytes over the steps from each boundary to the end.
    pub tail_max: Vec<u64>,
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
}

/// Uses and productions of the tracked roots, each encoded `step << 1 | produced`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Events {
    /// Root `k`'s events are `codes[start[k]..start[k + 1]]`.
    start: Vec<u32>,
    codes: Vec<u32>,
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

    fn of(&self, k: usize) -> &[u32] {
        &self.codes[self.start[k] as usize..self.start[k + 1] as usize]
    }

    /// Whether root `k`'s first event at or after `step` is a use.
    fn used_first_from(&self, k: usize, step: u32) -> bool {
        let e = self.of(k);
        let i = e.partition_point(|&c| c >> 1 < step);
        e.get(i).is_some_and(|&c| c & 1 == 0)
    }

    /// Root by root: this trace's events before `own_len` (`own`), then `theirs`' from
    /// `from` on, moved to start at `own_len`.
    fn splice(own: &Events, theirs: &Events, from: u32, own_len: u32) -> Events {
        let roots = own.start.len() - 1;
        let mut start = Vec::with_capacity(roots + 1);
        let mut codes = Vec::with_capacity(own.codes.len() + theirs.codes.len() / 2);
        start.push(0);
        for k in 0..roots {
            codes.extend_from_slice(own.of(k));
            let t = theirs.of(k);
            let i = t.partition_point(|&c| c >> 1 < from);
            codes.extend(t[i..].iter().map(|&c| c - (from << 1) + (own_len << 1)));
            start.push(codes.len() as u32);
        }
        Events { start, codes }
    }
}

/// A parent to evaluate against, and the first boundary from which the child's decisions
/// equal the parent's.
#[derive(Clone, Copy)]
pub(crate) struct Parent<'a> {
    pub trace: &'a Trace,
    pub from: usize,
}

/// For a child with decision key `child` and a parent with key `parent` (the sorted
/// discarded roots of each): the first boundary from which their decisions agree, and the
/// last traced access of a storage whose decision differs (the walks cannot join before
/// it; the parent with the smallest one is the best to join).
pub(crate) fn join_bounds(ctx: &Context<'_>, child: &[u32], parent: &[u32]) -> (usize, u32) {
    let (mut from, mut until) = (0usize, 0u32);
    for r in symmetric_difference(child, parent) {
        if let Some((a, _)) = ctx.gap[r as usize] {
            from = from.max(a as usize + 1);
        }
        until = until.max(
            ctx.last_access(sgc_ir::TensorId::new(r as usize))
                .unwrap_or(0),
        );
    }
    (from, until)
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
    pub joined: bool,
}

/// The trace of a discard decision: a full walk, or a walk that joins `parent`.
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
    let join = parent.map(|p| Join {
        hash: &p.trace.hash,
        from: p.from,
    });
    let walk = walk_recorded(ctx, discard, join).ok()?;
    let walked = Walked {
        positions: walk.joined.unwrap_or(ctx.n),
        joined: walk.joined.is_some(),
    };
    let st = &walk.state;
    let b = walk.bounds;
    let t = match (walk.joined, parent) {
        (Some(q), Some(p)) => {
            let rest = Rest { p: p.trace, q };
            let (live, events) = live_profile(ctx, &st.steps, |r| crosses(ctx, st, &rest, r))?;
            rest.assemble(&live, events, b, st)
        }
        _ => {
            let (live, events) = live_profile(ctx, &st.steps, |r| ctx.kept[r])?;
            let tail_max = tail_max(&live, &b.step_at, 0);
            Trace {
                peak: ctx.persistent_bytes.saturating_add(tail_max[0]),
                len: st.steps.len() as u32,
                units: st.recompute_units,
                step_at: b.step_at,
                hash: b.hash,
                units_at: b.units_at,
                tail_max,
                events,
            }
        }
    };
    Some((t, walked))
}

/// The parent's rest from boundary `q` on.
struct Rest<'a> {
    p: &'a Trace,
    q: usize,
}

impl Rest<'_> {
    /// Whether the parent's rest uses tracked root number `k` before making it anew.
    fn uses_first(&self, k: u32) -> bool {
        self.p
            .events
            .used_first_from(k as usize, self.p.step_at[self.q])
    }

    /// The child's trace: its own boundaries before `q`, the parent's (shifted) after.
    fn assemble(
        &self,
        live: &[u64],
        own_events: Events,
        b: crate::schedule::Boundaries,
        st: &State<'_>,
    ) -> Trace {
        let (p, q) = (self.p, self.q);
        let own_len = st.steps.len() as u32;
        let p_at = p.step_at[q];
        let mut step_at = b.step_at;
        let mut hash = b.hash;
        let mut units_at = b.units_at;
        step_at.truncate(q);
        hash.truncate(q);
        units_at.truncate(q);
        step_at.extend(p.step_at[q..].iter().map(|&s| s - p_at + own_len));
        hash.extend_from_slice(&p.hash[q..]);
        let p_units = p.units_at[q];
        units_at.extend(
            p.units_at[q..]
                .iter()
                .map(|&u| u - p_units + st.recompute_units),
        );
        let mut tail = tail_max(live, &step_at[..q], p.tail_max[q]);
        tail.extend_from_slice(&p.tail_max[q..]);
        let events = Events::splice(&own_events, &p.events, p_at, own_len);
        Trace {
            peak: 0,
            len: p.len - p_at + own_len,
            units: p.units - p_units + st.recompute_units,
            step_at,
            hash,
            units_at,
            tail_max: tail,
            events,
        }
        .with_peak(st.ctx)
    }
}

impl Trace {
    fn with_peak(mut self, ctx: &Context<'_>) -> Trace {
        self.peak = ctx.persistent_bytes.saturating_add(self.tail_max[0]);
        self
    }
}

/// Whether root `r`, whose instance is open when the child joins at boundary `q`, is used
/// again by the shared rest (so its instance runs through the boundary).
fn crosses(ctx: &Context<'_>, st: &State<'_>, rest: &Rest<'_>, r: usize) -> bool {
    if ctx.kept[r] {
        return true;
    }
    let root = sgc_ir::TensorId::new(r);
    if !st.valid(root) {
        return false;
    }
    let k = ctx.tracked_index[r];
    if k != NO_INDEX {
        return rest.uses_first(k);
    }
    ctx.last_access(root).is_some_and(|l| l as usize >= rest.q)
}

/// For each boundary (at the given step indices), the largest value of `live` from that
/// step on, and at least `after` (the maximum beyond `live`'s end).
fn tail_max(live: &[u64], step_at: &[u32], after: u64) -> Vec<u64> {
    let mut from = vec![after; live.len() + 1];
    for s in (0..live.len()).rev() {
        from[s] = from[s + 1].max(live[s]);
    }
    step_at.iter().map(|&s| from[s as usize]).collect()
}

/// Live non-persistent bytes at every step of `steps` under the IR's memory model
/// (`sgc_ir::simulate`: a storage from its production to its last use), and the events of
/// the tracked roots. An instance still open after the last step runs
/// through the last step when `cross(root)` says the storage is used later (graph outputs,
/// or storages read after the steps given), else it ends at its last use. `None` where
/// `simulate` reports an error. `evaluate::tests` check it against `simulate`.
pub(crate) fn live_profile(
    ctx: &Context<'_>,
    steps: &[(OpId, bool)],
    cross: impl Fn(usize) -> bool,
) -> Option<(Vec<u64>, Events)> {
    let g = ctx.g;
    let nt = g.num_tensors();
    // Per root: the open instance's (start, last use); per tensor: the step it was made.
    let mut open = vec![(NONE, NONE); nt];
    let mut produced = vec![NONE; nt];
    let mut delta = vec![0i128; steps.len() + 1];
    let mut events: Vec<(u32, u32)> = Vec::new();
    let mut note = |root: usize, code: u32| {
        let k = ctx.tracked_index[root];
        if k != NO_INDEX {
            events.push((k, code));
        }
    };
    for &t in &ctx.input_roots {
        open[t.index()] = (0, 0);
    }
    let close = |delta: &mut [i128], r: usize, (start, last): (u32, u32)| {
        delta[start as usize] += i128::from(ctx.bytes[r]);
        delta[last as usize + 1] -= i128::from(ctx.bytes[r]);
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
        first(&a.events.codes, &b.events.codes, "events", what);
        assert_eq!(a, b, "{what}");
    }

    /// Every incremental trace equals the full trace of the same decision; returns how
    /// many of the walks joined their parent early.
    fn check(g: &Graph, rng: &mut SplitMix64, pairs: usize) -> usize {
        let ctx = Context::new(g);
        let mut joined = 0;
        for _ in 0..pairs {
            let (p, other) = (genome(rng, ctx.n), genome(rng, ctx.n));
            let c = child(rng, &p, &other, ctx.n);
            let (dp, dc) = (discards(&ctx, &p), discards(&ctx, &c));
            let Some(tp) = trace(&ctx, &dp, None) else {
                continue;
            };
            let full = trace(&ctx, &dc, None);
            let (from, _) = join_bounds(&ctx, &decision_key(&dc), &decision_key(&dp));
            let inc = trace_counted(&ctx, &dc, Some(Parent { trace: &tp, from }));
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
            joined += usize::from(inc.is_some_and(|t| t.1.joined));
        }
        joined
    }

    #[test]
    fn incremental_traces_equal_full_traces_on_random_graphs() {
        let mut joined = 0;
        for seed in 0..80 {
            let g = random_graph(seed, &GenConfig::small());
            joined += check(&g, &mut SplitMix64::new(seed), 10);
        }
        assert!(joined > 100, "walks that joined their parent: {joined}");
        for seed in 0..6 {
            let g = random_graph(1000 + seed, &GenConfig::large());
            check(&g, &mut SplitMix64::new(seed), 6);
        }
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
            let joined = check(&g, &mut SplitMix64::new(name.len() as u64), 12);
            assert!(joined > 0, "{name}: no walk joined its parent");
        }
    }
}
