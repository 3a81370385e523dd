//! Recomputation with eviction, the engine of static DTR ([`crate::dtr`]).
//!
//! [`State`] walks the traced order and keeps what is resident: each storage root's
//! residency and version (a recomputed root gets a new version, which makes views taken
//! of the old one stale), and which persistent tensors a non-recomputable op may already
//! have written. Before each original op, every input that is not valid is made valid:
//! the ops to run again are the producers of the invalid inputs, closed over the producers
//! of their own invalid inputs (a *recomputation set*), and they run in traced order, the
//! topological order the trace itself used; every later reader uses the recomputed copy.
//! While a set runs, every root that a later op of the set reads is pinned
//! ([`State::needed`]): the policy may evict anything else, the set's own intermediates
//! included once their last reader in the set has run. (Pinning everything a round made
//! would hold whole recomputed prefixes of the network at once.)
//! A [`Policy`] decides what to evict before each step. Unlike the split-based strategies
//! ([`crate::sublinear::recompute`], where every op runs at most twice), an evicted tensor may be
//! recomputed again and again; [`MAX_RECOMPUTE_STEPS`] bounds the total.
//!
//! Recomputation that cannot be done safely (a non-recomputable producer, or a persistent
//! input already written in place) makes the schedule infeasible rather than wrong.

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
    /// A split-based schedule would run an op a third time.
    ThirdRun,
}

pub(crate) use crate::context::MAX_RECOMPUTE_STEPS;

/// What a strategy decides while the schedule is built.
pub(crate) trait Policy {
    /// Called before every step is emitted (original or recomputed).
    fn before_step(&mut self, _st: &mut State<'_>, _op: OpId) {}
}

/// The schedule under construction.
pub(crate) struct State<'c> {
    pub ctx: &'c Context<'c>,
    pub resident: Vec<bool>,
    /// Whether a root's bytes are counted in `bytes` (resident and before its last use).
    counted: Vec<bool>,
    /// The counted freeable roots, in id order: the only roots a policy may evict (an
    /// index, so that choosing a victim visits the resident candidates, not every tensor).
    evictable: std::collections::BTreeSet<TensorId>,
    /// Whether `fresh` and `changed` are kept (for a policy with its own index of the
    /// candidates).
    pub track: bool,
    /// Roots added to `evictable` since the last call to `take_changes`.
    fresh: Vec<TensorId>,
    /// Roots made, remade or released since the last call to `take_changes`.
    changed: Vec<TensorId>,
    version: Vec<u32>,
    /// For every tensor: the version of its root when it was last produced.
    made_at: Vec<Option<u32>>,
    dirty: Vec<bool>,
    /// Non-persistent bytes of counted roots.
    pub bytes: u64,
    pub steps: Vec<(OpId, bool)>,
    /// The recompute cost in the context's integer units.
    pub recompute_units: u64,
    /// Position in the traced order of the op being scheduled.
    pub pos: usize,
    /// Roots touched since the last call to `take_touched`.
    touched: Vec<TensorId>,
    /// Per root: how many ops of the recomputations under way still read it (they run
    /// later in the same round; such a root must stay resident until they have).
    pending_reads: Vec<u32>,
    /// Per op: whether it is in the recomputation set being built ([`State::closure`]).
    in_set: Vec<bool>,
}

impl<'c> State<'c> {
    pub fn new(ctx: &'c Context<'c>) -> Self {
        let g = ctx.g;
        let nt = g.num_tensors();
        let mut st = State {
            ctx,
            resident: vec![false; nt],
            counted: vec![false; nt],
            evictable: Default::default(),
            track: false,
            fresh: Vec::new(),
            changed: Vec::new(),
            version: vec![0; nt],
            made_at: vec![None; nt],
            dirty: vec![false; nt],
            bytes: 0,
            steps: Vec::with_capacity(ctx.n + ctx.n / 2),
            recompute_units: 0,
            pos: 0,
            touched: Vec::new(),
            pending_reads: vec![0; nt],
            in_set: vec![false; ctx.n],
        };
        for &t in &ctx.input_roots {
            st.resident[t.index()] = true;
            st.counted[t.index()] = true;
            if ctx.freeable[t.index()] {
                st.evictable.insert(t);
            }
            st.bytes += ctx.size(t);
            st.made_at[t.index()] = Some(0);
        }
        st
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

    /// Whether root `r` was made, is not resident, and is read again later: recomputing
    /// it is still ahead.
    pub fn evicted(&self, r: TensorId) -> bool {
        !self.resident[r.index()]
            && self.made_at[r.index()].is_some()
            && self
                .ctx
                .next_access(r, self.pos.saturating_sub(1))
                .is_some()
    }

    /// Whether root `r` was made and is not resident (recomputing it would be needed to
    /// read it again).
    pub fn gone(&self, r: TensorId) -> bool {
        !self.resident[r.index()] && self.made_at[r.index()].is_some()
    }

    /// Frees a root now (it will be recomputed if read again).
    pub fn release(&mut self, r: TensorId) {
        if self.track {
            self.changed.push(r);
        }
        self.resident[r.index()] = false;
        self.uncount(r);
    }

    /// Stops counting a root that stays available (it cannot be recomputed).
    pub fn uncount(&mut self, r: TensorId) {
        if self.counted[r.index()] {
            self.counted[r.index()] = false;
            self.bytes -= self.ctx.size(r);
            self.evictable.remove(&r);
        }
    }

    /// The counted freeable roots (resident, before their last use), in id order.
    pub fn evictable(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.evictable.iter().copied()
    }

    /// Whether root `r` is one of [`State::evictable`].
    pub fn is_evictable(&self, r: TensorId) -> bool {
        self.counted[r.index()] && self.ctx.freeable[r.index()]
    }

    /// With `track`: the roots that joined [`State::evictable`] (some may have left it
    /// again) or were made, remade or released since the last call, appended to `into`.
    /// The input roots resident from the start are not among them.
    pub fn take_changes(&mut self, into: &mut Vec<TensorId>) {
        into.append(&mut self.fresh);
        into.append(&mut self.changed);
    }

    pub fn is_counted(&self, r: TensorId) -> bool {
        self.counted[r.index()]
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
                || self.steps.len() > (MAX_RECOMPUTE_STEPS as usize + 1) * (ctx.n + 16)
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
                if self.track {
                    self.changed.push(t);
                }
                self.version[t.index()] += 1;
                if !self.resident[t.index()] {
                    self.resident[t.index()] = true;
                }
                if !self.counted[t.index()] && ctx.validity[t.index()] == Validity::Current {
                    self.counted[t.index()] = true;
                    self.bytes += ctx.size(t);
                    if ctx.freeable[t.index()] {
                        self.evictable.insert(t);
                        if self.track {
                            self.fresh.push(t);
                        }
                    }
                }
            }
            self.made_at[t.index()] = Some(self.version[root.index()]);
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

    /// Whether a recomputation under way still reads root `r`.
    pub fn needed(&self, r: TensorId) -> bool {
        self.pending_reads[r.index()] > 0
    }

    /// Makes every input of `op` valid, recomputing as needed.
    pub fn ensure_inputs(&mut self, op: OpId, policy: &mut dyn Policy) -> Result<(), Infeasible> {
        let inputs = &self.ctx.g.op(op).inputs;
        self.make_all_valid(inputs, policy, 0)
    }

    /// Makes every tensor of `want` valid: the producers of the invalid ones, and of every
    /// invalid input those need in turn, run again in traced order (a topological order,
    /// the one the trace itself used). A re-run multi-output op gives its other outputs a
    /// new version, which can make a view taken of them stale: a few passes settle it.
    fn make_all_valid(
        &mut self,
        want: &[TensorId],
        policy: &mut dyn Policy,
        depth: u32,
    ) -> Result<(), Infeasible> {
        for _pass in 0..4 {
            let missing: Vec<TensorId> = want.iter().copied().filter(|&t| !self.valid(t)).collect();
            if missing.is_empty() {
                return Ok(());
            }
            let set = self.closure(&missing)?;
            self.run_set(&set, policy, depth)?;
        }
        Err(Infeasible::NoFixpoint)
    }

    /// The ops to run again so that `missing` becomes valid, in traced order: producers of
    /// invalid tensors, closed over their own invalid inputs.
    fn closure(&mut self, missing: &[TensorId]) -> Result<Vec<OpId>, Infeasible> {
        let g = self.ctx.g;
        let mut set = Vec::new();
        let mut stack: Vec<TensorId> = missing.to_vec();
        let mut result = Ok(());
        while let Some(t) = stack.pop() {
            let Some(p) = g.producer(t) else {
                result = Err(Infeasible::NotRecomputable);
                break;
            };
            if std::mem::replace(&mut self.in_set[p.index()], true) {
                continue;
            }
            set.push(p);
            stack.extend(g.op(p).inputs.iter().copied().filter(|&u| !self.valid(u)));
        }
        for p in &set {
            self.in_set[p.index()] = false;
        }
        result?;
        set.sort_unstable();
        Ok(set)
    }

    /// Runs a recomputation set in order; every root its later ops read stays pinned
    /// ([`State::needed`]) until they have run.
    fn run_set(
        &mut self,
        set: &[OpId],
        policy: &mut dyn Policy,
        depth: u32,
    ) -> Result<(), Infeasible> {
        let ctx = self.ctx;
        for p in set {
            for &r in &ctx.in_roots[p.index()] {
                self.pending_reads[r.index()] += 1;
            }
        }
        let mut result = Ok(());
        for (k, &p) in set.iter().enumerate() {
            result = self.run_one(p, policy, depth);
            for &r in &ctx.in_roots[p.index()] {
                self.pending_reads[r.index()] -= 1;
            }
            if result.is_err() {
                for q in &set[k + 1..] {
                    for &r in &ctx.in_roots[q.index()] {
                        self.pending_reads[r.index()] -= 1;
                    }
                }
                break;
            }
        }
        result
    }

    /// Re-runs one op of a recomputation set (unless a nested recomputation already did),
    /// after its inputs if an earlier op of the set made one stale (a re-run multi-output
    /// op gives all its outputs a new version).
    fn run_one(&mut self, p: OpId, policy: &mut dyn Policy, depth: u32) -> Result<(), Infeasible> {
        let g = self.ctx.g;
        if g.op(p).outputs.iter().all(|&t| self.valid(t)) {
            return Ok(());
        }
        if !g.op(p).inputs.iter().all(|&u| self.valid(u)) {
            if depth >= 4 {
                return Err(Infeasible::NoFixpoint);
            }
            self.make_all_valid(&g.op(p).inputs, policy, depth + 1)?;
        }
        self.emit(p, true, policy)
    }

    /// Makes every graph output valid at the end of the step.
    pub fn ensure_outputs(&mut self, policy: &mut dyn Policy) -> Result<(), Infeasible> {
        let g = self.ctx.g;
        for &t in g.outputs() {
            if !self.valid(t) {
                self.make_all_valid(&[t], policy, 0)?;
            }
        }
        Ok(())
    }
}
