//! Static DTR (MegEngine's DTR configuration for static graphs, with the future known):
//! a simulated pass over the traced order that evicts greedily, repeated at a few
//! thresholds (no search over evictions).
//!
//! **The pass.** Before each step (an original op, or a recomputation that makes one of
//! its inputs valid again, see [`mod@crate::schedule`]), while the resident bytes (persistent
//! included) plus the step's new outputs exceed the eviction threshold, one resident
//! tensor is evicted: first any tensor that nothing will read again, then the candidate
//! with the lowest score
//!
//! ```text
//! score = cascade_cost(t) / (size(t) * (next_use(t) - now))
//! ```
//!
//! An evicted tensor is recomputed when it is next read.
//!
//! **What is evictable.** A storage root that is freeable (an activation made by an op
//! that may run again, whose views may all be remade, and not a graph output: graph
//! inputs, outputs, parameters, optimizer state and the outputs of random or in-place ops
//! such as dropout or `copy_` into BatchNorm's running statistics are never evicted), not
//! pinned (an input of the step, of the original op being scheduled, or of a later op of
//! the recomputation under way), at least `evictee_min_size` bytes, and recomputable
//! safely at its next use (before any non-recomputable op writes persistent state its
//! recomputation would read: [`crate::context`]'s hazard). Views are not candidates: they
//! own no bytes, and evicting their root makes them stale, to be remade by their view op.
//!
//! **Next use.** The pass is static, so the next use is known exactly (the dynamic runtime
//! has to use staleness instead): the next traced read; for a storage past its last
//! traced read, the next read of a gone descendant whose recomputation would read it, or
//! of the tensor it was kept for ([`keep_for`]). A DenseNet layer's small convolution
//! output is read by every later concatenation of its block and by no traced op after the
//! last one; freed there, every recomputation of an evicted concatenation would replay the
//! whole block. So a storage read by several ops is kept at its last traced read when a
//! resident tensor made by one of its earlier readers scores lower than it (is cheaper to
//! evict), and stays a candidate like any other while that tensor is resident. A storage
//! read once gains nothing from this (keeping it instead of its reader's output is a
//! wash).
//!
//! **The cascade.** `cascade_cost(t)` is DTR's evicted neighbourhood (e*): the producer
//! of `t`, the producers of the ancestors its recomputation at its next use would rebuild
//! first (gone now, or freed by then after their last traced read), and the producers of
//! gone descendants whose recomputation would then rebuild `t` too, up to 64 producers.
//! A one-level cost made long chains thrash. A tensor whose recomputation would pass
//! through a run of more than [`DEAD_RUN_LIMIT`] dead tensors (read by no traced op from
//! its next use on) is never evicted: that is a gradient, made from gradients already
//! freed all the way back to the loss, and recomputing it would replay the backward pass
//! while holding every forward activation it reads, far above any threshold. Forward
//! chains pass through at most a
//! few dead tensors in a row (a normalisation's output between a convolution and its
//! activation, a residual sum), because the backward pass reads the tensors around them.
//!
//! **Below the floor, and greedy misses.** No schedule peaks below [`eviction_floor`]
//! (what cannot be evicted, live in the traced order, plus each op's own operands), so the
//! threshold is raised to it: evicting below it only adds recomputation. The pass is
//! greedy, so its outcome is not monotone in the threshold: a pass can end above its
//! threshold (what a step needs is pinned or protected), and a lower threshold sometimes
//! recomputes less. So a few more passes are made: when the first overshoots, at
//! thresholds between the floor and the peak it reached (the lowest peak wins, then the
//! least recompute); when it fits, at 90%, 80% and 70% of the threshold (the least
//! recompute among the passes that fit wins). `MAX_RECOMPUTE_STEPS` training steps' worth
//! of recomputation makes a pass infeasible.
//!
//! **Saying so early.** Before any pass, when no storage may be evicted (none is freeable
//! and at least `evictee_min_size` bytes), or when what may not be evicted, live in the
//! traced order, already peaks at the traced order's peak, no pass can lower the peak:
//! the plan is the traced order and the reason is given ([`cannot_improve`]), instead of
//! passes that evict nothing.
//!
//! **The candidates.** A scan over every resident candidate at every victim is quadratic
//! on a deep chain, whose forward activations pile up while each step evicts one. So the
//! pass keeps its candidates in an index ([`Index`]) by lower bounds of their scores that
//! stay valid as the pass moves on: the score when last computed, while nothing it was
//! computed from has changed (the distance to the next use only shrinks, so the score
//! only grows), else the candidate's own producer's share up to its next traced access.
//! A victim search pops candidates lowest bound first, takes their current scores, and
//! stops once a bound alone loses; what it looked at goes back with its score as the
//! bound. The victim is the scan's: the lowest score (then the lowest id) among every
//! candidate, since none left in the index scores below its bound (tests check the two
//! against each other at every victim).
//!
//! With `sqrt_sampling`, only about sqrt(N) of the N candidates, drawn from a seeded
//! stream, are scored (this mode scans every candidate to draw them).

use crate::context::Context;
use crate::schedule::{Infeasible, Policy, State};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sgc_ir::{OpId, TensorId};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Parameters of one DTR pass.
pub(crate) struct DtrParams {
    pub threshold: u64,
    pub min_size: u64,
    pub sqrt_sampling: bool,
    pub seed: u64,
}

/// The longest run of dead tensors (gone by the evictee's next use and read by no traced
/// op from then on) that recomputing an evicted tensor may pass through.
pub(crate) const DEAD_RUN_LIMIT: u32 = 8;

/// The most producers [`cascade_cost`] counts and the most tensors [`remat_next`] visits:
/// enough to see a long run of evicted tensors, bounded so a score stays cheap.
const CASCADE_LIMIT: usize = 64;

/// Extra passes tried when a pass ends above its threshold.
const RETRIES: u64 = 6;

/// Passes tried below a threshold that was met, `LOWER_STEP` of it apart: the pass is
/// greedy, and a lower threshold sometimes recomputes less.
const LOWER: u32 = 3;
const LOWER_STEP: f64 = 0.1;

/// A pass overshooting its threshold by at most this share of it is accepted as is.
const OVERSHOOT_TOLERANCE: f64 = 0.02;

/// The DTR schedule: a pass at the threshold (raised to the eviction floor), then a few
/// passes at other thresholds (see the module doc); the least recompute among the passes
/// within the threshold wins, else the lowest peak.
pub(crate) fn schedule(
    ctx: &Context<'_>,
    params: &DtrParams,
) -> Result<Vec<(OpId, bool)>, Infeasible> {
    let floor = eviction_floor(ctx);
    let target = params.threshold.max(floor);
    let limit = (target as f64 * (1.0 + OVERSHOOT_TOLERANCE)) as u64;
    let first = pass(ctx, params, target)?;
    let top = first.peak;
    let thresholds: Vec<u64> = if top <= limit {
        (1..=LOWER)
            .map(|k| (target as f64 * (1.0 - LOWER_STEP * k as f64)) as u64)
            .filter(|&t| t >= floor)
            .collect()
    } else {
        (1..=RETRIES)
            .map(|k| floor + (top - floor) * k / (RETRIES + 1))
            .collect()
    };
    let mut passes = vec![first];
    passes.extend(
        thresholds
            .into_iter()
            .filter_map(|t| pass(ctx, params, t).ok()),
    );
    let best = passes
        .into_iter()
        .min_by_key(|p| {
            if p.peak <= limit {
                (0, p.units, p.peak)
            } else {
                (1, p.peak, p.units)
            }
        })
        .expect("the first pass");
    Ok(best.steps)
}

/// The outcome of one pass.
struct Pass {
    steps: Vec<(OpId, bool)>,
    /// Peak under the memory model (persistent included).
    peak: u64,
    /// Recompute cost in the context's integer units.
    units: u64,
}

/// One pass at `threshold`.
fn pass(ctx: &Context<'_>, params: &DtrParams, threshold: u64) -> Result<Pass, Infeasible> {
    let mut st = State::new(ctx);
    st.track = !params.sqrt_sampling;
    let mut policy = Dtr {
        params,
        threshold,
        rng: ChaCha8Rng::seed_from_u64(params.seed),
        pinned: vec![false; ctx.g.num_tensors()],
        current: Vec::new(),
        kept_for: vec![None; ctx.g.num_tensors()],
        index: Index::new(&st, params.min_size),
    };
    for i in 0..ctx.n {
        let op = OpId::new(i);
        st.pos = i;
        policy.current = ctx.in_roots[i].clone();
        st.ensure_inputs(op, &mut policy)?;
        st.emit(op, false, &mut policy)?;
        policy.release_dead(&mut st, i);
    }
    st.pos = ctx.n;
    policy.current.clear();
    st.ensure_outputs(&mut policy)?;
    let ops: Vec<OpId> = st.steps.iter().map(|s| s.0).collect();
    let peak = sgc_ir::simulate(ctx.g, &ops)
        .map_err(|_| Infeasible::NoFixpoint)?
        .peak;
    Ok(Pass {
        peak,
        units: st.recompute_units,
        steps: st.steps,
    })
}

struct Dtr<'p> {
    params: &'p DtrParams,
    /// The threshold of this pass.
    threshold: u64,
    rng: ChaCha8Rng,
    pinned: Vec<bool>,
    /// Inputs of the original op being scheduled.
    current: Vec<TensorId>,
    /// Per root kept past its last traced read: the resident tensor made from it that is
    /// cheaper to evict ([`keep_for`]).
    kept_for: Vec<Option<TensorId>>,
    /// The candidates by a lower bound of their scores, kept across victims.
    index: Index,
}

/// The candidates of a pass, kept up to date as it goes, so that choosing a victim visits
/// the few candidates that may win rather than every resident tensor.
///
/// The heap holds every candidate with a traced access still ahead, by a lower bound of
/// its score:
/// - *loose*: its own producer's share ([`own_score`]) with its next traced access `a` as
///   the next use (it is read by then, so its next use is at most `a`); valid until it is
///   accessed, which moves `a`;
/// - *exact*: its score when last computed, with the cascade cost and next use that gave
///   it; valid while no root that computation looked at (the candidate, its kept-for
///   tensor, the neighbours its cascade and [`remat_next`] examined) is made, remade,
///   released or accessed, since the score only depends on their state and on the
///   position, and grows as the position moves on.
///
/// A candidate is pushed again (a new version; an entry of an older version is stale and
/// dropped when popped) when it joins the candidates, is accessed, or one of the roots it
/// watches changes. Roots past their last traced access (`lingering`: kept for a
/// recomputation or for a cheaper tensor) may have no next use at all, which makes them
/// victims before any score, so they are visited every time, in id order; they are few.
struct Index {
    heap: BinaryHeap<Reverse<Entry>>,
    /// Per root: the version of its current heap entry.
    version: Vec<u32>,
    lingering: std::collections::BTreeSet<TensorId>,
    /// Per root: the candidates (and versions) whose exact entry depends on its state.
    watchers: Vec<Vec<(TensorId, u32)>>,
    /// Accesses up to this position are accounted for.
    synced: usize,
    /// Scratch: roots to push again.
    redo: Vec<TensorId>,
}

/// What a resident freeable root is to a victim search.
enum Candidate {
    /// Pinned, needed by a recomputation under way, too small, or unsafe to recompute at
    /// its next use.
    Not,
    /// Nothing reads it again: a victim before any score.
    Dead,
    /// Scored, with this next use.
    Scored(u32),
}

/// A candidate ranked by a lower bound of its score, then by id, with what goes with it.
#[derive(Clone, Copy)]
struct Ranked<T> {
    bound: f64,
    root: TensorId,
    with: T,
}

impl<T> PartialEq for Ranked<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl<T> Eq for Ranked<T> {}

impl<T> PartialOrd for Ranked<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Ranked<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bound
            .total_cmp(&other.bound)
            .then(self.root.cmp(&other.root))
    }
}

/// A heap entry of the index: the entry's version, and for an exact entry the cascade
/// cost and next use its bound (the score then) was computed from.
type Entry = Ranked<Tag>;

#[derive(Clone, Copy)]
struct Tag {
    version: u32,
    exact: Option<(f64, u32)>,
}

/// A candidate by the lower bound of its score ([`own_score`]); its next use.
type Bound = Ranked<u32>;

impl Index {
    /// The index of the candidates resident at the start of a pass.
    fn new(st: &State<'_>, min_size: u64) -> Self {
        let nt = st.ctx.g.num_tensors();
        let mut index = Index {
            heap: BinaryHeap::new(),
            version: vec![0; nt],
            lingering: Default::default(),
            watchers: vec![Vec::new(); nt],
            synced: 0,
            redo: Vec::new(),
        };
        for r in st.evictable().collect::<Vec<_>>() {
            index.push(st, r, min_size);
        }
        index
    }

    /// Brings the index up to the state: roots accessed since the last call, roots that
    /// joined the candidates and roots whose state changed are pushed again, and so are
    /// the candidates watching them.
    fn sync(&mut self, st: &mut State<'_>, min_size: u64) {
        let ctx = st.ctx;
        let now = st.pos.saturating_sub(1);
        let mut redo = std::mem::take(&mut self.redo);
        for i in self.synced + 1..=now {
            redo.extend_from_slice(&ctx.in_roots[i]);
            redo.extend_from_slice(&ctx.out_roots[i]);
        }
        self.synced = self.synced.max(now);
        st.take_changes(&mut redo);
        for &u in &redo {
            for (r, v) in std::mem::take(&mut self.watchers[u.index()]) {
                if self.version[r.index()] == v {
                    self.push(st, r, min_size);
                }
            }
            self.push(st, u, min_size);
        }
        redo.clear();
        self.redo = redo;
    }

    /// Files candidate `r` anew with a loose bound: among the lingering roots, or in the
    /// heap.
    fn push(&mut self, st: &State<'_>, r: TensorId, min_size: u64) {
        let v = &mut self.version[r.index()];
        *v = v.wrapping_add(1);
        if !st.is_evictable(r) {
            return;
        }
        let ctx = st.ctx;
        match ctx.next_access(r, st.pos.saturating_sub(1)) {
            None => {
                self.lingering.insert(r);
            }
            Some(a) => {
                self.lingering.remove(&r);
                if ctx.size(r) >= min_size {
                    self.heap.push(Reverse(Entry {
                        bound: own_score(st, r, a),
                        root: r,
                        with: Tag {
                            version: *v,
                            exact: None,
                        },
                    }));
                }
            }
        }
    }

    /// Makes `r`'s current version depend on the state of the roots `on`.
    fn watch(&mut self, r: TensorId, on: &mut Vec<TensorId>) {
        on.sort_unstable();
        on.dedup();
        let v = self.version[r.index()];
        for u in on.iter() {
            let list = &mut self.watchers[u.index()];
            if list.len() >= 16 && list.len().is_power_of_two() {
                let version = &self.version;
                list.retain(|&(w, wv)| version[w.index()] == wv);
            }
            list.push((r, v));
        }
    }
}

impl Policy for Dtr<'_> {
    fn before_step(&mut self, st: &mut State<'_>, op: OpId) {
        let ctx = st.ctx;
        let need: u64 = ctx.out_roots[op.index()]
            .iter()
            .filter(|&&r| !st.is_counted(r))
            .map(|&r| ctx.size(r))
            .sum();
        let pins: Vec<TensorId> = self
            .current
            .iter()
            .chain(&ctx.in_roots[op.index()])
            .copied()
            .collect();
        for &r in &pins {
            self.pinned[r.index()] = true;
        }
        while ctx.persistent_bytes + st.bytes + need > self.threshold {
            match self.victim(st) {
                Some(r) => st.release(r),
                None => break,
            }
        }
        for &r in &pins {
            self.pinned[r.index()] = false;
        }
    }
}

impl Dtr<'_> {
    /// After op `i`: frees the storages it touched that no traced op reads again, unless a
    /// gone descendant may still be recomputed from them or a resident tensor made from
    /// them is cheaper to evict ([`keep_for`]); stops counting the others (inputs,
    /// storages that cannot be recomputed) once past their last use.
    fn release_dead(&mut self, st: &mut State<'_>, i: usize) {
        let ctx = st.ctx;
        for r in st.take_touched() {
            let last = ctx.last_access(r).map_or(0, |l| l as usize);
            if last > i {
                continue;
            }
            if ctx.freeable[r.index()] {
                self.kept_for[r.index()] = keep_for(st, r);
                if self.kept_for[r.index()].is_none()
                    && remat_next(st, r, &mut Vec::new()).is_none()
                {
                    st.release(r);
                }
            } else if !ctx.kept[r.index()] {
                st.uncount(r);
            }
        }
    }

    /// The next time `r` is read: by a traced op, by the recomputation of a gone
    /// descendant ([`remat_next`]), or, for a storage kept past its last traced read, the
    /// next read of the tensor it was kept for while that one is resident.
    fn next_use(&self, st: &State<'_>, r: TensorId) -> Option<u32> {
        self.next_use_watched(st, r, &mut Vec::new())
    }

    /// [`Dtr::next_use`], adding to `on` the roots whose state it looked at.
    fn next_use_watched(&self, st: &State<'_>, r: TensorId, on: &mut Vec<TensorId>) -> Option<u32> {
        let now = st.pos.saturating_sub(1);
        let own = st.ctx.next_access(r, now).or_else(|| {
            let u = self.kept_for[r.index()]?;
            on.push(u);
            st.resident[u.index()]
                .then(|| st.ctx.next_access(u, now))
                .flatten()
        });
        [own, remat_next(st, r, on)].into_iter().flatten().min()
    }

    /// A resident tensor nothing reads again, else the candidate with the lowest score
    /// (ties: lowest id).
    fn victim(&mut self, st: &mut State<'_>) -> Option<TensorId> {
        if self.params.sqrt_sampling {
            return self.victim_scan(st, true);
        }
        let found = self.victim_indexed(st);
        // The index finds what the scan over every candidate finds.
        #[cfg(test)]
        assert_eq!(found, self.victim_scan(st, false), "at op {}", st.pos);
        found
    }

    /// [`Dtr::victim`] from the index of the candidates.
    fn victim_indexed(&mut self, st: &mut State<'_>) -> Option<TensorId> {
        self.index.sync(st, self.params.min_size);
        let mut exact = BinaryHeap::new();
        if let Some(r) = self.lingering_candidates(st, &mut exact) {
            return Some(r);
        }
        let mut best: Option<(f64, TensorId)> = None;
        let mut back = Vec::new();
        loop {
            let from_heap = match (exact.peek(), self.index.heap.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(Reverse(b)), Some(Reverse(e))) => e
                    .bound
                    .total_cmp(&b.bound)
                    .then(e.root.cmp(&b.root))
                    .is_lt(),
            };
            if from_heap {
                let Some(Reverse(e)) = self.index.heap.peek().copied() else {
                    break;
                };
                if best.is_some_and(|(b, _)| e.bound > b) {
                    break;
                }
                self.index.heap.pop();
                let (kept, sc) = self.look(st, e, best.map(|b| b.0));
                back.extend(kept);
                if let Some(sc) = sc {
                    keep_lower(&mut best, sc, e.root);
                }
            } else {
                let Some(Reverse(Ranked {
                    bound,
                    root: r,
                    with: next,
                })) = exact.pop()
                else {
                    break;
                };
                if best.is_some_and(|(b, _)| bound > b) {
                    break;
                }
                if let Some(sc) = score(st, r, next) {
                    keep_lower(&mut best, sc, r);
                }
            }
        }
        self.index.heap.extend(back.into_iter().map(Reverse));
        best.map(|(_, r)| r)
    }

    /// Looks at heap entry `e` in a victim search whose best score so far is `best`: the
    /// entry to put back, if any, and the root's score, when it may be evicted now.
    fn look(
        &mut self,
        st: &State<'_>,
        e: Entry,
        best: Option<f64>,
    ) -> (Option<Entry>, Option<f64>) {
        let r = e.root;
        if e.with.version != self.index.version[r.index()] || !st.is_evictable(r) {
            return (None, None);
        }
        if self.pinned[r.index()] || st.needed(r) {
            return (Some(e), None);
        }
        if let Some((cost, next)) = e.with.exact {
            let sc = ratio(st, r, cost, next);
            return (Some(Entry { bound: sc, ..e }), Some(sc));
        }
        let mut on = vec![r];
        let next = self.next_use_watched(st, r, &mut on);
        let Some(next) = next.filter(|&n| n <= st.ctx.root_hazard(r)) else {
            self.index.watch(r, &mut on);
            return (None, None);
        };
        if best.is_some_and(|b| own_score(st, r, next) > b) {
            // Still a lower bound, tighter now that the position moved on.
            let a = st
                .ctx
                .next_access(r, st.pos.saturating_sub(1))
                .unwrap_or(next);
            return (
                Some(Entry {
                    bound: own_score(st, r, a),
                    ..e
                }),
                None,
            );
        }
        let cost = cascade_cost(st, r, next, &mut on);
        self.index.watch(r, &mut on);
        let Some(cost) = cost else {
            return (None, None);
        };
        let sc = ratio(st, r, cost, next);
        let exact = Entry {
            bound: sc,
            root: r,
            with: Tag {
                exact: Some((cost, next)),
                ..e.with
            },
        };
        (Some(exact), Some(sc))
    }

    /// Visits the lingering roots in id order: returns the first that nothing reads again;
    /// puts the others that may be scored into `exact` by their exact lower bound.
    fn lingering_candidates(
        &mut self,
        st: &State<'_>,
        exact: &mut BinaryHeap<Reverse<Bound>>,
    ) -> Option<TensorId> {
        self.index.lingering.retain(|&r| st.is_evictable(r));
        for &r in &self.index.lingering {
            match self.candidate(st, r) {
                Candidate::Dead => return Some(r),
                Candidate::Scored(next) => exact.push(Reverse(bound_of(st, r, next))),
                Candidate::Not => {}
            }
        }
        None
    }

    /// What resident freeable root `r` is to a victim search now.
    fn candidate(&self, st: &State<'_>, r: TensorId) -> Candidate {
        let ctx = st.ctx;
        if self.pinned[r.index()] || st.needed(r) {
            return Candidate::Not;
        }
        match self.next_use(st, r) {
            None => Candidate::Dead,
            Some(next) if ctx.size(r) >= self.params.min_size && next <= ctx.root_hazard(r) => {
                Candidate::Scored(next)
            }
            Some(_) => Candidate::Not,
        }
    }

    /// [`Dtr::victim`] by a scan over every candidate, scoring about sqrt(N) of the N
    /// candidates, drawn from the pass's seeded stream, with `sample`.
    fn victim_scan(&mut self, st: &State<'_>, sample: bool) -> Option<TensorId> {
        let mut cands: Vec<(TensorId, u32)> = Vec::new();
        for r in st.evictable() {
            match self.candidate(st, r) {
                Candidate::Dead => return Some(r),
                Candidate::Scored(next) => cands.push((r, next)),
                Candidate::Not => {}
            }
        }
        let pool: Vec<(TensorId, u32)> = if sample && cands.len() > 1 {
            let k = (cands.len() as f64).sqrt().ceil() as usize;
            (0..k)
                .map(|_| cands[self.rng.random_range(0..cands.len())])
                .collect()
        } else {
            cands
        };
        // A score is at least its own producer's share (the cascade only adds cost):
        // candidates are scored in that order, until that bound alone loses. A heap, since
        // only the first few are taken.
        let mut order: BinaryHeap<Reverse<Bound>> = pool
            .into_iter()
            .map(|(r, next)| Reverse(bound_of(st, r, next)))
            .collect();
        let mut best: Option<(f64, TensorId)> = None;
        while let Some(Reverse(Ranked {
            bound,
            root: r,
            with: next,
        })) = order.pop()
        {
            if best.is_some_and(|(b, _)| bound > b) {
                break;
            }
            if let Some(sc) = score(st, r, next) {
                keep_lower(&mut best, sc, r);
            }
        }
        best.map(|(_, r)| r)
    }
}

/// Keeps the lower of `best` and (`sc`, `r`): by score, then by id.
fn keep_lower(best: &mut Option<(f64, TensorId)>, sc: f64, r: TensorId) {
    if best.is_none_or(|(b, id)| sc < b || (sc == b && r < id)) {
        *best = Some((sc, r));
    }
}

/// Candidate `r` with next use `next`, by its own producer's share ([`own_score`]).
fn bound_of(st: &State<'_>, r: TensorId, next: u32) -> Bound {
    Ranked {
        bound: own_score(st, r, next),
        root: r,
        with: next,
    }
}

/// A lower bound of [`score`]: the same ratio with `r`'s own producer's cost alone.
fn own_score(st: &State<'_>, r: TensorId, next: u32) -> f64 {
    let ctx = st.ctx;
    let cost = ctx
        .g
        .producer(r)
        .map_or(f64::INFINITY, |p| ctx.cost[p.index()]);
    ratio(st, r, cost, next)
}

/// The score of evicting `r` until its next use `next` (lower is evicted first); `None`
/// when `r` must not be evicted (see [`cascade_cost`]).
fn score(st: &State<'_>, r: TensorId, next: u32) -> Option<f64> {
    let cost = cascade_cost(st, r, next, &mut Vec::new())?;
    Some(ratio(st, r, cost, next))
}

/// The score of evicting `r` until `next` at the cost `cost`: cost per byte and step.
fn ratio(st: &State<'_>, r: TensorId, cost: f64, next: u32) -> f64 {
    let dist = (next as f64 - st.pos as f64).max(1.0);
    // A tiny epsilon keeps zero-cost tensors ordered by size and distance.
    (cost + 1e-9) / (st.ctx.size(r).max(1) as f64 * dist)
}

/// What evicting `r` until its next use `next` would cost: its producer, and the
/// producers of its evicted neighbourhood (DTR's e*): the ancestors its recomputation at
/// `next` would rebuild first (gone now, or freed by then after their last traced read),
/// and the gone descendants whose recomputation would then rebuild `r` too, counted up to
/// [`CASCADE_LIMIT`] producers. `None` when that recomputation would pass through a run
/// of more than [`DEAD_RUN_LIMIT`] dead tensors (see the module doc). Adds to `on` the
/// roots whose state it looked at.
fn cascade_cost(st: &State<'_>, r: TensorId, next: u32, on: &mut Vec<TensorId>) -> Option<f64> {
    let ctx = st.ctx;
    let p = ctx.g.producer(r)?;
    let dead_then = |u: TensorId| ctx.last_access(u).is_some_and(|l| l < next);
    let mut cost = 0.0;
    // (op to run again, the root it makes, the run of dead tensors that leads to it)
    let mut stack = vec![(p, r, 0)];
    let mut seen = vec![p];
    while let Some((op, root, run)) = stack.pop() {
        cost += ctx.cost[op.index()];
        on.extend_from_slice(&ctx.in_roots[op.index()]);
        let ups = ctx.in_roots[op.index()]
            .iter()
            .copied()
            .filter(|&u| !st.resident[u.index()] || dead_then(u))
            .map(|u| (u, if dead_then(u) { run + 1 } else { 0 }));
        let downs = ctx.accesses[root.index()]
            .iter()
            .take_while(|&&a| (a as usize) < st.pos)
            .flat_map(|&a| ctx.out_roots[a as usize].iter().copied())
            .inspect(|&u| on.push(u))
            .filter(|&u| u != root && st.evicted(u))
            .map(|u| (u, 0));
        for (u, run) in ups.chain(downs) {
            if run > DEAD_RUN_LIMIT {
                return None;
            }
            let Some(q) = ctx.g.producer(u) else { continue };
            if seen.contains(&q) {
                continue;
            }
            if seen.len() >= CASCADE_LIMIT {
                return Some(cost + ctx.cost[q.index()]);
            }
            seen.push(q);
            stack.push((q, u, run));
        }
    }
    Some(cost)
}

/// For a storage at its last traced read (op `st.pos`): a resident tensor made by one of
/// its earlier readers that scores lower than it (at that tensor's next read), the one
/// read soonest. Keeping the storage makes that tensor's eviction cheap (a DenseNet
/// layer's small, costly convolution output beside the large concatenations made from
/// it).
fn keep_for(st: &State<'_>, r: TensorId) -> Option<TensorId> {
    let ctx = st.ctx;
    let now = st.pos.saturating_sub(1);
    let mut best: Option<(u32, TensorId)> = None;
    for u in made_from(st, r) {
        if u == r || !st.resident[u.index()] || !ctx.freeable[u.index()] {
            continue;
        }
        let Some(n) = ctx.next_access(u, now) else {
            continue;
        };
        let (Some(su), Some(sr)) = (score(st, u, n), score(st, r, n)) else {
            continue;
        };
        if sr > su && best.is_none_or(|b| (n, u) < b) {
            best = Some((n, u));
        }
    }
    best.map(|b| b.1)
}

/// The earliest next traced read of a gone descendant of `r` (made from `r` directly or
/// through other gone tensors) whose recomputation would read `r`. Adds to `on` the roots
/// whose state it looked at.
fn remat_next(st: &State<'_>, r: TensorId, on: &mut Vec<TensorId>) -> Option<u32> {
    let ctx = st.ctx;
    let now = st.pos.saturating_sub(1);
    let mut best: Option<u32> = None;
    let mut stack = vec![r];
    let mut seen = vec![r];
    while let Some(x) = stack.pop() {
        on.push(x);
        for u in made_from(st, x) {
            on.push(u);
            if seen.contains(&u) || !st.gone(u) {
                continue;
            }
            if let Some(n) = ctx.next_access(u, now) {
                best = Some(best.map_or(n, |b| b.min(n)));
            }
            if seen.len() >= CASCADE_LIMIT {
                return best;
            }
            seen.push(u);
            stack.push(u);
        }
    }
    best
}

/// The output roots of the ops traced so far (before `st.pos`) that read `r`, in trace
/// order: the storages made from `r` directly.
fn made_from<'a>(st: &'a State<'_>, r: TensorId) -> impl Iterator<Item = TensorId> + 'a {
    let ctx = st.ctx;
    ctx.accesses[r.index()]
        .iter()
        .map(|&a| a as usize)
        .take_while(move |&a| a < st.pos)
        .filter(move |&a| ctx.in_roots[a].contains(&r))
        .flat_map(move |a| ctx.out_roots[a].iter().copied())
}

/// The lowest peak any eviction schedule of the traced order can reach: the largest, over
/// ops, of the persistent bytes, every storage that cannot be evicted (graph inputs and
/// outputs, storages of ops that must not run twice) while it is live in the traced
/// order, and the op's own freeable operands. At least the per-op lower bound; above it
/// where non-recomputable ops keep storage alive (a transformer's dropout outputs).
pub(crate) fn eviction_floor(ctx: &Context<'_>) -> u64 {
    floor_evicting(ctx, |t| ctx.freeable[t.index()])
}

/// Why no pass can improve on the traced order, when that is plain before any pass: no
/// storage may be evicted (none is freeable and at least `min_size` bytes), or what may
/// not be evicted, live in the traced order, already peaks at the traced order's peak.
/// Passes then evict nothing useful, each after scanning every resident tensor at every
/// step over the threshold.
pub(crate) fn cannot_improve(ctx: &Context<'_>, min_size: u64) -> Option<String> {
    let evictable = |t: TensorId| ctx.freeable[t.index()] && ctx.size(t) >= min_size;
    if !ctx.freeable_roots.iter().any(|&t| evictable(t)) {
        return Some(format!(
            "no storage it may evict: every recomputable activation is smaller than the \
             smallest evictee ({}; see --evictee-min-size)",
            sgc_ir::human_bytes(min_size)
        ));
    }
    let floor = floor_evicting(ctx, evictable);
    (floor >= ctx.unplanned_peak).then(|| {
        format!(
            "what it may not evict (storages that cannot be recomputed or are smaller than \
             {}, see --evictee-min-size) already peaks at {}, the traced order's peak",
            sgc_ir::human_bytes(min_size),
            sgc_ir::human_bytes(floor)
        )
    })
}

/// [`eviction_floor`] with the storages `evictable` says may be evicted.
fn floor_evicting(ctx: &Context<'_>, evictable: impl Fn(TensorId) -> bool) -> u64 {
    let mut delta = vec![0i128; ctx.n + 1];
    for t in ctx.g.tensor_ids() {
        let a = &ctx.accesses[t.index()];
        let (Some(&first), Some(&last)) = (a.first(), a.last()) else {
            continue;
        };
        if evictable(t) {
            continue;
        }
        let end = if ctx.kept[t.index()] {
            ctx.n
        } else {
            last as usize + 1
        };
        delta[first as usize] += i128::from(ctx.size(t));
        delta[end] -= i128::from(ctx.size(t));
    }
    let mut live = 0i128;
    let mut floor = 0u64;
    for (i, d) in delta.iter().take(ctx.n).enumerate() {
        live += d;
        let own: u64 = ctx.in_roots[i]
            .iter()
            .chain(&ctx.out_roots[i])
            .filter(|r| evictable(**r))
            .map(|&r| ctx.size(r))
            .sum();
        floor = floor.max(live as u64 + own);
    }
    ctx.persistent_bytes + floor
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(name: &str) -> sgc_ir::Graph {
        crate::testing::load(&format!("graphs/{name}"))
    }

    /// Every victim the index finds is checked against a scan over every candidate (the
    /// assertion in [`Dtr::victim`] under `cfg(test)`), on graphs that evict along deep
    /// chains, keep storages for cheaper tensors (DenseNet) and recompute through views.
    #[test]
    fn the_index_finds_the_victims_a_full_scan_finds() {
        let graphs = [
            sgc_ir::zoo::deep_narrow(24, 1),
            load("tiny_transformer.json"),
            load("real/densenet121.json.gz"),
            load("real/lstm_lm.json.gz"),
        ];
        for g in &graphs {
            let ctx = Context::new(g);
            let lb = ctx.lower_bound.bytes;
            for (k, min_size) in [(2, 0), (4, 1 << 20)] {
                let params = DtrParams {
                    threshold: lb + ctx.unplanned_peak.saturating_sub(lb) / k,
                    min_size,
                    sqrt_sampling: false,
                    seed: 0,
                };
                let _ = schedule(&ctx, &params);
            }
        }
    }
}
