//! Facts about a graph that every strategy and every candidate evaluation reuses,
//! computed once per plan.
//!
//! - *Accesses* of a storage: the positions (in the traced order) of the ops that produce,
//!   view or read it. The gaps between consecutive accesses are where a storage may be
//!   freed and later recomputed ([`crate::sublinear::discard`] picks one per storage).
//! - *Rerunnable* ops: recomputable ops whose outputs' views can all be remade too (a
//!   recomputed root makes its old views stale).
//! - *Hazard* of an op: the first traced position of a non-recomputable op that reads a
//!   persistent tensor that a recomputation of this op (or of the recomputable ops it
//!   transitively needs) would read. A non-recomputable op may write persistent state in
//!   place (`sgd_update`), so a recomputation must happen at or before that position.
//! - *Freeable* storage: an activation root made by a rerunnable op and not a graph output:
//!   the planner may free it before its last use and recompute it.

use sgc_ir::{DeviceProfile, Graph, LowerBound, OpId, TensorId, TensorKind};

pub(crate) const NO_HAZARD: u32 = u32::MAX;

/// The per-graph facts a strategy plans from (what a strategy outside this crate sees: the
/// accessors below).
pub struct Context<'g> {
    pub(crate) g: &'g Graph,
    pub(crate) n: usize,
    pub(crate) cost: Vec<f64>,
    /// Per storage root (indexed by tensor id; empty for non-roots and persistent roots).
    pub(crate) accesses: Vec<Vec<u32>>,
    pub(crate) freeable: Vec<bool>,
    /// Roots of graph outputs (resident to the end).
    pub(crate) kept: Vec<bool>,
    /// Freeable roots, in id order.
    pub(crate) freeable_roots: Vec<TensorId>,
    /// Every op's inputs, outputs and input roots, flat (see [`Context::inputs`]), for
    /// the walks' hot loops: the graph's own op records and per-op lists are scattered.
    io: Vec<TensorId>,
    /// Per op: where its inputs start, where its outputs start, where its input roots
    /// start and where they end in `io`.
    io_at: Vec<IoAt>,
    /// Per tensor: its storage root.
    pub(crate) root: Vec<TensorId>,
    /// The state every split walk starts from ([`start_state`]).
    pub(crate) walk_start: Vec<Slot>,
    /// Walk states along the plan-independent prefix, made by the first walk that needs
    /// them ([`crate::sublinear::recompute`]).
    pub(crate) prefixes: std::sync::OnceLock<Prefixes>,
    /// Per op: whether it is a forward op (every op when the graph has no phases).
    pub(crate) forward: Vec<bool>,
    /// The freeable roots by the traced position of their last access (see
    /// [`Context::last_of`]), flat: position `i`'s are `last_roots[last_at[i]..last_at[i + 1]]`.
    last_roots: Vec<TensorId>,
    last_at: Vec<u32>,
    /// Per op: [`OP_RERUNNABLE`], [`OP_FORWARD`].
    pub(crate) op_bits: Vec<u8>,
    /// Per op: the first traced position of a non-recomputable op that reads one of its
    /// persistent inputs ([`NO_HAZARD`]: none). A recomputation of the op after that position
    /// could read state written in place.
    pub(crate) dirty_at: Vec<u32>,
    /// Freeable roots with the position of the op that makes them and of their last
    /// access, by the first (then id).
    pub(crate) freeable_by_made: Vec<(u32, u32, TensorId)>,
    /// The discard plan's tables ([`crate::sublinear::discard`]), one entry per `freeable_by_made`
    /// entry, flat: entry `j`'s accesses are `gap_acc[gap_at[j]..gap_at[j + 1]]`, and at the
    /// same offsets `gap_best[.. + i]` is the gap (index of its opening access) that a
    /// discard opening at access `i` or later takes: the longest gap worth discarding over
    /// (longer than the closing reader's activation inputs), the earliest on ties, or
    /// [`NO_GAP`]. These depend on the graph only, so a discard plan reads them instead of
    /// scanning every storage's accesses for every candidate.
    pub(crate) gap_acc: Vec<u32>,
    pub(crate) gap_best: Vec<u32>,
    pub(crate) gap_at: Vec<u32>,
    /// The indices `j` of the `freeable_by_made` entries that some genome may discard (a
    /// gap worth discarding over exists), in order: a discard plan skips the others (often
    /// a large share of the freeable storages).
    pub(crate) discardable: Vec<u32>,
    pub(crate) rerunnable: Vec<bool>,
    /// Per op.
    pub(crate) hazard: Vec<u32>,
    /// Per op: its distinct non-persistent output roots.
    pub(crate) out_roots: Vec<Vec<TensorId>>,
    /// Per op: its distinct non-persistent input roots.
    pub(crate) in_roots: Vec<Vec<TensorId>>,
    /// Per op: its distinct persistent input roots.
    pub(crate) persistent_in: Vec<Vec<TensorId>>,
    /// Per tensor: its size in bytes.
    pub(crate) bytes: Vec<u64>,
    /// Per tensor: how its validity is decided (see [`Validity`]).
    pub(crate) validity: Vec<Validity>,
    /// Per tensor: whether it is an activation (it must be produced before it is read).
    pub(crate) activation: Vec<bool>,
    /// Roots of graph inputs (resident from the start).
    pub(crate) input_roots: Vec<TensorId>,
    pub(crate) unplanned_peak: u64,
    pub(crate) persistent_bytes: u64,
    pub(crate) lower_bound: LowerBound,
    /// Per op: its cost in integer units (see [`cost_units`]), so that recompute costs add
    /// up exactly in any grouping and an incremental evaluation equals a full one.
    pub(crate) cost_units: Vec<u64>,
    /// Cost units of one step: every op once (at least 1).
    pub(crate) step_units: u64,
    /// The most recompute cost units a schedule may spend
    /// ([`MAX_RECOMPUTE_STEPS`] steps).
    pub(crate) max_recompute_units: u64,
    /// Per op: whether exactly one of its outputs is read by some op (a storage made by
    /// such an op is not discarded right after it is made: see [`crate::sublinear::discard`]).
    pub(crate) single_output: Vec<bool>,
}

impl<'g> Context<'g> {
    /// The graph.
    pub fn graph(&self) -> &'g Graph {
        self.g
    }

    /// The cost of one run of `op` (the plan's cost rule).
    pub fn op_cost(&self, op: OpId) -> f64 {
        self.cost[op.index()]
    }

    /// Whether `op` may run again: recomputable, with every view of its outputs remade too.
    pub fn rerunnable(&self, op: OpId) -> bool {
        self.rerunnable[op.index()]
    }

    /// Whether a schedule that keeps its graph outputs runs `op` once only: it may not run
    /// again (it draws random numbers or writes state), or every storage it outputs is a
    /// graph output, so a run after the first would remake only what is already kept. A
    /// strategy whose [`crate::strategies::Strategy::keeps_outputs`] is true runs no such op twice (the
    /// kept-outputs bound rests on it). The built-in ones hold to it by construction: the
    /// split search and static DTR remake only storages they freed, and a graph output never
    /// is one; the exchange refinement inserts no recomputation of such an op, and rotor's
    /// later runs of a stage skip them. The planner's fuzz check tests it on every plan.
    pub fn keeps_what_it_makes(&self, op: OpId) -> bool {
        let v = op.index();
        !self.rerunnable[v] || self.out_roots[v].iter().all(|r| self.kept[r.index()])
    }

    /// The peak of the traced order, every storage freed after its last use.
    pub fn unplanned_peak(&self) -> u64 {
        self.unplanned_peak
    }

    /// The context with the format's cost rule (no device profile).
    #[cfg(test)]
    pub fn new(g: &'g Graph) -> Self {
        Self::with_profile(g, None)
    }

    /// The context, ops costed by `Graph::op_cost_with` on `device`.
    pub fn with_profile(g: &'g Graph, device: Option<&DeviceProfile>) -> Self {
        let n = g.num_ops();
        let (in_roots, out_roots, persistent_in) = op_roots(g);
        let accesses = accesses(g, &in_roots, &out_roots);
        let rerunnable = rerunnable(g);
        let first_dirty = first_dirty(g, &persistent_in);
        let hazard = hazard(g, &rerunnable, &persistent_in, &first_dirty);
        let dirty_at = persistent_in
            .iter()
            .map(|ps| {
                ps.iter()
                    .map(|p| first_dirty[p.index()])
                    .min()
                    .unwrap_or(NO_HAZARD)
            })
            .collect();
        let kept = kept_roots(g);
        let freeable = freeable(g, &kept, &rerunnable);
        let freeable_roots: Vec<TensorId> =
            g.tensor_ids().filter(|t| freeable[t.index()]).collect();
        let freeable_by_made = by_made(&freeable_roots, &accesses);
        let activation_inputs: Vec<u32> = g.ops().iter().map(|o| activation_inputs(g, o)).collect();
        let (gap_acc, gap_best, gap_at) =
            gap_tables(&freeable_by_made, &accesses, &activation_inputs);
        let discardable = (0..freeable_by_made.len())
            .filter(|&j| {
                let a = gap_at[j] as usize;
                a < gap_at[j + 1] as usize && gap_best[a] != NO_GAP
            })
            .map(|j| j as u32)
            .collect();
        let (last_roots, last_at) = by_last(&freeable_by_made, n);
        let profile = g.memory_profile();
        let validity = g
            .tensor_ids()
            .map(|t| match (g.is_persistent(t), g.tensor(t).kind) {
                (true, TensorKind::Activation) => Validity::Produced,
                (true, _) => Validity::Always,
                (false, _) => Validity::Current,
            })
            .collect();
        let (io, io_at) = io_tables(g, &in_roots);
        let input_roots = g
            .tensor_ids()
            .filter(|&t| g.storage_root(t) == t && g.tensor(t).kind == TensorKind::Input)
            .collect();
        let cost: Vec<f64> = g.op_ids().map(|o| g.op_cost_with(o, device).0).collect();
        let cost_units = cost_units(&cost);
        let step_units: u64 = cost_units.iter().sum::<u64>().max(1);
        let mut ctx = Context {
            max_recompute_units: step_units.saturating_mul(MAX_RECOMPUTE_STEPS),
            step_units,
            cost_units,
            single_output: single_output(g),
            gap_acc,
            gap_best,
            gap_at,
            discardable,
            bytes: g.tensor_ids().map(|t| g.tensor(t).size).collect(),
            validity,
            activation: g
                .tensor_ids()
                .map(|t| g.tensor(t).kind == TensorKind::Activation)
                .collect(),
            input_roots,
            g,
            n,
            cost,
            accesses,
            freeable,
            kept,
            freeable_roots,
            freeable_by_made,
            last_roots,
            last_at,
            dirty_at,
            op_bits: Vec::new(),
            io,
            io_at,
            root: g.tensor_ids().map(|t| g.storage_root(t)).collect(),
            rerunnable,
            hazard,
            out_roots,
            in_roots,
            persistent_in,
            unplanned_peak: profile.peak,
            persistent_bytes: profile.persistent_bytes,
            lower_bound: g.lower_bound(),
            walk_start: Default::default(),
            prefixes: std::sync::OnceLock::new(),
            forward: Vec::new(),
        };
        ctx.derive();
        ctx
    }

    /// The tables derived from the others: the forward ops, the walk's starting state and
    /// the per-op bits.
    fn derive(&mut self) {
        let n = self.n;
        let fwd = self.forward_ops();
        self.forward = vec![false; n];
        for &i in &fwd {
            self.forward[i as usize] = true;
        }
        self.walk_start = start_state(self);
        self.op_bits = (0..n)
            .map(|i| {
                let mut bits = 0;
                if self.rerunnable[i] {
                    bits |= OP_RERUNNABLE;
                }
                if self.forward[i] {
                    bits |= OP_FORWARD;
                }
                bits
            })
            .collect();
    }

    /// The freeable roots whose last traced access is position `i`.
    pub fn last_of(&self, i: usize) -> &[TensorId] {
        &self.last_roots[self.last_at[i] as usize..self.last_at[i + 1] as usize]
    }

    /// The inputs of op `i`, as the graph lists them.
    pub fn inputs(&self, i: usize) -> &[TensorId] {
        let (a, b, _, _) = self.io_at[i];
        &self.io[a as usize..b as usize]
    }

    /// The outputs of op `i`.
    pub fn outputs(&self, i: usize) -> &[TensorId] {
        let (_, b, c, _) = self.io_at[i];
        &self.io[b as usize..c as usize]
    }

    /// The roots of op `i`'s inputs (`Context::in_roots`, flat).
    pub fn read_roots(&self, i: usize) -> &[TensorId] {
        let (_, _, c, d) = self.io_at[i];
        &self.io[c as usize..d as usize]
    }

    /// The last traced access of a root (none for persistent roots).
    pub fn last_access(&self, r: TensorId) -> Option<u32> {
        self.accesses[r.index()].last().copied()
    }

    /// The first traced access of `r` strictly after position `pos`.
    pub fn next_access(&self, r: TensorId, pos: usize) -> Option<u32> {
        let a = &self.accesses[r.index()];
        let i = a.partition_point(|&p| p as usize <= pos);
        a.get(i).copied()
    }

    /// The hazard of the op producing root `r`.
    pub fn root_hazard(&self, r: TensorId) -> u32 {
        self.g
            .producer(r)
            .map_or(NO_HAZARD, |p| self.hazard[p.index()])
    }

    pub fn size(&self, r: TensorId) -> u64 {
        self.bytes[r.index()]
    }

    /// Ops that may close a Chen segment: forward ops when the graph has phases, else all.
    pub fn forward_ops(&self) -> Vec<u32> {
        let fwd: Vec<u32> = (0..self.n)
            .filter(|&i| self.g.phase(OpId::new(i)) == Some(sgc_ir::Phase::Forward))
            .map(|i| i as u32)
            .collect();
        if fwd.is_empty() {
            (0..self.n as u32).collect()
        } else {
            fwd
        }
    }
}

/// Costs as integers: one step (every op once) is about 2^40 units, so a plan may recompute
/// millions of steps' worth before a `u64` overflows, and rounding changes a cost by at most
/// 2^-41 of a step.
fn cost_units(cost: &[f64]) -> Vec<u64> {
    let total: f64 = cost.iter().sum();
    if !(total.is_finite() && total > 0.0) {
        return vec![0; cost.len()];
    }
    let unit = total / (1u64 << 40) as f64;
    cost.iter().map(|&c| (c / unit).round() as u64).collect()
}

/// How the schedule walk decides whether a tensor can be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Validity {
    /// Persistent state that exists from the start.
    Always,
    /// A persistent activation: valid once produced.
    Produced,
    /// Valid while its root is resident at the version it was made from.
    Current,
}

type Roots = Vec<Vec<TensorId>>;

/// Where an op's inputs, outputs and input roots start in [`Context`]'s `io`, and where
/// its input roots end.
type IoAt = (u32, u32, u32, u32);

/// Per tensor: whether it is the storage root of a graph output (kept to the end).
fn kept_roots(g: &Graph) -> Vec<bool> {
    let mut kept = vec![false; g.num_tensors()];
    for &t in g.outputs() {
        kept[g.storage_root(t).index()] = true;
    }
    kept
}

/// Per tensor: whether it is an activation root, not kept, made by a rerunnable op: a
/// storage that may be freed and recomputed.
fn freeable(g: &Graph, kept: &[bool], rerunnable: &[bool]) -> Vec<bool> {
    g.tensor_ids()
        .map(|t| {
            g.storage_root(t) == t
                && g.tensor(t).kind == TensorKind::Activation
                && !kept[t.index()]
                && g.producer(t).is_some_and(|p| rerunnable[p.index()])
        })
        .collect()
}

/// The accessed freeable roots as (first access, last access, root), sorted.
fn by_made(roots: &[TensorId], accesses: &[Vec<u32>]) -> Vec<(u32, u32, TensorId)> {
    let mut out: Vec<(u32, u32, TensorId)> = roots
        .iter()
        .filter_map(|&r| {
            let a = &accesses[r.index()];
            Some((*a.first()?, *a.last()?, r))
        })
        .collect();
    out.sort_unstable();
    out
}

/// The roots of `by_made` by last access, and where each of the `n` positions' roots start
/// (position `i`'s are `roots[at[i]..at[i + 1]]`).
fn by_last(by_made: &[(u32, u32, TensorId)], n: usize) -> (Vec<TensorId>, Vec<u32>) {
    let mut by_last: Vec<(u32, TensorId)> = by_made.iter().map(|&(_, l, r)| (l, r)).collect();
    by_last.sort_unstable();
    let mut at = vec![0u32; n + 1];
    for &(l, _) in &by_last {
        at[l as usize + 1] += 1;
    }
    for i in 0..n {
        at[i + 1] += at[i];
    }
    (by_last.into_iter().map(|(_, r)| r).collect(), at)
}

/// Per op: whether exactly one of its outputs is read by some op.
fn single_output(g: &Graph) -> Vec<bool> {
    g.ops()
        .iter()
        .map(|o| {
            o.outputs
                .iter()
                .filter(|&&t| !g.consumers(t).is_empty())
                .count()
                == 1
        })
        .collect()
}

/// Every op's inputs, outputs and input roots in one list, and per op where its inputs
/// start, its outputs start, its input roots start and they end in it.
fn io_tables(g: &Graph, in_roots: &Roots) -> (Vec<TensorId>, Vec<IoAt>) {
    let io = g
        .ops()
        .iter()
        .zip(in_roots)
        .flat_map(|(o, r)| o.inputs.iter().chain(&o.outputs).chain(r).copied())
        .collect();
    let mut at = 0u32;
    let io_at = g
        .ops()
        .iter()
        .zip(in_roots)
        .map(|(o, r)| {
            let (i, m, k) = (
                o.inputs.len() as u32,
                o.outputs.len() as u32,
                r.len() as u32,
            );
            at += i + m + k;
            (at - i - m - k, at - m - k, at - k, at)
        })
        .collect();
    (io, io_at)
}

fn op_roots(g: &Graph) -> (Roots, Roots, Roots) {
    let distinct = |ts: &[TensorId], persistent: bool| {
        let mut v: Vec<TensorId> = ts
            .iter()
            .map(|&t| g.storage_root(t))
            .filter(|&r| g.is_persistent(r) == persistent)
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let mut ins = Vec::with_capacity(g.num_ops());
    let mut outs = Vec::with_capacity(g.num_ops());
    let mut pers = Vec::with_capacity(g.num_ops());
    for o in g.ops() {
        ins.push(distinct(&o.inputs, false));
        // Only root outputs own storage; a view output touches its base, counted as access.
        outs.push(distinct(&o.outputs, false));
        pers.push(distinct(&o.inputs, true));
    }
    (ins, outs, pers)
}

fn accesses(g: &Graph, ins: &Roots, outs: &Roots) -> Vec<Vec<u32>> {
    let mut acc = vec![Vec::new(); g.num_tensors()];
    for i in 0..g.num_ops() {
        for &r in ins[i].iter().chain(&outs[i]) {
            let a: &mut Vec<u32> = &mut acc[r.index()];
            if a.last() != Some(&(i as u32)) {
                a.push(i as u32);
            }
        }
    }
    acc
}

/// No gap is worth a discard (see [`Context::gap_best`]).
pub(crate) const NO_GAP: u32 = u32::MAX;

/// [`Context::gap_acc`], [`Context::gap_best`] and [`Context::gap_at`]; `activation_inputs`
/// per op: its distinct activation inputs (tensors, views counted on their own).
fn gap_tables(
    by_made: &[(u32, u32, TensorId)],
    accesses: &[Vec<u32>],
    activation_inputs: &[u32],
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut acc_flat = Vec::new();
    let mut best_flat = Vec::new();
    let mut at = Vec::with_capacity(by_made.len() + 1);
    at.push(0u32);
    for &(_, _, r) in by_made {
        let acc = &accesses[r.index()];
        let start = best_flat.len();
        best_flat.resize(start + acc.len(), NO_GAP);
        // Suffix maxima from the back: `>=` keeps the earliest of equally long gaps.
        let mut best: Option<(u32, usize)> = None;
        for i in (0..acc.len().saturating_sub(1)).rev() {
            let stride = acc[i + 1] - acc[i];
            let worth = stride > activation_inputs[acc[i + 1] as usize];
            if worth && best.is_none_or(|(b, _)| stride >= b) {
                best = Some((stride, i));
            }
            best_flat[start + i] = best.map_or(NO_GAP, |(_, k)| k as u32);
        }
        acc_flat.extend_from_slice(acc);
        at.push(acc_flat.len() as u32);
    }
    (acc_flat, best_flat, at)
}

/// Distinct activation tensors an op reads.
fn activation_inputs(g: &Graph, o: &sgc_ir::Op) -> u32 {
    let mut v: Vec<TensorId> = o
        .inputs
        .iter()
        .copied()
        .filter(|&t| g.tensor(t).kind == TensorKind::Activation)
        .collect();
    v.sort();
    v.dedup();
    v.len() as u32
}

/// Recomputable ops whose output roots have only views made by recomputable ops.
fn rerunnable(g: &Graph) -> Vec<bool> {
    let mut bad_root = vec![false; g.num_tensors()];
    for t in g.tensor_ids() {
        if g.tensor(t).alias_of.is_some() {
            let ok = g.producer(t).is_some_and(|p| g.op(p).recomputable);
            if !ok {
                bad_root[g.storage_root(t).index()] = true;
            }
        }
    }
    g.ops()
        .iter()
        .map(|o| {
            o.recomputable
                && o.outputs
                    .iter()
                    .all(|&t| g.tensor(t).alias_of.is_some() || !bad_root[t.index()])
        })
        .collect()
}

/// Per tensor: the first position of a non-recomputable op that reads it (persistent
/// roots only; `NO_HAZARD` for the others).
fn first_dirty(g: &Graph, persistent_in: &Roots) -> Vec<u32> {
    let mut first_dirty = vec![NO_HAZARD; g.num_tensors()];
    for (i, o) in g.ops().iter().enumerate().rev() {
        if !o.recomputable {
            for &p in &persistent_in[i] {
                first_dirty[p.index()] = i as u32;
            }
        }
    }
    first_dirty
}

fn hazard(g: &Graph, rerunnable: &[bool], persistent_in: &Roots, first_dirty: &[u32]) -> Vec<u32> {
    let mut h = vec![NO_HAZARD; g.num_ops()];
    for (i, o) in g.ops().iter().enumerate() {
        let mut v = persistent_in[i]
            .iter()
            .map(|p| first_dirty[p.index()])
            .min()
            .unwrap_or(NO_HAZARD);
        for &t in &o.inputs {
            if let Some(p) = g.producer(t).filter(|p| rerunnable[p.index()]) {
                v = v.min(h[p.index()]);
            }
        }
        h[i] = v;
    }
    h
}

/// [`Context::op_bits`]: the op may run again ([`Context::rerunnable`]).
pub(crate) const OP_RERUNNABLE: u8 = 1;
/// A forward op ([`Context::forward`]).
pub(crate) const OP_FORWARD: u8 = 2;

/// "No producer" in [`Slot::producer`].
pub(crate) const NO_OP: u32 = u32::MAX;

/// The most recomputation a schedule may do, in units of one training step (every op
/// once): by cost, and by number of recomputed steps.
pub(crate) const MAX_RECOMPUTE_STEPS: u64 = 32;

/// "Not yet" in a [`Slot`]: no open instance.
pub(crate) const NEVER: u32 = u32::MAX;

/// "Never made" in [`Slot::made`].
pub(crate) const NEVER_MADE: u8 = u8::MAX;

/// One tensor's walk state and the facts the walk reads with it, kept together so that a
/// step reads and writes one place in memory per tensor (20 bytes; eleven arrays before).
/// `version`, the flags and `open` are meaningful for roots only. The walk
/// ([`crate::sublinear::recompute`]) owns its meaning; the context caches its starting value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    /// Its storage root.
    pub root: TensorId,
    /// The op that makes it ([`NO_OP`]: none).
    pub producer: u32,
    /// Per root: its open instance's first step and last use (`NEVER`: none).
    pub open: (u32, u32),
    /// Per root: how many times it was produced (at most twice: an op runs at most twice
    /// in a split walk).
    pub version: u8,
    /// Its root's version when it was last made (`NEVER_MADE`: not yet).
    pub made: u8,
    /// Per root: `DISCARDED`, `PENDING`, `COPY`.
    pub flags: u8,
    /// How its validity is decided.
    pub validity: Validity,
}

/// Split walks' states before evenly spaced positions of the prefix that every plan walks
/// alike (see [`crate::sublinear::recompute`], which makes and reads them; the context
/// caches them as it caches [`start_state`]). By increasing position.
#[derive(Default)]
pub(crate) struct Prefixes {
    pub states: Vec<PrefixState>,
}

/// A walk's buffers before position `pos` (no recomputation has run).
pub(crate) struct PrefixState {
    pub pos: u32,
    pub slot: Vec<Slot>,
    pub runs: Vec<u8>,
    pub steps: Vec<(OpId, bool)>,
    pub delta: Vec<u64>,
    pub opened: Vec<u32>,
}

impl Prefixes {
    /// The last state at or before `pos`.
    pub fn at_or_before(&self, pos: u32) -> Option<&PrefixState> {
        let k = self.states.partition_point(|s| s.pos <= pos);
        k.checked_sub(1).map(|k| &self.states[k])
    }
}

/// The per-tensor state a split walk starts from: each tensor's version when made (graph
/// inputs and their views exist from the start; `NEVER_MADE` for the rest) and each root's
/// open instance (graph inputs are resident from step 0).
pub(crate) fn start_state(ctx: &Context<'_>) -> Vec<Slot> {
    let g = ctx.g;
    let mut slots: Vec<Slot> = g
        .tensor_ids()
        .map(|t| Slot {
            root: ctx.root[t.index()],
            producer: g.producer(t).map_or(NO_OP, |p| p.index() as u32),
            open: (NEVER, NEVER),
            version: 0,
            made: NEVER_MADE,
            flags: 0,
            validity: ctx.validity[t.index()],
        })
        .collect();
    for t in g.tensor_ids() {
        if ctx.validity[t.index()] == Validity::Current && !ctx.activation[t.index()] {
            slots[t.index()].made = 0;
        }
    }
    for &t in &ctx.input_roots {
        slots[t.index()].open = (0, 0);
    }
    slots
}

#[cfg(test)]
mod gap_tests {
    use super::*;

    /// The tables give, for every first gap a discard may take, the gap a scan of the
    /// accesses from there picks (the longest worth-discarding one, the earliest on ties).
    #[test]
    fn gap_tables_agree_with_a_scan() {
        let mut rng = sgc_ir::testgen::SplitMix64::new(11);
        let mut next = |m: u64| rng.below(m);
        let act: Vec<u32> = (0..400).map(|_| next(6) as u32).collect();
        let mut accesses = Vec::new();
        let mut by_made = Vec::new();
        for r in 0..300u32 {
            let k = 1 + next(8) as usize;
            let mut a: Vec<u32> = (0..k).map(|_| next(400) as u32).collect();
            a.sort_unstable();
            a.dedup();
            by_made.push((a[0], *a.last().unwrap(), TensorId(r)));
            accesses.push(a);
        }
        let (acc, best, at) = gap_tables(&by_made, &accesses, &act);
        for (j, &(_, _, r)) in by_made.iter().enumerate() {
            let a = &accesses[r.index()];
            let (lo, hi) = (at[j] as usize, at[j + 1] as usize);
            assert_eq!(&acc[lo..hi], &a[..]);
            for i0 in 0..a.len() {
                let mut want: Option<(u32, usize)> = None;
                for i in i0..a.len() - 1 {
                    let stride = a[i + 1] - a[i];
                    if stride > act[a[i + 1] as usize] && want.is_none_or(|(b, _)| stride > b) {
                        want = Some((stride, i));
                    }
                }
                let want = want.map_or(NO_GAP, |(_, i)| i as u32);
                assert_eq!(best[lo + i0], want, "root {r:?} from access {i0}: {a:?}");
            }
        }
    }
}
