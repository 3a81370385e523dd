//! Turning a decision (which storages to free early) into a step sequence with
//! recomputation.
//!
//! [`State`] walks the traced order and keeps what is resident: each storage root's
//! residency and version (a recomputed root gets a new version, which makes views taken
//! of the old one stale), and which persistent tensors a non-recomputable op may already
//! have written. Before each original op, every input that is not valid is made valid by
//! running its producer again, recursively through producers whose inputs are missing too
//! (an explicit stack, so chains of any length work); every later reader uses the
//! recomputed copy. A [`Policy`] decides what to free: the split-based strategies free a
//! storage when it leaves its last access or enters its discarded gap (see
//! [`walk_discards`]); static DTR evicts before each step.
//!
//! Recomputation that cannot be done safely (a non-recomputable producer, or a persistent
//! input already written in place) makes the candidate infeasible rather than wrong.

use crate::context::{Context, Validity};
use sgc_ir::{OpId, TensorId};

/// Why a candidate schedule cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Infeasible {
    /// A missing tensor has no producer that may run again.
    NotRecomputable,
    /// A recomputation would read persistent state already written in place.
    Dirty,
    /// Inputs kept invalidating each other (multi-output recomputation loops).
    NoFixpoint,
    /// The schedule recomputes more than [`MAX_RECOMPUTE_STEPS`] training steps' worth
    /// (cascades through long chains of freed tensors): no plan worth making, and building
    /// it would take time quadratic in the graph.
    TooCostly,
}

/// The most recomputation a schedule may do, in units of one training step (every op
/// once): by cost, and by number of recomputed steps.
pub(crate) const MAX_RECOMPUTE_STEPS: u64 = 32;

/// What a strategy decides while the schedule is built.
pub(crate) trait Policy {
    /// Called before every step is emitted (original or recomputed).
    fn before_step(&mut self, _st: &mut State<'_>, _op: OpId) {}
}

/// A policy that only frees after the walk's own rules (no eviction).
pub(crate) struct NoEviction;
impl Policy for NoEviction {}

/// The schedule under construction.
pub(crate) struct State<'c> {
    pub ctx: &'c Context<'c>,
    pub resident: Vec<bool>,
    /// Whether a root's bytes are counted in `bytes` (resident and before its last use).
    counted: Vec<bool>,
    version: Vec<u32>,
    /// For every tensor: the version of its root when it was last produced.
    made_at: Vec<Option<u32>>,
    dirty: Vec<bool>,
    /// Non-persistent bytes of counted roots.
    pub bytes: u64,
    pub steps: Vec<(OpId, bool)>,
    /// The recompute cost in the context's integer units.
    pub recompute_units: u64,
    /// The tensors that can be read now, persistent tensors readable from the start left
    /// out, in no particular order, and each one's place in it (`u32::MAX`: absent).
    readable: Vec<u32>,
    slot: Vec<u32>,
    /// XOR of the Zobrist keys of the tensors in `readable`.
    /// At the boundary between two traced positions this hash identifies everything the
    /// rest of a split walk depends on besides the discard decisions still to come.
    pub hash: u64,
    /// Position in the traced order of the op being scheduled.
    pub pos: usize,
    /// Steps emitted before this state's `steps` (a walk resumed at a boundary).
    pub step_base: usize,
    /// Roots touched since the last call to `take_touched`.
    touched: Vec<TensorId>,
    /// Roots produced by recomputation while the current op's inputs are made valid.
    pub round_made: Vec<TensorId>,
    /// Reused buffers: missing inputs of the op being scheduled, of a recomputed op, and
    /// the recomputation stack.
    missing_op: Vec<TensorId>,
    missing_rec: Vec<TensorId>,
    stack: Vec<(OpId, TensorId, bool)>,
}

impl<'c> State<'c> {
    pub fn new(ctx: &'c Context<'c>) -> Self {
        let g = ctx.g;
        let nt = g.num_tensors();
        let mut st = State {
            ctx,
            resident: vec![false; nt],
            counted: vec![false; nt],
            version: vec![0; nt],
            made_at: vec![None; nt],
            dirty: vec![false; nt],
            bytes: 0,
            steps: Vec::with_capacity(ctx.n + ctx.n / 2),
            recompute_units: 0,
            hash: 0,
            step_base: 0,
            readable: Vec::new(),
            slot: vec![u32::MAX; nt],
            pos: 0,
            touched: Vec::new(),
            round_made: Vec::new(),
            missing_op: Vec::new(),
            missing_rec: Vec::new(),
            stack: Vec::new(),
        };
        for &t in &ctx.input_roots {
            st.resident[t.index()] = true;
            st.counted[t.index()] = true;
            st.bytes += ctx.size(t);
            st.made_at[t.index()] = Some(0);
            st.sync(t);
        }
        st
    }

    /// The state of a split walk at boundary `pos` (before op `pos`), rebuilt from the
    /// tensors readable there (a [`Boundaries`] snapshot): everything else the walk tracks
    /// at a boundary follows from them and the position. `units` and `step_base` are the
    /// recompute units spent and the steps emitted before the boundary.
    pub fn restore(
        ctx: &'c Context<'c>,
        pos: usize,
        readable: &[u32],
        units: u64,
        step_base: usize,
    ) -> Self {
        let mut st = State::new(ctx);
        let g = ctx.g;
        for &t in &ctx.input_roots {
            st.resident[t.index()] = false;
            st.counted[t.index()] = false;
            st.made_at[t.index()] = None;
            st.sync(t);
        }
        st.bytes = 0;
        for &t in readable {
            let t = TensorId::new(t as usize);
            st.made_at[t.index()] = Some(0);
            if g.storage_root(t) == t {
                st.resident[t.index()] = true;
                let live =
                    ctx.kept[t.index()] || ctx.last_access(t).is_some_and(|l| l as usize >= pos);
                if ctx.validity[t.index()] == Validity::Current && live {
                    st.counted[t.index()] = true;
                    st.bytes += ctx.size(t);
                }
            }
        }
        for &t in readable {
            st.sync(TensorId::new(t as usize));
        }
        for &(t, first) in &ctx.dirtied {
            st.dirty[t.index()] = (first as usize) < pos;
        }
        st.recompute_units = units;
        st.step_base = step_base;
        st.pos = pos;
        st
    }

    /// The tensors readable now that a restore needs (persistent tensors that exist from
    /// the start are always readable and left out), in no particular order.
    pub fn readable(&self) -> &[u32] {
        &self.readable
    }

    /// Brings `t`'s entry in the readable set (and the hash) up to date.
    fn sync(&mut self, t: TensorId) {
        let i = t.index();
        if self.ctx.validity[i] == Validity::Always {
            return;
        }
        let (now, was) = (self.valid(t), self.slot[i] != u32::MAX);
        if now == was {
            return;
        }
        self.hash ^= self.ctx.zobrist[i];
        if now {
            self.slot[i] = self.readable.len() as u32;
            self.readable.push(i as u32);
        } else {
            let k = self.slot[i] as usize;
            self.readable.swap_remove(k);
            if let Some(&moved) = self.readable.get(k) {
                self.slot[moved as usize] = k as u32;
            }
            self.slot[i] = u32::MAX;
        }
    }

    /// [`State::sync`] for a root and all its views.
    fn sync_root(&mut self, r: TensorId) {
        self.sync(r);
        let ctx = self.ctx;
        for &v in &ctx.views_of[r.index()] {
            self.sync(v);
        }
    }

    /// Whether `t` can be read now.
    pub fn valid(&self, t: TensorId) -> bool {
        match self.ctx.validity[t.index()] {
            Validity::Always => true,
            Validity::Produced => self.made_at[t.index()].is_some(),
            Validity::Current => {
                let root = self.ctx.g.storage_root(t).index();
                self.resident[root] && self.made_at[t.index()] == Some(self.version[root])
            }
        }
    }

    /// Frees a root now (it will be recomputed if read again).
    pub fn release(&mut self, r: TensorId) {
        self.resident[r.index()] = false;
        self.sync_root(r);
        self.uncount(r);
    }

    /// Stops counting a root that stays available (it cannot be recomputed).
    pub fn uncount(&mut self, r: TensorId) {
        if self.counted[r.index()] {
            self.counted[r.index()] = false;
            self.bytes -= self.ctx.size(r);
        }
    }

    pub fn is_counted(&self, r: TensorId) -> bool {
        self.counted[r.index()]
    }

    /// Applies `f` to every root touched since the last call (in touch order, possibly
    /// repeated) and forgets them.
    pub fn drain_touched(&mut self, mut f: impl FnMut(&mut Self, TensorId)) {
        let mut v = std::mem::take(&mut self.touched);
        for &r in &v {
            f(self, r);
        }
        v.clear();
        self.touched = v;
    }

    /// Roots touched since the last call, deduplicated in order.
    pub fn take_touched(&mut self) -> Vec<TensorId> {
        let mut v = std::mem::take(&mut self.touched);
        v.sort();
        v.dedup();
        v
    }

    /// Appends a step and applies its effects.
    pub fn emit(
        &mut self,
        op: OpId,
        recompute: bool,
        policy: &mut dyn Policy,
    ) -> Result<(), Infeasible> {
        let ctx = self.ctx;
        let i = op.index();
        if recompute {
            if !ctx.rerunnable[i] {
                return Err(Infeasible::NotRecomputable);
            }
            if self.recompute_units > ctx.max_recompute_units
                || self.step_base + self.steps.len()
                    > (MAX_RECOMPUTE_STEPS as usize + 1) * (ctx.n + 16)
            {
                return Err(Infeasible::TooCostly);
            }
            if ctx.persistent_in[i].iter().any(|p| self.dirty[p.index()]) {
                return Err(Infeasible::Dirty);
            }
        }
        policy.before_step(self, op);
        self.steps.push((op, recompute));
        for &t in &ctx.g.op(op).outputs {
            let root = ctx.g.storage_root(t);
            if root == t {
                self.version[t.index()] += 1;
                if !self.resident[t.index()] {
                    self.resident[t.index()] = true;
                }
                if !self.counted[t.index()] && ctx.validity[t.index()] == Validity::Current {
                    self.counted[t.index()] = true;
                    self.bytes += ctx.size(t);
                }
                if recompute {
                    self.round_made.push(t);
                }
            }
            self.made_at[t.index()] = Some(self.version[root.index()]);
            if root == t {
                self.sync_root(t);
            } else {
                self.sync(t);
            }
        }
        self.touched.extend_from_slice(&ctx.in_roots[i]);
        self.touched.extend_from_slice(&ctx.out_roots[i]);
        if recompute {
            self.recompute_units += ctx.cost_units[i];
        } else if !ctx.g.op(op).recomputable {
            for &p in &ctx.persistent_in[i] {
                self.dirty[p.index()] = true;
            }
        }
        Ok(())
    }

    /// Makes every input of `op` valid, recomputing as needed.
    pub fn ensure_inputs(&mut self, op: OpId, policy: &mut dyn Policy) -> Result<(), Infeasible> {
        let g = self.ctx.g;
        let inputs = &g.op(op).inputs;
        if inputs.iter().all(|&t| self.valid(t)) {
            return Ok(());
        }
        let mut missing = std::mem::take(&mut self.missing_op);
        let mut result = Err(Infeasible::NoFixpoint);
        for _pass in 0..4 {
            missing.clear();
            missing.extend(inputs.iter().copied().filter(|&t| !self.valid(t)));
            if missing.is_empty() {
                result = Ok(());
                break;
            }
            if let Err(e) = missing.iter().try_for_each(|&t| self.make_valid(t, policy)) {
                result = Err(e);
                break;
            }
        }
        self.missing_op = missing;
        result
    }

    /// Recomputes `t`: its producer, after the producers of its own missing inputs.
    pub fn make_valid(&mut self, t: TensorId, policy: &mut dyn Policy) -> Result<(), Infeasible> {
        let mut stack = std::mem::take(&mut self.stack);
        let mut missing = std::mem::take(&mut self.missing_rec);
        stack.clear();
        let r = self.recompute(t, policy, &mut stack, &mut missing);
        self.stack = stack;
        self.missing_rec = missing;
        r
    }

    /// [`State::make_valid`] with its buffers: `stack` holds (op, tensor it must make
    /// valid, inputs already requested).
    fn recompute(
        &mut self,
        t: TensorId,
        policy: &mut dyn Policy,
        stack: &mut Vec<(OpId, TensorId, bool)>,
        missing: &mut Vec<TensorId>,
    ) -> Result<(), Infeasible> {
        let g = self.ctx.g;
        let push = |stack: &mut Vec<(OpId, TensorId, bool)>, t: TensorId| {
            g.producer(t)
                .map(|p| stack.push((p, t, false)))
                .ok_or(Infeasible::NotRecomputable)
        };
        push(stack, t)?;
        let mut budget = 8 * (self.ctx.n + 8);
        while let Some((op, want, expanded)) = stack.pop() {
            budget = budget.checked_sub(1).ok_or(Infeasible::NoFixpoint)?;
            if self.valid(want) {
                continue;
            }
            let inputs = &g.op(op).inputs;
            if inputs.iter().all(|&u| self.valid(u)) {
                self.emit(op, true, policy)?;
                continue;
            }
            missing.clear();
            missing.extend(inputs.iter().copied().filter(|&u| !self.valid(u)));
            if expanded && missing.iter().all(|&u| g.producer(u).is_none()) {
                return Err(Infeasible::NotRecomputable);
            }
            stack.push((op, want, true));
            for &u in missing.iter().rev() {
                push(stack, u)?;
            }
        }
        Ok(())
    }

    /// Makes every graph output valid at the end of the step.
    pub fn ensure_outputs(&mut self, policy: &mut dyn Policy) -> Result<(), Infeasible> {
        let g = self.ctx.g;
        for &t in g.outputs() {
            if !self.valid(t) {
                self.make_valid(t, policy)?;
            }
        }
        Ok(())
    }
}

/// Builds the schedule of a split-based plan: `discard[r]` says that root `r` is freed at
/// the start of its largest gap and recomputed at its end. Every freeable root is also
/// freed after its last traced access (a recomputed copy made for another tensor's sake
/// does not linger).
pub(crate) fn walk_discards<'c>(
    ctx: &'c Context<'c>,
    discard: &[bool],
) -> Result<State<'c>, Infeasible> {
    walk_recorded(ctx, discard, None, None, usize::MAX).map(|w| w.state)
}

/// What the walk records at each boundary between traced positions: boundary `i` is the
/// moment before op `i` (and its recomputations) is scheduled; boundary `n` precedes the
/// recomputation of missing graph outputs. A walk that starts at boundary `first` records
/// boundaries `first..`, with step indices counted from its own first step.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Boundaries {
    pub first: usize,
    /// Steps emitted before the boundary.
    pub step_at: Vec<u32>,
    /// [`State::hash`] at the boundary.
    pub hash: Vec<u64>,
    /// Recompute cost units spent before the boundary (from the start of the schedule).
    pub units_at: Vec<u64>,
    /// [`State::readable`] at every boundary that is a multiple of `stride` (after `first`).
    pub snaps: Vec<(usize, std::sync::Arc<[u32]>)>,
}

/// Where a walk may stop early: at the first boundary `i >= from` whose state hash equals
/// `hash[i]`, the state of another walk that makes the same decisions from `from` on.
#[derive(Clone, Copy)]
pub(crate) struct Join<'a> {
    pub hash: &'a [u64],
    pub from: usize,
}

/// A finished (or joined) walk.
pub(crate) struct Walk<'c> {
    pub state: State<'c>,
    pub bounds: Boundaries,
    /// The boundary where the walk joined the other one (`None`: it ran to the end).
    pub joined: Option<usize>,
}

/// [`walk_discards`] from `start` (a state at a boundary; `None`: the beginning),
/// recording every boundary and a snapshot every `stride` boundaries, and stopping where
/// `join` allows.
pub(crate) fn walk_recorded<'c>(
    ctx: &'c Context<'c>,
    discard: &[bool],
    start: Option<State<'c>>,
    join: Option<Join<'_>>,
    stride: usize,
) -> Result<Walk<'c>, Infeasible> {
    let mut st = start.unwrap_or_else(|| State::new(ctx));
    let first = st.pos;
    let mut policy = NoEviction;
    let cap = ctx.n + 1 - first;
    let mut b = Boundaries {
        first,
        step_at: Vec::with_capacity(cap),
        hash: Vec::with_capacity(cap),
        units_at: Vec::with_capacity(cap),
        snaps: Vec::new(),
    };
    for i in first..=ctx.n {
        b.step_at.push(st.steps.len() as u32);
        b.hash.push(st.hash);
        b.units_at.push(st.recompute_units);
        if join.is_some_and(|j| i >= j.from && j.hash[i] == st.hash) {
            return Ok(Walk {
                state: st,
                bounds: b,
                joined: Some(i),
            });
        }
        if i > first && i % stride == 0 {
            b.snaps.push((i, st.readable().into()));
        }
        if i == ctx.n {
            break;
        }
        let op = OpId::new(i);
        st.pos = i;
        st.ensure_inputs(op, &mut policy)?;
        st.emit(op, false, &mut policy)?;
        // Freeing is per root and idempotent, so order and repeats do not matter.
        st.drain_touched(|st, r| release_after(st, r, i, discard));
    }
    st.pos = ctx.n;
    st.ensure_outputs(&mut policy)?;
    Ok(Walk {
        state: st,
        bounds: b,
        joined: None,
    })
}

/// The split walk's freeing rule for a root touched at traced position `i`.
fn release_after(st: &mut State<'_>, r: TensorId, i: usize, discard: &[bool]) {
    let ctx = st.ctx;
    let last = ctx.last_access(r).map_or(0, |l| l as usize);
    let opens_gap = ctx.gap[r.index()].is_some_and(|(a, _)| a as usize == i);
    if ctx.freeable[r.index()] && (last <= i || (discard[r.index()] && opens_gap)) {
        st.release(r);
    } else if last <= i && !ctx.kept[r.index()] {
        st.uncount(r);
    }
}
