//! Bounded recomputation: a discard plan ([`super::discard`]) becomes a step sequence in
//! which every op runs at most twice.
//!
//! The walk follows the traced order. After the access that opens a discarded storage's
//! gap, its original is no longer readable by later ops; neither is any original after its
//! last traced access (a recomputation that needs it makes it again). Right before the read
//! that closes the gap, it is recomputed once: its producer runs again, after the producers
//! of those of its inputs that are missing too, recursively, but only back to the start of
//! the block the storage was made in. Inputs made before that block are read as they are:
//! an older storage that was discarded meanwhile is read from its original, which keeps
//! that original alive until the read (the memory model counts a storage from its
//! production to its last use, so this costs memory, never correctness). A recomputed copy
//! is never discarded: it serves every later reader, including the gap-closing reads of
//! storages it was made for, and is freed after its last use. So an op runs again only when
//! an output of it is missing, and once it ran again all its outputs are copies: no op runs
//! a third time (a view made from a storage that is recomputed later is stale and is made
//! again from the copy; should that ever need a third run, the candidate is refused).
//!
//! Nothing is freed explicitly here: the peak comes from the step sequence under the IR's
//! memory model ([`super::profile`]), the same model the verifier replays.
//!
//! Recomputation that cannot be done safely (a producer that may not run again, or a
//! persistent input already written in place by a non-recomputable op) makes the candidate
//! infeasible rather than wrong.
//!
//! **Resuming from a shared prefix.** Up to the first position where one of its gaps
//! closes, a walk does the same for every plan: each original op runs once with every input
//! readable (a discarded storage is read next only by the read that closes its gap, a
//! retired original never again), and a discard only marks its storage, which nothing
//! looks at before that read. So the state before position `p` (at or before the first
//! close) is the empty plan's, plus the marks of the discards opened before `p`.
//! The context keeps the empty plan's state at evenly spaced positions; a walk starts
//! from the last one at or before its first close, marks the discards opened before it and
//! walks on from there. On the real corpus the first close mostly comes right after the
//! forward pass, so the forward pass is walked once per graph instead of once per plan.
//! Tests check that resumed and whole walks give the same steps and live bytes on every
//! graph of the real corpus and the zoo.

use crate::context::{
    Context, PrefixState, Prefixes, Slot, Validity, NEVER, NEVER_MADE, NO_OP, OP_FORWARD,
    OP_RERUNNABLE,
};
use crate::schedule::Infeasible;
use crate::sublinear::discard::{Blocks, Discard};
use crate::sublinear::genome::Genome;
use sgc_ir::{OpId, TensorId};

/// The original was discarded (or retired after its last traced access) and not
/// recomputed since.
const DISCARDED: u8 = 1;
/// A discarded original that its gap's closing read must recompute.
const PENDING: u8 = 2;
/// The current instance is a recomputed copy.
const COPY: u8 = 4;

/// A built schedule: `(op, recomputed?)` per step and the live (non-persistent) bytes at
/// every step under the IR's memory model (the walk counts each storage instance from its
/// production to its last use as it goes, the same count [`super::profile::live_bytes`]
/// makes from the steps; tests check they agree).
pub(crate) struct Schedule {
    pub steps: Vec<(OpId, bool)>,
    pub live: Vec<u64>,
}

/// The schedule of `genome`'s discard plan (recomputation bounded by its blocks, see
/// [`Genome::bounds`]).
pub(crate) fn schedule(
    ctx: &Context<'_>,
    genome: &Genome,
    plan: &[Discard],
) -> Result<Schedule, Infeasible> {
    scheduled(ctx, genome, plan, true)
}

/// [`schedule`], walked from a prefix state when `resume` is set and from the first op
/// otherwise (tests compare the two).
pub(crate) fn scheduled(
    ctx: &Context<'_>,
    genome: &Genome,
    plan: &[Discard],
    resume: bool,
) -> Result<Schedule, Infeasible> {
    let mut scratch = Scratch {
        record: true,
        ..Scratch::default()
    };
    let mut w = walk(ctx, genome, plan, &mut scratch, resume)?;
    Ok(Schedule {
        steps: w.scratch.steps.clone(),
        live: w.live(),
    })
}

/// The position a walk of `plan` resumes from (`None`: the first op).
#[cfg(test)]
pub(crate) fn resumes_at(ctx: &Context<'_>, plan: &[Discard]) -> Option<u32> {
    resume_point(ctx, plan).map(|s| s.pos)
}

/// The last prefix state at or before `plan`'s first close (see the module docs).
fn resume_point<'c>(ctx: &'c Context<'_>, plan: &[Discard]) -> Option<&'c PrefixState> {
    let first_close = plan.iter().map(|d| d.close).min().unwrap_or(ctx.n as u32);
    ctx.prefixes
        .get_or_init(|| prefixes(ctx))
        .at_or_before(first_close)
}

/// The peak (persistent bytes included) and the recompute cost in units of `genome`'s
/// schedule: [`schedule`] without keeping the steps, in `scratch`'s buffers.
pub(crate) fn peak_and_units(
    ctx: &Context<'_>,
    genome: &Genome,
    plan: &[Discard],
    scratch: &mut Scratch,
) -> Result<(u64, u64), Infeasible> {
    let mut w = walk(ctx, genome, plan, scratch, true)?;
    let live = w.peak_live();
    Ok((ctx.persistent_bytes.saturating_add(live), w.units))
}

/// A walk's buffers, reused from one evaluation to the next (see
/// [`super::search::Evaluator`]): a walk touches O(n) memory, and fresh buffers every time
/// cost page faults and allocator traffic that grow with the graph (and that two workers
/// contend on).
#[derive(Default)]
pub(crate) struct Scratch {
    /// Per tensor: see [`Slot`].
    slot: Vec<Slot>,
    /// Per op: runs so far.
    runs: Vec<u8>,
    /// Whether `steps` is kept: an evaluation needs only their number (and writing and
    /// copying them is a good part of a walk's memory traffic on large graphs).
    record: bool,
    steps: Vec<(OpId, bool)>,
    /// The number of steps so far.
    n_steps: u32,
    /// Per step (and one past): bytes of instances starting minus bytes ending before it,
    /// in wrapping arithmetic: the running sums are the live bytes modulo 2^64, which are
    /// exact, since a step holds at most one instance of each storage and a valid graph's
    /// storages add up within 64 bits (`sgc_ir` refuses a graph whose storages do not). Half the
    /// bytes of `i128` deltas, which every resumed walk copies.
    delta: Vec<u64>,
    /// The recomputation stack: (op, index of the next input to check).
    stack: Vec<(OpId, usize)>,
    /// The plan's discards by opening and by closing position (counting sort, stable, so
    /// ties stay in root order): position `i`'s are `by_open[open_at[i]..open_at[i + 1]]`.
    open_at: Vec<u32>,
    by_open: Vec<u32>,
    close_at: Vec<u32>,
    by_close: Vec<u32>,
    /// Roots whose instance was opened at some point (graph inputs' from the start): the
    /// ones [`Walk::close_all`] may have to close.
    opened: Vec<u32>,
}

/// The finished walk of `plan` in `scratch`'s buffers, from a prefix state if `resume`.
fn walk<'c, 's>(
    ctx: &'c Context<'c>,
    genome: &'c Genome,
    plan: &[Discard],
    scratch: &'s mut Scratch,
    resume: bool,
) -> Result<Walk<'c, 's>, Infeasible> {
    let mut w = Walk::new(ctx, Blocks::new(genome.bounds(), ctx.n), scratch);
    w.forward_only = genome.rules.forward_only;
    w.run(plan, resume)?;
    Ok(w)
}

/// Fills `at` (n + 1 offsets) and `order` (indices into `plan`) so that position `i`'s
/// discards by `pos` are `order[at[i]..at[i + 1]]`, in plan (root) order.
fn bucket(
    n: usize,
    plan: &[Discard],
    pos: impl Fn(&Discard) -> u32,
    at: &mut Vec<u32>,
    order: &mut Vec<u32>,
) {
    at.clear();
    at.resize(n + 2, 0);
    for d in plan {
        at[pos(d) as usize + 2] += 1;
    }
    // A running sum in a register: `at[i] += at[i - 1]` waits on the store before it.
    let mut sum = 0;
    for x in &mut at[2..] {
        sum += *x;
        *x = sum;
    }
    order.clear();
    order.resize(plan.len(), 0);
    for (k, d) in plan.iter().enumerate() {
        let slot = &mut at[pos(d) as usize + 1];
        order[*slot as usize] = k as u32;
        *slot += 1;
    }
    at.truncate(n + 1);
}

/// Counts an instance `(start, last)` of `bytes` in the live-bytes deltas (nothing if it
/// was never used).
fn close(delta: &mut [u64], bytes: u64, (start, last): (u32, u32)) {
    if start != NEVER && last != NEVER {
        delta[start as usize] = delta[start as usize].wrapping_add(bytes);
        delta[last as usize + 1] = delta[last as usize + 1].wrapping_sub(bytes);
    }
}

/// The most prefix states kept per graph.
const PREFIX_STATES: usize = 32;
/// The most bytes the prefix states of one graph take.
const PREFIX_BYTES: usize = 64 << 20;

/// The empty plan's walk states before up to [`PREFIX_STATES`] evenly spaced positions
/// (fewer when they would take more than [`PREFIX_BYTES`]), up to the first position where
/// an op would read a missing input (see the module docs).
fn prefixes(ctx: &Context<'_>) -> Prefixes {
    let n = ctx.n;
    let per_state = ctx.walk_start.len() * (std::mem::size_of::<Slot>() + 4)
        + n * (1 + std::mem::size_of::<(OpId, bool)>() + std::mem::size_of::<u64>());
    let k = (PREFIX_BYTES / per_state.max(1)).min(PREFIX_STATES);
    let mut positions: Vec<usize> = (1..=k).map(|j| j * n / (k + 1)).collect();
    positions.retain(|&p| p > 0);
    positions.dedup();
    // The states keep their steps: a schedule resumed from one needs them.
    let mut scratch = Scratch {
        record: true,
        ..Scratch::default()
    };
    let mut w = Walk::new(ctx, Blocks::new(&[], n), &mut scratch);
    w.reset();
    w.prepare(&[]);
    let mut states = Vec::with_capacity(positions.len());
    let mut next = positions.into_iter().peekable();
    for i in 0..n {
        if next.next_if_eq(&i).is_some() {
            states.push(w.state(i));
        }
        // Past a missing input the walk would depend on the plan's blocks.
        if next.peek().is_none() || w.ctx.inputs(i).iter().any(|&t| !w.readable(t)) {
            break;
        }
        if w.position(i, &[]).is_err() || w.units != 0 {
            break;
        }
    }
    Prefixes { states }
}

/// The walk's state: the context, the blocks and the buffers it fills.
struct Walk<'c, 's> {
    ctx: &'c Context<'c>,
    blocks: Blocks<'c>,
    scratch: &'s mut Scratch,
    units: u64,
    /// Recompute forward ops only; storages made by other ops are read as they are.
    forward_only: bool,
    /// The traced position being walked (`n` after the last op): a recomputation here
    /// comes after every original op before it.
    pos: u32,
}

impl<'c, 's> Walk<'c, 's> {
    /// A walk over `scratch`'s buffers as they are: [`Walk::reset`] or [`Walk::resume`]
    /// sets them to a starting state.
    fn new(ctx: &'c Context<'c>, blocks: Blocks<'c>, scratch: &'s mut Scratch) -> Self {
        Walk {
            ctx,
            blocks,
            scratch,
            units: 0,
            forward_only: false,
            pos: 0,
        }
    }

    /// The state before the first op.
    fn reset(&mut self) {
        let (ctx, s) = (self.ctx, &mut *self.scratch);
        s.slot.clear();
        s.slot.extend_from_slice(&ctx.walk_start);
        s.runs.clear();
        s.runs.resize(ctx.n, 0);
        s.steps.clear();
        s.n_steps = 0;
        s.delta.clear();
        s.delta.push(0);
        s.stack.clear();
        s.opened.clear();
        s.opened
            .extend(ctx.input_roots.iter().map(|r| r.index() as u32));
        self.units = 0;
    }

    /// Sorts `plan`'s discards by opening and by closing position.
    fn prepare(&mut self, plan: &[Discard]) {
        let n = self.ctx.n;
        let s = &mut *self.scratch;
        bucket(n, plan, |d| d.open, &mut s.open_at, &mut s.by_open);
        bucket(n, plan, |d| d.close, &mut s.close_at, &mut s.by_close);
    }

    /// The walk over the traced order (see the module docs).
    fn run(&mut self, plan: &[Discard], resume: bool) -> Result<(), Infeasible> {
        let ctx = self.ctx;
        let n = ctx.n;
        self.prepare(plan);
        let state = resume.then(|| resume_point(ctx, plan)).flatten();
        let from = match state {
            Some(state) => self.resume(plan, state),
            None => {
                self.reset();
                0
            }
        };
        for i in from..n {
            self.position(i, plan)?;
        }
        self.pos = n as u32;
        for &t in ctx.g.outputs() {
            if !self.readable(t) {
                let bb = self.block_begin_of(t);
                self.ensure(t, bb)?;
            }
        }
        Ok(())
    }

    /// Walks traced position `i`: the gaps closing there, op `i` itself, the gaps it opens
    /// and the originals it reads last.
    fn position(&mut self, i: usize, plan: &[Discard]) -> Result<(), Infeasible> {
        self.pos = i as u32;
        let (a, b) = (self.scratch.close_at[i], self.scratch.close_at[i + 1]);
        for k in a..b {
            let d = &plan[self.scratch.by_close[k as usize] as usize];
            if self.take_pending(d.root) {
                self.ensure(d.root, d.block_begin)?;
            }
        }
        self.ensure_inputs(i)?;
        self.emit(OpId::new(i), false)?;
        let (a, b) = (self.scratch.open_at[i], self.scratch.open_at[i + 1]);
        for k in a..b {
            let d = &plan[self.scratch.by_open[k as usize] as usize];
            self.discard(d.root);
        }
        self.retire(i);
        Ok(())
    }

    /// Starts from a prefix `state` at or before the plan's first close (see the module
    /// docs): its buffers, and the marks of the discards opened before it. The first
    /// position to walk.
    fn resume(&mut self, plan: &[Discard], state: &PrefixState) -> usize {
        let s = &mut *self.scratch;
        s.slot.clone_from(&state.slot);
        s.runs.clone_from(&state.runs);
        if s.record {
            s.steps.clone_from(&state.steps);
        }
        s.n_steps = state.steps.len() as u32;
        s.delta.clone_from(&state.delta);
        s.opened.clone_from(&state.opened);
        s.stack.clear();
        self.units = 0;
        let p = state.pos as usize;
        for k in self.scratch.open_at[0]..self.scratch.open_at[p] {
            let d = &plan[self.scratch.by_open[k as usize] as usize];
            self.discard(d.root);
        }
        p
    }

    /// Makes every input of original op `i` readable. Recomputing one input's producer
    /// makes a new version of all its outputs, which leaves a view of a sibling output,
    /// already checked, stale: the inputs are checked again until none is missing (each
    /// pass runs at least one op, and no op runs a third time, so this ends).
    fn ensure_inputs(&mut self, i: usize) -> Result<(), Infeasible> {
        loop {
            let missing = self
                .ctx
                .inputs(i)
                .iter()
                .copied()
                .find(|&t| !self.readable(t));
            match missing {
                Some(t) => {
                    let bb = self.block_begin_of(t);
                    self.ensure(t, bb)?;
                }
                None => return Ok(()),
            }
        }
    }

    /// A copy of the buffers before position `pos`.
    fn state(&self, pos: usize) -> PrefixState {
        let s = &*self.scratch;
        PrefixState {
            pos: pos as u32,
            slot: s.slot.clone(),
            runs: s.runs.clone(),
            steps: s.steps.clone(),
            delta: s.delta.clone(),
            opened: s.opened.clone(),
        }
    }

    fn flag(&self, r: TensorId, f: u8) -> bool {
        self.scratch.slot[r.index()].flags & f != 0
    }

    fn slot(&self, t: TensorId) -> &Slot {
        &self.scratch.slot[t.index()]
    }

    /// Clears root `r`'s pending mark and says whether it was set.
    fn take_pending(&mut self, r: TensorId) -> bool {
        let s = &mut self.scratch.slot[r.index()];
        let was = s.flags & PENDING != 0;
        s.flags &= !PENDING;
        was
    }

    /// Closes instance `(start, last)` of root `r` (see [`close`]).
    fn close(&mut self, r: usize, instance: (u32, u32)) {
        close(&mut self.scratch.delta, self.ctx.bytes[r], instance);
    }

    /// Closes the instances still open at the end (graph outputs run to the end); the
    /// number of steps.
    fn close_all(&mut self) -> usize {
        let n = self.scratch.n_steps as usize;
        if n == 0 {
            return 0;
        }
        for k in 0..self.scratch.opened.len() {
            let r = self.scratch.opened[k] as usize;
            let (start, last) = self.scratch.slot[r].open;
            if start != NEVER {
                let last = if self.ctx.kept[r] { n as u32 - 1 } else { last };
                self.close(r, (start, last));
            }
        }
        n
    }

    /// The live bytes at every step.
    fn live(&mut self) -> Vec<u64> {
        let n = self.close_all();
        let mut acc = 0u64;
        self.scratch.delta[..n]
            .iter()
            .map(|d| {
                acc = acc.wrapping_add(*d);
                acc
            })
            .collect()
    }

    /// The most live bytes at any step ([`Walk::live`]'s maximum).
    fn peak_live(&mut self) -> u64 {
        let n = self.close_all();
        let (mut acc, mut max) = (0u64, 0u64);
        for d in &self.scratch.delta[..n] {
            acc = acc.wrapping_add(*d);
            max = max.max(acc);
        }
        max
    }

    fn root(&self, t: TensorId) -> TensorId {
        self.slot(t).root
    }

    /// Whether the tensor's current instance exists (a view: made from its base's
    /// current instance).
    fn current(&self, t: TensorId) -> bool {
        let slot = &self.scratch.slot;
        slot[t.index()].made == slot[self.root(t).index()].version
    }

    /// Whether an original op (or a recomputation inside the block) may read `t` now.
    fn readable(&self, t: TensorId) -> bool {
        let s = self.slot(t);
        match s.validity {
            Validity::Always => true,
            Validity::Produced => s.made != NEVER_MADE,
            Validity::Current => {
                let r = self.slot(s.root);
                s.made == r.version && r.flags & DISCARDED == 0
            }
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
        match self.slot(r).producer {
            NO_OP => false,
            p => {
                let bits = self.ctx.op_bits[p as usize];
                bits & OP_RERUNNABLE != 0
                    && p >= bb
                    && (!self.forward_only || bits & OP_FORWARD != 0)
            }
        }
    }

    /// First position of the block that made `t`'s storage.
    fn block_begin_of(&self, t: TensorId) -> u32 {
        let made_at = match self.slot(self.root(t)).producer {
            NO_OP => 0,
            p => p,
        };
        self.blocks.of(made_at).0
    }

    /// The op that makes `t`, if any.
    fn producer(&self, t: TensorId) -> Result<OpId, Infeasible> {
        match self.slot(t).producer {
            NO_OP => Err(Infeasible::NotRecomputable),
            p => Ok(OpId::new(p as usize)),
        }
    }

    /// Makes `t` readable: recomputes its producer after the missing inputs that a
    /// recomputation bounded to `bb` must make first.
    fn ensure(&mut self, t: TensorId, bb: u32) -> Result<(), Infeasible> {
        let p = self.producer(t)?;
        self.scratch.stack.clear();
        self.scratch.stack.push((p, 0));
        while let Some(&(op, k)) = self.scratch.stack.last() {
            let inputs = self.ctx.inputs(op.index());
            if let Some(&u) = inputs.get(k) {
                if self.needs(u, bb) {
                    let q = self.producer(u)?;
                    if self.scratch.stack.len() > self.ctx.n {
                        return Err(Infeasible::NoFixpoint);
                    }
                    self.scratch.stack.push((q, 0));
                } else if let Some(top) = self.scratch.stack.last_mut() {
                    top.1 += 1;
                }
                continue;
            }
            // An input recomputed after an earlier one was checked may have left that
            // one (a view of a sibling output) stale: check them again before running.
            if let Some(k) = inputs.iter().position(|&u| self.needs(u, bb)) {
                if let Some(top) = self.scratch.stack.last_mut() {
                    top.1 = k;
                }
                continue;
            }
            self.scratch.stack.pop();
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
        let bits = ctx.op_bits[i];
        if recompute {
            if bits & OP_RERUNNABLE == 0 {
                return Err(Infeasible::NotRecomputable);
            }
            if self.scratch.runs[i] >= 2 {
                return Err(Infeasible::ThirdRun);
            }
            // A non-recomputable op before this position may have written a persistent
            // input in place.
            if ctx.dirty_at[i] < self.pos {
                return Err(Infeasible::Dirty);
            }
            self.units += ctx.cost_units[i];
        }
        let sc = &mut *self.scratch;
        sc.runs[i] += 1;
        let s = sc.n_steps;
        sc.n_steps += 1;
        if sc.record {
            sc.steps.push((op, recompute));
        }
        sc.delta.push(0);
        // The roots of its non-persistent inputs (`Validity::Current`) are used now.
        for &r in ctx.read_roots(i) {
            sc.slot[r.index()].open.1 = s;
        }
        for &t in ctx.outputs(i) {
            let f = sc.slot[t.index()];
            let r = f.root;
            if r == t {
                let sl = &mut sc.slot[r.index()];
                sl.version += 1;
                sl.flags &= !(DISCARDED | PENDING | COPY);
                if recompute {
                    sl.flags |= COPY;
                }
            }
            let version = sc.slot[r.index()].version;
            sc.slot[t.index()].made = version;
            if f.validity == Validity::Current {
                if r == t {
                    let old = std::mem::replace(&mut sc.slot[r.index()].open, (s, s));
                    if old.0 == NEVER {
                        sc.opened.push(r.index() as u32);
                    }
                    close(&mut sc.delta, ctx.bytes[r.index()], old);
                } else {
                    sc.slot[r.index()].open.1 = s;
                }
            }
        }
        Ok(())
    }

    /// Retires the originals whose last traced access was position `i`: a recomputation
    /// in their block makes them again rather than keep them alive (older blocks still
    /// read them as they are).
    fn retire(&mut self, i: usize) {
        for &r in self.ctx.last_of(i) {
            let s = &mut self.scratch.slot[r.index()];
            if s.flags & COPY == 0 {
                s.flags |= DISCARDED;
            }
        }
    }

    /// Discards root `r`'s original after the access opening its gap.
    fn discard(&mut self, r: TensorId) {
        if self.current(r) && !self.flag(r, COPY | DISCARDED) {
            self.scratch.slot[r.index()].flags |= DISCARDED | PENDING;
        }
    }
}
