//! The event-driven engine of run-time DTR: one step walks the traced order; each op pins
//! its operands, brings back (recomputes) any evicted input, allocates its outputs from
//! the [`Pool`] (evicting, and defragmenting as a last resort, when needed), runs on the
//! [`Target`] and frees what reached its last use. What a [`Target`] is (backend kernels
//! or a clock advanced by op costs) is the only difference between a run and a simulation.
//!
//! # States of a storage (per step)
//!
//! A non-persistent storage is *made* when its producer first runs. It is *alive* until
//! its last use in the traced order (graph outputs: until the step ends). An evictable
//! storage that is made holds a reference on each storage its producer reads, so that it
//! can be recomputed; a storage is *retained* while it is alive or referenced. Retained
//! and resident: it has a block. Retained and not resident: *evicted*, recomputed on
//! demand. Not retained: *released*, its block returned for good.
//!
//! At its last use a storage is released when nothing references it; otherwise an
//! evictable one is evicted on the spot (MegEngine's "drop" of a tensor the program
//! deleted), and any other (an input, a random op's output) stays resident until its last
//! referencing storage is released. Releasing a storage drops its references, which may
//! release its parents in turn.
//!
//! Before an op writes a storage in place (`sgd_update`, `copy_` into state), every
//! storage made by an earlier reader of it is *frozen*: brought back if evicted, never
//! evicted again, its references dropped; recomputing it later would read the new value.
//!
//! # Allocation
//!
//! With a threshold, before every op (a first run or a recomputation), its operands
//! pinned, candidates are evicted while the live bytes exceed it (MegEngine's check; the
//! op's outputs then come on top, so the live peak passes the threshold). An allocation
//! evicts one candidate at a time while no free block holds the request (MegEngine evicts
//! until the largest free block suffices); with none left and enough free bytes in all,
//! the pool is compacted, moving live storages; otherwise the op fails with
//! [`ExecError::OutOfMemory`] naming the op and the request.

use super::facts::Facts;
use super::policy::{Candidates, Scorer, View};
use super::pool::Pool;
use super::{fmt_bytes, DtrCounters, DtrOptions, Event, FreeKind, Target};
use crate::error::ExecError;
use sgc_ir::{OpId, TensorId};

/// Recomputations allowed in one step by default, per op of the graph; beyond it the run
/// is reported as thrashing rather than left to run for hours.
pub(crate) const THRASH_FACTOR: u64 = 64;

#[derive(Clone, Copy, Default)]
struct Slot {
    resident: bool,
    made: bool,
    alive: bool,
    holds_refs: bool,
    frozen: bool,
    /// An output of a recomputation that nothing retains: freed right after it.
    temp: bool,
    refs: u32,
    pins: u32,
    last_access: u64,
}

impl Slot {
    fn retained(&self) -> bool {
        self.made && (self.alive || self.refs > 0)
    }
}

/// The engine: see the [module docs](self).
pub(crate) struct Engine {
    pub facts: Facts,
    threshold: Option<u64>,
    min_size: u64,
    max_recomputes: u64,
    pub pool: Pool,
    slots: Vec<Slot>,
    /// Pool offset of each resident root (persistent ones included).
    pub offsets: Vec<u64>,
    cands: Candidates,
    scorer: Scorer,
    clock: u64,
    /// Ops being run: the original op, then the recomputations it started.
    stack: Vec<(OpId, bool)>,
    pub counters: DtrCounters,
    step_recomputes: u64,
    pub trace: Option<Vec<Event>>,
    names: Names,
}

/// Op and tensor names for error messages.
pub(crate) struct Names {
    pub ops: Vec<String>,
    pub tensors: Vec<String>,
}

struct EngineView<'a> {
    slots: &'a [Slot],
}

impl View for EngineView<'_> {
    fn pinned(&self, t: TensorId) -> bool {
        self.slots[t.index()].pins > 0
    }
    fn evicted(&self, t: TensorId) -> bool {
        let s = &self.slots[t.index()];
        s.retained() && !s.resident
    }
    fn last_access(&self, t: TensorId) -> u64 {
        self.slots[t.index()].last_access
    }
}

impl Engine {
    /// An engine with every persistent storage allocated (in graph order, from address 0).
    pub fn new(facts: Facts, names: Names, options: &DtrOptions) -> Result<Engine, ExecError> {
        let nt = facts.root.len();
        let mut e = Engine {
            threshold: options.eviction_threshold,
            min_size: options.evictee_min_size,
            max_recomputes: options
                .max_recomputes
                .unwrap_or(THRASH_FACTOR * facts.num_ops as u64),
            pool: Pool::new(options.memory, options.align),
            slots: vec![Slot::default(); nt],
            offsets: vec![0; nt],
            cands: Candidates::new(nt),
            scorer: Scorer::new(nt, options.sqrt_sampling, options.seed),
            clock: 0,
            stack: Vec::new(),
            counters: DtrCounters::default(),
            step_recomputes: 0,
            trace: options.trace.then(Vec::new),
            names,
            facts,
        };
        for i in 0..e.facts.persistent_roots.len() {
            let r = e.facts.persistent_roots[i];
            let bytes = e.facts.size[r.index()];
            match e.pool.alloc(bytes, r) {
                Some(off) => {
                    e.offsets[r.index()] = off;
                    e.slots[r.index()].resident = true;
                    e.event(Event::Alloc {
                        root: r,
                        offset: off,
                        bytes: e.pool.block_size(bytes),
                    });
                }
                None => {
                    return Err(ExecError::OutOfMemory {
                        op: "(before the first step)".into(),
                        recomputing: String::new(),
                        tensor: e.names.tensors[r.index()].clone(),
                        detail: format!(
                            "{} of persistent storage (params, state) does not fit the {} pool",
                            fmt_bytes(
                                e.facts
                                    .persistent_roots
                                    .iter()
                                    .map(|t| e.facts.size[t.index()])
                                    .sum()
                            ),
                            fmt_bytes(e.pool.size())
                        ),
                    })
                }
            }
        }
        Ok(e)
    }

    fn event(&mut self, ev: Event) {
        if let Some(t) = &mut self.trace {
            t.push(ev);
        }
    }

    /// Whether `root` has a block now.
    pub fn resident(&self, root: TensorId) -> bool {
        self.slots[root.index()].resident
    }

    /// One training step: inputs allocated and written, every op in the traced order.
    pub fn step(&mut self, target: &mut impl Target) -> Result<(), ExecError> {
        self.begin_step(target)?;
        for i in 0..self.facts.num_ops {
            self.run_op(OpId::new(i), target)?;
        }
        self.counters.steps += 1;
        Ok(())
    }

    /// Releases what the last step left (its outputs), then allocates and writes the inputs.
    fn begin_step(&mut self, target: &mut impl Target) -> Result<(), ExecError> {
        self.event(Event::StepStart);
        self.step_recomputes = 0;
        for i in 0..self.slots.len() {
            let r = TensorId::new(i);
            if self.facts.persistent[i] || self.facts.root[i] != r {
                continue;
            }
            if self.slots[i].resident {
                self.free_block(r, FreeKind::Release);
            }
            self.slots[i] = Slot::default();
        }
        for k in 0..self.facts.input_roots.len() {
            let r = self.facts.input_roots[k];
            self.place(r, target)?;
            let s = &mut self.slots[r.index()];
            s.made = true;
            s.alive = true;
            s.last_access = self.clock;
            target.write_input(r, self.offsets[r.index()])?;
        }
        Ok(())
    }

    /// Runs op `op` of the traced order (its first run this step).
    fn run_op(&mut self, op: OpId, target: &mut impl Target) -> Result<(), ExecError> {
        let i = op.index();
        if !self.facts.no_op[i] {
            for k in 0..self.facts.mutates[i].len() {
                let m = self.facts.mutates[i][k];
                self.freeze_readers(m, op, target)?;
            }
            let (ins, outs) = self.enter(op, false, target)?;
            for &r in &outs {
                self.place(r, target)?;
            }
            self.launch(op, false, &ins, &outs, target)?;
            for &r in &outs {
                self.make(r, i);
            }
            self.leave(op, &ins, &outs);
        }
        for k in 0..self.facts.deaths[i].len() {
            let r = self.facts.deaths[i][k];
            self.die(r);
        }
        Ok(())
    }

    /// Starts on `op` (a first run or a recomputation): its operand roots pinned,
    /// candidates evicted over the threshold, its evicted inputs brought back. Returns its
    /// input and output roots.
    fn enter(
        &mut self,
        op: OpId,
        recompute: bool,
        target: &mut impl Target,
    ) -> Result<(Vec<TensorId>, Vec<TensorId>), ExecError> {
        self.stack.push((op, recompute));
        self.event(Event::Enter { op, recompute });
        let ins = self.facts.in_roots[op.index()].clone();
        let outs = self.facts.out_roots[op.index()].clone();
        self.pin(&ins);
        self.pin(&outs);
        self.evict_over_threshold();
        for &r in &ins {
            if !self.slots[r.index()].resident {
                self.materialise(r, target)?;
            }
        }
        Ok((ins, outs))
    }

    /// Runs `op`'s kernel (its operands resident), counts it and unpins its operands.
    fn launch(
        &mut self,
        op: OpId,
        recompute: bool,
        ins: &[TensorId],
        outs: &[TensorId],
        target: &mut impl Target,
    ) -> Result<(), ExecError> {
        self.event(Event::Launch { op, recompute });
        let d = target.launch(op, &self.offsets)?;
        let cost = self.facts.cost[op.index()];
        let c = &mut self.counters;
        if recompute {
            c.recomputes += 1;
            c.recompute += d;
            c.recompute_cost += cost;
        } else {
            c.launches += 1;
            c.compute += d;
            c.compute_cost += cost;
        }
        self.touch(ins);
        self.touch(outs);
        self.clock += 1;
        self.unpin(ins);
        self.unpin(outs);
        Ok(())
    }

    /// Done with `op`: its operands' candidacy by their state now.
    fn leave(&mut self, op: OpId, ins: &[TensorId], outs: &[TensorId]) {
        for &r in ins.iter().chain(outs) {
            self.refresh_candidate(r);
        }
        self.event(Event::Exit { op });
        self.stack.pop();
    }

    /// `r` was just made by its producer (first run, op `i`).
    fn make(&mut self, r: TensorId, i: usize) {
        let holds = self.facts.evictable[r.index()];
        let s = &mut self.slots[r.index()];
        s.made = true;
        s.alive = self.facts.last_use[r.index()] > i;
        s.holds_refs = holds;
        if holds {
            if let Some(p) = self.facts.producer[r.index()] {
                for k in 0..self.facts.in_roots[p.index()].len() {
                    let x = self.facts.in_roots[p.index()][k];
                    self.slots[x.index()].refs += 1;
                }
            }
        }
    }

    /// Brings back evicted `r` by running its producer again (recursively for evicted
    /// inputs of the producer), its inputs and outputs pinned meanwhile.
    fn materialise(&mut self, r: TensorId, target: &mut impl Target) -> Result<(), ExecError> {
        let s = self.slots[r.index()];
        let p = match self.facts.producer[r.index()] {
            Some(p) if s.retained() && self.facts.evictable[r.index()] => p,
            _ => {
                return Err(ExecError::Layout(format!(
                    "run-time DTR: `{}` is needed but is neither resident nor recomputable",
                    self.names.tensors[r.index()]
                )))
            }
        };
        self.step_recomputes += 1;
        let limit = self.max_recomputes;
        if self.step_recomputes > limit {
            return Err(ExecError::Thrashing {
                op: self.current_op_name(),
                recomputes: self.step_recomputes,
                limit,
            });
        }
        let (ins, outs) = self.enter(p, true, target)?;
        for &o in &outs {
            if !self.slots[o.index()].resident {
                self.place(o, target)?;
                let so = &mut self.slots[o.index()];
                so.temp = !so.retained();
            }
        }
        self.launch(p, true, &ins, &outs, target)?;
        for &o in &outs {
            if self.slots[o.index()].temp {
                self.slots[o.index()].temp = false;
                self.free_block(o, FreeKind::Temporary);
            }
        }
        self.leave(p, &ins, &outs);
        Ok(())
    }

    /// Gives `r` a block: evicts while over the threshold, then until a free block holds
    /// the request, then compacts; an error naming the op when nothing helps.
    fn place(&mut self, r: TensorId, target: &mut impl Target) -> Result<(), ExecError> {
        let bytes = self.facts.size[r.index()];
        let need = self.pool.block_size(bytes);
        let mut missed = false;
        loop {
            if let Some(off) = self.pool.alloc(bytes, r) {
                self.offsets[r.index()] = off;
                self.slots[r.index()].resident = true;
                self.event(Event::Alloc {
                    root: r,
                    offset: off,
                    bytes: need,
                });
                return Ok(());
            }
            if !missed {
                missed = true;
                self.counters.unserved_requests += 1;
            }
            if self.evict_one() {
                continue;
            }
            if self.pool.free_bytes() >= need {
                self.compact(target)?;
                continue;
            }
            return Err(self.out_of_memory(r, need));
        }
    }

    fn out_of_memory(&self, r: TensorId, need: u64) -> ExecError {
        let live = self.pool.stats().live_bytes;
        let pinned: u64 = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pins > 0 && s.resident)
            .map(|(t, _)| self.pool.block_size(self.facts.size[t]))
            .sum();
        let recomputing = self
            .stack
            .iter()
            .rev()
            .find(|s| s.1)
            .map(|s| format!(" (recomputing `{}` for it)", self.names.ops[s.0.index()]))
            .unwrap_or_default();
        ExecError::OutOfMemory {
            op: self.current_op_name(),
            recomputing,
            tensor: self.names.tensors[r.index()].clone(),
            detail: format!(
                "needs {}; the {} pool has {} live ({} of it pinned by the running ops, the rest not evictable), {} free in all, the largest free block {}",
                fmt_bytes(need),
                fmt_bytes(self.pool.size()),
                fmt_bytes(live),
                fmt_bytes(pinned),
                fmt_bytes(self.pool.free_bytes()),
                fmt_bytes(self.pool.largest_free())
            ),
        }
    }

    fn current_op_name(&self) -> String {
        self.stack.first().map_or_else(
            || "(step start)".to_string(),
            |s| self.names.ops[s.0.index()].clone(),
        )
    }

    /// MegEngine's check before every op (first run or recomputation), its operands
    /// pinned: evict while the live bytes exceed the threshold.
    fn evict_over_threshold(&mut self) {
        if let Some(limit) = self.threshold {
            while self.pool.stats().live_bytes > limit && self.evict_one() {}
        }
    }

    /// Evicts the best candidate; `false` when none is unpinned.
    fn evict_one(&mut self) -> bool {
        let view = EngineView { slots: &self.slots };
        let Some(v) = self
            .scorer
            .victim(&self.cands, &self.facts, &view, self.clock)
        else {
            return false;
        };
        self.counters.evictions += 1;
        self.counters.evicted_bytes += self.facts.size[v.index()];
        self.free_block(v, FreeKind::Evict);
        true
    }

    /// Slides every live block down, copying each moved storage on the target.
    fn compact(&mut self, target: &mut impl Target) -> Result<(), ExecError> {
        let moves = self.pool.compact();
        self.counters.defrags += 1;
        for m in moves {
            self.offsets[m.owner.index()] = m.to;
            self.counters.moved_bytes += m.bytes;
            self.counters.defrag += target.copy(m.from, m.to, m.bytes)?;
            self.event(Event::Move {
                root: m.owner,
                from: m.from,
                to: m.to,
                bytes: m.bytes,
            });
        }
        Ok(())
    }

    /// Returns `r`'s block to the pool.
    fn free_block(&mut self, r: TensorId, why: FreeKind) {
        let off = self.offsets[r.index()];
        self.pool.free(off);
        self.slots[r.index()].resident = false;
        self.cands.remove(r);
        self.event(Event::Free {
            root: r,
            offset: off,
            why,
        });
    }

    /// `r` reached its last use.
    fn die(&mut self, r: TensorId) {
        let s = &mut self.slots[r.index()];
        if !s.made {
            return;
        }
        s.alive = false;
        if s.refs == 0 {
            self.release(r);
        } else if s.holds_refs && s.resident {
            self.counters.drops += 1;
            self.free_block(r, FreeKind::Drop);
        }
    }

    /// Releases `r` for good, and every parent left unreferenced and dead by it.
    fn release(&mut self, r: TensorId) {
        let mut work = vec![r];
        while let Some(x) = work.pop() {
            if self.slots[x.index()].resident {
                self.free_block(x, FreeKind::Release);
            }
            for p in self.drop_refs(x) {
                let sp = &self.slots[p.index()];
                if sp.made && !sp.alive && sp.refs == 0 {
                    work.push(p);
                }
            }
        }
    }

    /// Drops the references `x` holds; returns the parents it referenced.
    fn drop_refs(&mut self, x: TensorId) -> Vec<TensorId> {
        if !std::mem::take(&mut self.slots[x.index()].holds_refs) {
            return Vec::new();
        }
        let Some(p) = self.facts.producer[x.index()] else {
            return Vec::new();
        };
        let parents = self.facts.in_roots[p.index()].clone();
        for &y in &parents {
            self.slots[y.index()].refs -= 1;
        }
        parents
    }

    /// Before op `q` writes `m` in place: every storage made by an earlier reader of `m`
    /// is brought back if evicted and frozen (see the [module docs](self)).
    fn freeze_readers(
        &mut self,
        m: TensorId,
        q: OpId,
        target: &mut impl Target,
    ) -> Result<(), ExecError> {
        let readers: Vec<OpId> = self.facts.readers[m.index()]
            .iter()
            .copied()
            .filter(|&p| p < q)
            .collect();
        for p in readers {
            for k in 0..self.facts.out_roots[p.index()].len() {
                let o = self.facts.out_roots[p.index()][k];
                let s = self.slots[o.index()];
                if !s.retained() || s.frozen || !self.facts.evictable[o.index()] {
                    continue;
                }
                if !s.resident {
                    self.stack.push((q, false));
                    let done = self.materialise(o, target);
                    self.stack.pop();
                    done?;
                }
                self.slots[o.index()].frozen = true;
                self.cands.remove(o);
                for y in self.drop_refs(o) {
                    let sy = &self.slots[y.index()];
                    if sy.made && !sy.alive && sy.refs == 0 {
                        self.release(y);
                    }
                }
                let so = self.slots[o.index()];
                if !so.alive && so.refs == 0 {
                    self.release(o);
                }
            }
        }
        Ok(())
    }

    fn pin(&mut self, roots: &[TensorId]) {
        for r in roots {
            self.slots[r.index()].pins += 1;
        }
    }

    fn unpin(&mut self, roots: &[TensorId]) {
        for r in roots {
            self.slots[r.index()].pins -= 1;
        }
    }

    fn touch(&mut self, roots: &[TensorId]) {
        for r in roots {
            self.slots[r.index()].last_access = self.clock;
        }
    }

    /// Adds `r` to the candidates or takes it out, by its state now.
    fn refresh_candidate(&mut self, r: TensorId) {
        let s = &self.slots[r.index()];
        let ok = s.resident
            && s.retained()
            && s.holds_refs
            && !s.frozen
            && !s.temp
            && self.facts.evictable[r.index()]
            && self.facts.size[r.index()] >= self.min_size;
        if ok {
            self.cands.insert(r);
        } else {
            self.cands.remove(r);
        }
    }

    /// Storages resident now that are neither persistent nor graph outputs (after a step:
    /// none, unless the engine leaks).
    pub fn leftovers(&self) -> Vec<TensorId> {
        (0..self.slots.len())
            .map(TensorId::new)
            .filter(|&t| {
                self.slots[t.index()].resident
                    && !self.facts.persistent[t.index()]
                    && !self.facts.output[t.index()]
            })
            .collect()
    }
}
