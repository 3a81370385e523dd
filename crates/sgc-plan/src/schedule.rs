//! Recomputation with eviction, the engine of static DTR ([`crate::dtr`]).
//!
//! [`State`] walks the traced order and keeps what is resident: each storage root's
//! residency and version (a recomputed root gets a new version, which makes views taken
//! of the old one stale), and which persistent tensors a non-recomputable op may already
//! have written. Before each original op, every input that is not valid is made valid by
//! running its producer again, recursively through producers whose inputs are missing too
//! (an explicit stack, so chains of any length work); every later reader uses the
//! recomputed copy. A [`Policy`] decides what to evict before each step. Unlike the
//! split-based strategies ([`crate::recompute`], where every op runs at most twice), an
//! evicted tensor may be recomputed again and again; [`MAX_RECOMPUTE_STEPS`] bounds the
//! total.
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

    /// Frees a root now (it will be recomputed if read again).
    pub fn release(&mut self, r: TensorId) {
        self.resident[r.index()] = false;
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
