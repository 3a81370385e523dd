//! Bounded recomputation: a discard plan ([`crate::discard`]) becomes a step sequence in
//! which every op runs at most twice.
//!
//! The walk follows the traced order. After the access that opens a discarded storage's
//! gap, its original is no longer readable by later ops; neither is any original after
//! its last traced access (a recomputation that needs it makes it again). Right before the read that closes
//! the gap, it is recomputed once: its producer runs again, after the producers of those of
//! its inputs that are missing too, recursively, but only back to the start of the block
//! the storage was made in. Inputs made before that block are read as they are: an older
//! storage that was discarded meanwhile is read from its original, which keeps that
//! original alive until the read (the memory model counts a storage from its production to
//! its last use, so this costs memory, never correctness). A recomputed copy is never
//! discarded: it serves every later reader, including the gap-closing reads of storages it
//! was made for, and is freed after its last use. So an op runs again only when an output
//! of it is missing, and once it ran again all its outputs are copies: no op runs a third
//! time (a view made from a storage that is recomputed later is stale and is made again
//! from the copy; should that ever need a third run, the candidate is refused).
//!
//! Nothing is freed explicitly here: the peak comes from the step sequence under the IR's
//! memory model ([`crate::profile`]), the same model the verifier replays.
//!
//! Recomputation that cannot be done safely (a producer that may not run again, or a
//! persistent input already written in place by a non-recomputable op) makes the candidate
//! infeasible rather than wrong.

use crate::context::{Context, Slot, Validity, NEVER};
use crate::discard::{Blocks, Discard};
use crate::genome::Genome;
use crate::schedule::Infeasible;
use sgc_ir::{OpId, TensorId};

/// The original was discarded (or retired after its last traced access) and not
/// recomputed since.
const DISCARDED: u8 = 1;
/// A discarded original that its gap's closing read must recompute.
const PENDING: u8 = 2;
/// The current instance is a recomputed copy.
const COPY: u8 = 4;
/// A persistent root that a non-recomputable op has read (and may have written).
const DIRTY: u8 = 8;

/// A built schedule: `(op, recomputed?)` per step, its recompute cost in units, and the
/// live (non-persistent) bytes at every step under the IR's memory model (the walk counts
/// each storage instance from its production to its last use as it goes, the same count
/// [`crate::profile::live_bytes`] makes from the steps; tests check they agree).
pub(crate) struct Schedule {
    pub steps: Vec<(OpId, bool)>,
    pub units: u64,
    pub live: Vec<u64>,
}

impl Schedule {
    /// The peak, persistent bytes included.
    pub fn peak(&self, ctx: &Context<'_>) -> u64 {
        let live = self.live.iter().copied().max().unwrap_or(0);
        ctx.persistent_bytes.saturating_add(live)
    }
}

/// The schedule of `genome`'s discard plan (recomputation bounded by its blocks, see
/// [`Genome::bounds`]).
pub(crate) fn schedule(
    ctx: &Context<'_>,
    genome: &Genome,
    plan: &[Discard],
) -> Result<Schedule, Infeasible> {
    let mut w = Walk::new(ctx, Blocks::new(genome.bounds(), ctx.n));
    w.forward_only = genome.rules.forward_only;
    let mut by_open: Vec<&Discard> = plan.iter().collect();
    by_open.sort_unstable_by_key(|d| (d.open, d.root));
    let mut by_close: Vec<&Discard> = plan.iter().collect();
    by_close.sort_unstable_by_key(|d| (d.close, d.root));
    let (mut o, mut c) = (0, 0);
    for i in 0..ctx.n {
        while let Some(d) = by_close.get(c).filter(|d| d.close as usize == i) {
            c += 1;
            if w.take_pending(d.root) {
                w.ensure(d.root, d.block_begin)?;
            }
        }
        let op = OpId::new(i);
        for &t in ctx.inputs(i) {
            if !w.readable(t) {
                let bb = w.block_begin_of(t);
                w.ensure(t, bb)?;
            }
        }
        w.emit(op, false)?;
        while let Some(d) = by_open.get(o).filter(|d| d.open as usize == i) {
            o += 1;
            w.discard(d.root);
        }
        w.retire(i);
    }
    for &t in ctx.g.outputs() {
        if !w.readable(t) {
            let bb = w.block_begin_of(t);
            w.ensure(t, bb)?;
        }
    }
    let live = w.live();
    Ok(Schedule {
        steps: w.steps,
        units: w.units,
        live,
    })
}

/// The walk's state.
struct Walk<'c> {
    ctx: &'c Context<'c>,
    blocks: Blocks<'c>,
    /// Per tensor: see [`Slot`].
    slot: Vec<Slot>,
    /// Per op: runs so far.
    runs: Vec<u8>,
    steps: Vec<(OpId, bool)>,
    units: u64,
    /// The recomputation stack: (op, index of the next input to check).
    stack: Vec<(OpId, usize)>,
    /// Recompute forward ops only; storages made by other ops are read as they are.
    forward_only: bool,
    /// Per step (and one past): bytes of instances starting minus bytes ending before it.
    delta: Vec<i128>,
}

impl<'c> Walk<'c> {
    fn new(ctx: &'c Context<'c>, blocks: Blocks<'c>) -> Self {
        Walk {
            ctx,
            blocks,
            slot: ctx.walk_start.clone(),
            runs: vec![0; ctx.n],
            steps: Vec::with_capacity(ctx.n + ctx.n / 2),
            units: 0,
            stack: Vec::new(),
            forward_only: false,
            delta: Vec::with_capacity(ctx.n + ctx.n / 2 + 1),
        }
    }

    fn flag(&self, r: TensorId, f: u8) -> bool {
        self.slot[r.index()].flags & f != 0
    }

    /// Clears root `r`'s pending mark and says whether it was set.
    fn take_pending(&mut self, r: TensorId) -> bool {
        let s = &mut self.slot[r.index()];
        let was = s.flags & PENDING != 0;
        s.flags &= !PENDING;
        was
    }

    /// Closes instance `(start, last)` of root `r` (nothing if it was never used).
    fn close(&mut self, r: usize, (start, last): (u32, u32)) {
        if start != NEVER && last != NEVER {
            let size = i128::from(self.ctx.bytes[r]);
            self.delta[start as usize] += size;
            self.delta[last as usize + 1] -= size;
        }
    }

    /// The live bytes at every step, closing the instances still open (graph outputs run
    /// to the end).
    fn live(&mut self) -> Vec<u64> {
        let n = self.steps.len();
        if n == 0 {
            return Vec::new();
        }
        self.delta.resize(n + 1, 0);
        for r in 0..self.slot.len() {
            let (start, last) = self.slot[r].open;
            if start != NEVER {
                let last = if self.ctx.kept[r] { n as u32 - 1 } else { last };
                self.close(r, (start, last));
            }
        }
        let mut acc = 0i128;
        self.delta[..n]
            .iter()
            .map(|d| {
                acc += d;
                u64::try_from(acc).unwrap_or(u64::MAX)
            })
            .collect()
    }

    fn root(&self, t: TensorId) -> TensorId {
        self.ctx.root[t.index()]
    }

    /// Whether the tensor's current instance exists (a view: made from its base's
    /// current instance).
    fn current(&self, t: TensorId) -> bool {
        self.slot[t.index()].made == self.slot[self.root(t).index()].version
    }

    /// Whether an original op (or a recomputation inside the block) may read `t` now.
    fn readable(&self, t: TensorId) -> bool {
        match self.ctx.validity[t.index()] {
            Validity::Always => true,
            Validity::Produced => self.slot[t.index()].made != NEVER,
            Validity::Current => self.current(t) && !self.flag(self.root(t), DISCARDED),
        }
    }

    /// Whether a recomputation bounded to the block starting at `bb` must make `t` again
    /// (otherwise it reads `t` as it is).
    fn needs(&self, t: TensorId, bb: u32) -> bool {
        if self.readable(t) {
            return false;
        }
        let r = self.root(t);
        if r != t {
            // A view is made again when it is stale, or when its base is.
            return !self.current(t) || self.needs(r, bb);
        }
        if !self.current(r) {
            return true;
        }
        match self.ctx.g.producer(r) {
            Some(p) => {
                let i = p.index();
                self.ctx.rerunnable[i]
                    && i as u32 >= bb
                    && (!self.forward_only || self.ctx.forward[i])
            }
            None => false,
        }
    }

    /// First position of the block that made `t`'s storage.
    fn block_begin_of(&self, t: TensorId) -> u32 {
        let r = self.root(t);
        let made_at = self.ctx.g.producer(r).map_or(0, |p| p.index() as u32);
        self.blocks.of(made_at).0
    }

    /// Makes `t` readable: recomputes its producer after the missing inputs that a
    /// recomputation bounded to `bb` must make first.
    fn ensure(&mut self, t: TensorId, bb: u32) -> Result<(), Infeasible> {
        let g = self.ctx.g;
        let p = g.producer(t).ok_or(Infeasible::NotRecomputable)?;
        self.stack.clear();
        self.stack.push((p, 0));
        while let Some(&(op, k)) = self.stack.last() {
            let inputs = self.ctx.inputs(op.index());
            if let Some(&u) = inputs.get(k) {
                if self.needs(u, bb) {
                    let q = g.producer(u).ok_or(Infeasible::NotRecomputable)?;
                    if self.stack.len() > self.ctx.n {
                        return Err(Infeasible::NoFixpoint);
                    }
                    self.stack.push((q, 0));
                } else if let Some(top) = self.stack.last_mut() {
                    top.1 += 1;
                }
                continue;
            }
            self.stack.pop();
            if !self
                .ctx
                .outputs(op.index())
                .iter()
                .all(|&o| self.readable(o))
            {
                self.emit(op, true)?;
            }
        }
        if self.readable(t) {
            Ok(())
        } else {
            Err(Infeasible::NoFixpoint)
        }
    }

    /// Appends a step and applies its effects.
    fn emit(&mut self, op: OpId, recompute: bool) -> Result<(), Infeasible> {
        let ctx = self.ctx;
        let i = op.index();
        if recompute {
            if !ctx.rerunnable[i] {
                return Err(Infeasible::NotRecomputable);
            }
            if self.runs[i] >= 2 {
                return Err(Infeasible::ThirdRun);
            }
            if ctx.persistent_in[i].iter().any(|&p| self.flag(p, DIRTY)) {
                return Err(Infeasible::Dirty);
            }
            self.units += ctx.cost_units[i];
        } else if !ctx.g.op(op).recomputable {
            for &p in &ctx.persistent_in[i] {
                self.slot[p.index()].flags |= DIRTY;
            }
        }
        self.runs[i] += 1;
        let s = self.steps.len() as u32;
        self.steps.push((op, recompute));
        self.delta.resize(s as usize + 2, 0);
        for &t in ctx.inputs(i) {
            if ctx.current[t.index()] {
                let r = self.root(t).index();
                self.slot[r].open.1 = s;
            }
        }
        for &t in ctx.outputs(i) {
            let r = self.root(t);
            if r == t {
                let sl = &mut self.slot[r.index()];
                sl.version += 1;
                sl.flags &= !(DISCARDED | PENDING | COPY);
                if recompute {
                    sl.flags |= COPY;
                }
            }
            self.slot[t.index()].made = self.slot[r.index()].version;
            if ctx.current[t.index()] {
                if r == t {
                    let old = std::mem::replace(&mut self.slot[r.index()].open, (s, s));
                    self.close(r.index(), old);
                } else {
                    self.slot[r.index()].open.1 = s;
                }
            }
        }
        Ok(())
    }

    /// Retires the originals whose last traced access was position `i`: a recomputation
    /// in their block makes them again rather than keep them alive (older blocks still
    /// read them as they are).
    fn retire(&mut self, i: usize) {
        for &r in &self.ctx.last_of[i] {
            let s = &mut self.slot[r.index()];
            if s.flags & COPY == 0 {
                s.flags |= DISCARDED;
            }
        }
    }

    /// Discards root `r`'s original after the access opening its gap.
    fn discard(&mut self, r: TensorId) {
        if self.current(r) && !self.flag(r, COPY | DISCARDED) {
            self.slot[r.index()].flags |= DISCARDED | PENDING;
        }
    }
}
