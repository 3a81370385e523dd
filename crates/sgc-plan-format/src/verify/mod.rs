//! The plan verifier: replays a plan against the graph alone, in the spirit of
//! regalloc2's checker, and reports every violation.
//!
//! It trusts none of the planner's internals (nor the IR's simulator): it keeps its own
//! resident set of storages (keyed by `Graph::storage_root`), applies the plan's explicit
//! frees, and checks at every step that
//! - the step names an op of the graph; original runs keep the traced order, each op runs
//!   originally exactly once and before any recomputed copy of it, and only recomputable
//!   ops run again;
//! - every input is resident and current: produced, not freed since (a recomputed copy read
//!   before it exists is a read after free), and for a view not older than its base's
//!   latest recomputation;
//! - a view's base is resident when the view is made; frees name resident, non-persistent
//!   storage;
//! - a recomputed copy does not read persistent state that a non-recomputable op (which may
//!   write it in place, like `sgd_update`) has already touched;
//!
//! and at the end that every graph output is resident and current, that the claimed peak
//! equals the replayed one, and that the claimed lifetimes are the replayed ones.
//!
//! Offloaded storages ([`sgc_ir::Offload`]) are replayed with their own rules (`offload`):
//! no touch while a storage is away or its copy back may run, no write while its copy to
//! host runs, the copy's source resident until the offload's free, the reader reading it,
//! and the host pool's offsets, peak and limit.
//!
//! Plans of the split-based strategies (`sublinear`, `chen-sqrt`) and of `partition`
//! promise more, and the verifier holds them to it: no op runs more than twice (one
//! recomputation at most), and
//! a `chen-sqrt` plan recomputes at most one forward pass (by the plan's own cost model).
//!
//! When the plan has an arena, it also checks that every lifetime has an offset, that
//! offsets are multiples of the alignment, that every tensor (padded) lies inside the
//! arena, and that no two lifetimes alive at the same step share an address, except an
//! in-place pair at the very same offset: the step's op declares it (`inplace`), the input
//! lifetime ends at the step where the output's starts, and the graph-level rule of
//! [`Graph::in_place_allowed`] (the IR's rule) holds.
//! Persistent storage (param, state, const) is always resident; inputs are resident from
//! step 0 until freed.

use crate::plan::ArenaLayout;
use crate::plan::{GraphRef, Lifetime, Plan};
pub use crate::violation::{Violation, ViolationKind};
use serde::Serialize;
use sgc_ir::{Graph, OpId, TensorId, TensorKind};

mod offload;

/// The replayed peak of an accepted plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VerifiedPeak {
    /// Persistent bytes plus the most bytes resident during a step.
    pub peak_bytes: u64,
    /// The first step reaching it.
    pub peak_step: Option<usize>,
}

/// Why [`check`] refuses a plan.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The replay found violations (all of them, in step order).
    #[error("the plan does not verify: {} violation(s), the first: {}; `sgc plan --check` lists them all: plan again with `sgc plan`", .0.len(), .0.first().map_or(String::new(), ToString::to_string))]
    Violations(Vec<Violation>),
    /// The plan verifies, but the device bytes it needs (arena plus persistent bytes, or
    /// its peak when it has no arena) are above the budget its options state.
    #[error("the plan needs {device} B of device memory ({what}), above its budget of {budget} B: plan again with `sgc plan --budget`")]
    OverBudget {
        device: u64,
        what: &'static str,
        budget: u64,
    },
    /// The plan verifies, but its summary's figures are not what its steps give.
    #[error("the plan's summary does not match its replay under its own options: {0}; the file was edited or made by another version: plan again with `sgc plan`")]
    Summary(String),
}

/// Everything a plan file promises, checked before anyone relies on it: the replay of its
/// steps ([`verify`]), its device bytes within the budget its options state, and every figure of
/// its summary recomputed from the graph and the plan's own options (a field the plan
/// format does not have is refused when the file is read). `sgc plan --check` and the executor both call it.
pub fn check(graph: &Graph, plan: &Plan) -> Result<VerifiedPeak, CheckError> {
    let peak = verify(graph, plan).map_err(CheckError::Violations)?;
    let (device, what) = match &plan.arena {
        Some(a) => (
            a.size.saturating_add(graph.persistent_bytes()),
            "arena + persistent",
        ),
        None => (peak.peak_bytes, "peak; the plan has no arena"),
    };
    let (device, what) = match plan.options.budget_of {
        crate::options::BudgetOf::Device => (device, what),
        crate::options::BudgetOf::Peak => {
            (peak.peak_bytes, "memory-model peak; budget of the peak")
        }
        crate::options::BudgetOf::Saved => {
            let steps: Vec<(sgc_ir::OpId, bool)> =
                plan.steps.iter().map(|s| (s.op, s.recompute)).collect();
            let saved = crate::plan::saved_bytes(graph, &steps);
            (
                saved,
                "bytes kept for the backward; budget of the saved bytes",
            )
        }
    };
    if let Some(budget) = plan.options.budget.filter(|&b| device > b) {
        return Err(CheckError::OverBudget {
            device,
            what,
            budget,
        });
    }
    let replayed = plan
        .summary_for(graph)
        .map_err(|e| CheckError::Summary(format!("its schedule does not replay: {e}")))?;
    if replayed == plan.summary {
        return Ok(peak);
    }
    let as_map = |s: &crate::plan::Summary| match serde_json::to_value(s) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let (stored, fresh) = (as_map(&plan.summary), as_map(&replayed));
    let differ: Vec<String> = stored
        .iter()
        .filter(|(k, v)| fresh.get(*k) != Some(*v))
        .map(|(k, v)| {
            format!(
                "{k} {v} (replayed: {})",
                fresh.get(k).unwrap_or(&serde_json::Value::Null)
            )
        })
        .collect();
    Err(CheckError::Summary(differ.join(", ")))
}

/// Replays `plan` against `graph`; the replayed peak, or every violation found.
pub fn verify(graph: &Graph, plan: &Plan) -> Result<VerifiedPeak, Vec<Violation>> {
    let found = GraphRef::of(graph);
    if found.fingerprint != plan.graph.fingerprint || found.ops != plan.graph.ops {
        return Err(vec![Violation {
            step: None,
            op: None,
            tensor: None,
            kind: ViolationKind::GraphMismatch {
                expected: plan.graph.to_string(),
                found: found.to_string(),
            },
        }]);
    }
    let mut r = Replay::new(graph);
    r.device = plan.options.device_profile.clone();
    r.index_offloads(plan);
    for (s, step) in plan.steps.iter().enumerate() {
        r.step(s, step);
    }
    r.finish(plan)
}

struct Replay<'g> {
    g: &'g Graph,
    /// Per root: the step its current instance started, if resident.
    live: Vec<Option<usize>>,
    freed_at: Vec<Option<usize>>,
    root_version: Vec<u32>,
    /// Per tensor: its root's version when it was produced.
    made: Vec<Option<u32>>,
    /// Per persistent root: the non-recomputable op that read it first.
    writer: Vec<Option<OpId>>,
    original_runs: Vec<u32>,
    /// Per op: runs of any kind.
    runs: Vec<u32>,
    /// Cost of the recomputed steps, by the plan's own cost model.
    recompute_cost: f64,
    device: Option<sgc_ir::DeviceProfile>,
    last_original: Option<OpId>,
    bytes: u64,
    persistent: u64,
    peak: (u64, Option<usize>),
    lifetimes: Vec<Lifetime>,
    offloads: offload::Offloads,
    violations: Vec<Violation>,
}

impl<'g> Replay<'g> {
    fn new(g: &'g Graph) -> Self {
        let nt = g.num_tensors();
        let mut r = Replay {
            g,
            live: vec![None; nt],
            freed_at: vec![None; nt],
            root_version: vec![0; nt],
            made: vec![None; nt],
            writer: vec![None; nt],
            original_runs: vec![0; g.num_ops()],
            runs: vec![0; g.num_ops()],
            recompute_cost: 0.0,
            device: None,
            last_original: None,
            bytes: 0,
            persistent: 0,
            peak: (0, None),
            lifetimes: Vec::new(),
            offloads: Default::default(),
            violations: Vec::new(),
        };
        for t in g.tensor_ids() {
            let tensor = g.tensor(t);
            let is_root = tensor.alias_of.is_none();
            if tensor.kind.is_persistent() || tensor.kind == TensorKind::Input {
                r.made[t.index()] = Some(0);
            }
            if is_root && tensor.kind.is_persistent() {
                r.persistent += tensor.size;
            } else if is_root && tensor.kind == TensorKind::Input {
                r.live[t.index()] = Some(0);
                r.bytes += tensor.size;
            }
        }
        r
    }

    fn violation(
        &mut self,
        step: Option<usize>,
        op: Option<OpId>,
        t: Option<TensorId>,
        kind: ViolationKind,
    ) {
        self.violations.push(Violation {
            step,
            op: op.map(|o| self.g.op(o).name.clone()),
            tensor: t.map(|t| self.g.tensor(t).name.clone()),
            kind,
        });
    }

    fn step(&mut self, s: usize, step: &crate::plan::Step) {
        let g = self.g;
        self.open_fetched(s);
        if step.op.index() >= g.num_ops() {
            self.violation(Some(s), None, None, ViolationKind::UnknownOp);
            return;
        }
        let op = step.op;
        self.check_run(s, op, step.recompute);
        self.runs[op.index()] += 1;
        if step.recompute {
            self.recompute_cost += g.op_cost_with(op, self.device.as_ref()).0;
        }
        for &t in &g.op(op).inputs {
            if !self.offload_touch(s, op, t, false) {
                self.check_read(s, op, t, step.recompute);
            }
        }
        self.check_fetch_readers(s, op);
        for &t in &g.op(op).outputs {
            self.offload_touch(s, op, t, true);
            self.produce(s, op, t);
        }
        let total = self.persistent + self.bytes;
        if self.peak.1.is_none() || total > self.peak.0 {
            self.peak = (total, Some(s));
        }
        if !step.recompute && !g.op(op).recomputable {
            for &t in &g.op(op).inputs {
                let root = g.storage_root(t);
                if g.is_persistent(root) && self.writer[root.index()].is_none() {
                    self.writer[root.index()] = Some(op);
                }
            }
        }
        self.check_copy_sources(s, op);
        for &t in &step.free {
            self.free(s, op, t);
        }
        self.check_offload_frees(s, op);
    }

    fn check_run(&mut self, s: usize, op: OpId, recompute: bool) {
        use ViolationKind as K;
        let runs = self.original_runs[op.index()];
        if recompute {
            if runs == 0 {
                self.violation(Some(s), Some(op), None, K::RecomputeBeforeOriginal);
            }
            if !self.g.op(op).recomputable {
                self.violation(Some(s), Some(op), None, K::NonRecomputableRerun);
            }
            return;
        }
        if runs > 0 {
            let kind = if self.g.op(op).recomputable {
                K::OriginalTwice
            } else {
                K::NonRecomputableRerun
            };
            self.violation(Some(s), Some(op), None, kind);
        }
        if let Some(prev) = self.last_original.filter(|&p| p >= op) {
            let previous = self.g.op(prev).name.clone();
            self.violation(Some(s), Some(op), None, K::OriginalOutOfOrder { previous });
        }
        self.original_runs[op.index()] += 1;
        self.last_original = Some(op);
    }

    fn check_read(&mut self, s: usize, op: OpId, t: TensorId, recompute: bool) {
        use ViolationKind as K;
        let g = self.g;
        let root = g.storage_root(t);
        if g.is_persistent(root) {
            if recompute {
                if let Some(w) = self.writer[root.index()] {
                    let writer = g.op(w).name.clone();
                    self.violation(Some(s), Some(op), Some(t), K::DirtyPersistent { writer });
                }
            }
            if self.made[t.index()].is_none() {
                self.violation(Some(s), Some(op), Some(t), K::NeverProduced);
            }
            return;
        }
        let kind = match (self.made[t.index()], self.live[root.index()]) {
            (None, _) => Some(K::NeverProduced),
            (Some(_), None) => Some(match self.freed_at[root.index()] {
                Some(freed_at) => K::UseAfterFree { freed_at },
                None => K::NeverProduced,
            }),
            (Some(v), Some(_)) if v != self.root_version[root.index()] => Some(K::StaleView),
            _ => None,
        };
        if let Some(kind) = kind {
            self.violation(Some(s), Some(op), Some(t), kind);
        }
    }

    fn produce(&mut self, s: usize, op: OpId, t: TensorId) {
        let g = self.g;
        let root = g.storage_root(t);
        if root == t {
            self.root_version[t.index()] += 1;
            if self.live[t.index()].is_none() && !g.is_persistent(t) {
                self.live[t.index()] = Some(s);
                self.bytes += g.tensor(t).size;
            }
        } else if !g.is_persistent(root) && self.live[root.index()].is_none() {
            self.violation(Some(s), Some(op), Some(t), ViolationKind::BaseNotResident);
        }
        self.made[t.index()] = Some(self.root_version[root.index()]);
    }

    fn free(&mut self, s: usize, op: OpId, t: TensorId) {
        let g = self.g;
        if t.index() >= g.num_tensors() {
            self.violation(
                Some(s),
                Some(op),
                None,
                ViolationKind::UnknownTensor { index: t.0 },
            );
            return;
        }
        let root = g.storage_root(t);
        if g.is_persistent(root) {
            self.violation(Some(s), Some(op), Some(t), ViolationKind::FreePersistent);
            return;
        }
        match self.live[root.index()].take() {
            Some(start) => {
                self.bytes -= g.tensor(root).size;
                self.freed_at[root.index()] = Some(s);
                self.close(root, start, s);
            }
            None => self.violation(Some(s), Some(op), Some(t), ViolationKind::FreeNotResident),
        }
    }

    fn close(&mut self, root: TensorId, start: usize, end: usize) {
        self.lifetimes.push(Lifetime {
            root,
            first_step: start,
            last_step: end,
            bytes: self.g.tensor(root).size,
        });
    }

    fn finish(mut self, plan: &Plan) -> Result<VerifiedPeak, Vec<Violation>> {
        use ViolationKind as K;
        let g = self.g;
        for op in g.op_ids() {
            if self.original_runs[op.index()] == 0 {
                self.violation(None, Some(op), None, K::NeverRun);
            }
        }
        self.check_promises(plan);
        for &t in g.outputs() {
            let root = g.storage_root(t);
            let current = self.made[t.index()] == Some(self.root_version[root.index()]);
            if !g.is_persistent(root) && (self.live[root.index()].is_none() || !current) {
                self.violation(None, None, Some(t), K::OutputMissing);
            }
        }
        let end = plan.steps.len().saturating_sub(1);
        let open: Vec<(usize, usize)> = self
            .live
            .iter_mut()
            .enumerate()
            .filter_map(|(r, l)| l.take().map(|start| (r, start)))
            .collect();
        if !plan.steps.is_empty() {
            for (r, start) in open {
                self.close(TensorId::new(r), start, end);
            }
        }
        let replayed = if plan.steps.is_empty() {
            self.persistent
        } else {
            self.peak.0
        };
        if plan.summary.planned_peak != replayed {
            let claimed = plan.summary.planned_peak;
            self.violation(None, None, None, K::PeakMismatch { claimed, replayed });
        }
        self.compare_lifetimes(&plan.lifetimes);
        if let Some(arena) = &plan.arena {
            self.check_arena(plan, arena);
        }
        self.check_host(plan);
        if self.violations.is_empty() {
            Ok(VerifiedPeak {
                peak_bytes: replayed,
                peak_step: self.peak.1,
            })
        } else {
            Err(self.violations)
        }
    }

    /// What the plan's strategy promises ([`crate::options::Strategy::promises`]; see the
    /// module doc).
    fn check_promises(&mut self, plan: &Plan) {
        let g = self.g;
        let promises = plan.options.strategy.promises();
        if let Some(max) = promises.max_runs {
            for op in g.op_ids() {
                let runs = self.runs[op.index()];
                if runs > max {
                    self.violation(None, Some(op), None, ViolationKind::RunsTooOften { runs });
                }
            }
        }
        if promises.recompute_within_forward {
            let forward = forward_cost(g, self.device.as_ref());
            let recompute = self.recompute_cost;
            if recompute > forward * (1.0 + 1e-9) {
                let kind = ViolationKind::RecomputeOverForward { recompute, forward };
                self.violation(None, None, None, kind);
            }
        }
    }

    fn compare_lifetimes(&mut self, claimed: &[Lifetime]) {
        let mut a = claimed.to_vec();
        let mut b = std::mem::take(&mut self.lifetimes);
        a.sort();
        b.sort();
        if a == b {
            return;
        }
        let first_difference = match a.iter().zip(&b).find(|(x, y)| x != y) {
            Some((x, y)) => format!("claimed {x:?}, replayed {y:?}"),
            None => "one list is a prefix of the other".to_string(),
        };
        self.violation(
            None,
            None,
            None,
            ViolationKind::LifetimesMismatch {
                claimed: a.len(),
                replayed: b.len(),
                first_difference,
            },
        );
    }

    /// Offsets: one per lifetime, aligned, inside the arena, and apart while both live
    /// (see the module docs for the one exception, in-place pairs).
    fn check_arena(&mut self, plan: &Plan, arena: &ArenaLayout) {
        use ViolationKind as K;
        let lifetimes = &plan.lifetimes;
        if arena.offsets.len() != lifetimes.len() {
            let (offsets, n) = (arena.offsets.len(), lifetimes.len());
            self.violation(
                None,
                None,
                None,
                K::ArenaCount {
                    offsets,
                    lifetimes: n,
                },
            );
            return;
        }
        let align = arena.align.max(1);
        for (l, &offset) in lifetimes.iter().zip(&arena.offsets) {
            let t = self.known(l.root);
            if offset % align != 0 || arena.align == 0 {
                let align = arena.align;
                self.violation(None, None, t, K::ArenaMisaligned { offset, align });
            }
            let end = offset.saturating_add(l.bytes.div_ceil(align).saturating_mul(align));
            if l.bytes > 0 && end > arena.size {
                let size = arena.size;
                self.violation(None, None, t, K::ArenaOutside { offset, end, size });
            }
        }
        let mut order: Vec<usize> = (0..lifetimes.len())
            .filter(|&k| lifetimes[k].bytes > 0)
            .collect();
        order.sort_by_key(|&k| (lifetimes[k].first_step, k));
        if !self.any_clash(plan, arena, &order) {
            return;
        }
        // Some clash: list every one, pair by pair (quadratic, but only for a bad plan).
        let mut active: Vec<usize> = Vec::new();
        for &b in &order {
            let lb = lifetimes[b];
            active.retain(|&a| lifetimes[a].last_step >= lb.first_step);
            for &a in &active {
                if self.address_clash(plan, arena, a, b) {
                    let (ta, other) = (self.known(lifetimes[a].root), self.name_of(lb.root));
                    let kind = K::AddressOverlap {
                        other,
                        offset: arena.offsets[a],
                        other_offset: arena.offsets[b],
                    };
                    self.violation(Some(lb.first_step), None, ta, kind);
                }
            }
            active.push(b);
        }
    }

    /// Whether any two lifetimes alive together share an address illegally, in
    /// O(n log n): a sweep over `order` (by first step) keeps the live lifetimes by offset
    /// and checks each new one against the live ones around its addresses only. Until the
    /// first clash the live set is legal: apart, or sharing one offset (in-place pairs), so
    /// the live lifetimes overlapping the new one are those at its offsets, then those
    /// below it down to the first offset whose lifetimes all end at or before its start.
    /// The first clash is always found; the caller then lists them all.
    fn any_clash(&self, plan: &Plan, arena: &ArenaLayout, order: &[usize]) -> bool {
        use std::cmp::Reverse;
        use std::collections::{BTreeSet, BinaryHeap};
        let lifetimes = &plan.lifetimes;
        let end = |k: usize| arena.offsets[k].saturating_add(lifetimes[k].bytes);
        let mut live: BTreeSet<(u64, usize)> = BTreeSet::new();
        let mut expiry: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new();
        for &b in order {
            let lb = lifetimes[b];
            while let Some(&Reverse((last, a))) = expiry.peek() {
                if last >= lb.first_step {
                    break;
                }
                expiry.pop();
                live.remove(&(arena.offsets[a], a));
            }
            let ob = arena.offsets[b];
            let mut group: Option<u64> = None;
            let mut group_reaches = false;
            for &(oa, a) in live.range(..(end(b).max(ob.saturating_add(1)), 0)).rev() {
                if group != Some(oa) {
                    if group.is_some_and(|g| g < ob) && !group_reaches {
                        break;
                    }
                    group = Some(oa);
                    group_reaches = false;
                }
                group_reaches |= end(a) > ob;
                if self.address_clash(plan, arena, a, b) {
                    return true;
                }
            }
            live.insert((ob, b));
            expiry.push(Reverse((lb.last_step, b)));
        }
        false
    }

    /// Whether lifetimes `a` and `b` (alive together) share an address illegally.
    fn address_clash(&self, plan: &Plan, arena: &ArenaLayout, a: usize, b: usize) -> bool {
        let (la, lb) = (plan.lifetimes[a], plan.lifetimes[b]);
        let (oa, ob) = (arena.offsets[a], arena.offsets[b]);
        let apart = oa.saturating_add(la.bytes) <= ob || ob.saturating_add(lb.bytes) <= oa;
        let shared = oa == ob && (self.in_place(plan, la, lb) || self.in_place(plan, lb, la));
        !apart && !shared
    }

    /// Whether `output` may share `input`'s address: `input` ends where `output` starts,
    /// and that step's op may write one into the other in place.
    fn in_place(&self, plan: &Plan, input: Lifetime, output: Lifetime) -> bool {
        let s = output.first_step;
        let g = self.g;
        let known = |t: TensorId| t.index() < g.num_tensors();
        input.last_step == s
            && known(input.root)
            && known(output.root)
            && plan
                .steps
                .get(s)
                .filter(|st| st.op.index() < g.num_ops())
                .is_some_and(|st| g.in_place_allowed(st.op, output.root, input.root))
    }

    fn known(&self, t: TensorId) -> Option<TensorId> {
        (t.index() < self.g.num_tensors()).then_some(t)
    }

    fn name_of(&self, t: TensorId) -> String {
        match self.known(t) {
            Some(t) => self.g.tensor(t).name.clone(),
            None => format!("#{}", t.0),
        }
    }
}

/// The cost of one forward pass: the forward ops (every op when the graph has no phases),
/// costed as `Graph::op_cost_with` does on `device`.
pub fn forward_cost(g: &Graph, device: Option<&sgc_ir::DeviceProfile>) -> f64 {
    let forward = |o: OpId| g.phase(o) == Some(sgc_ir::Phase::Forward);
    let any = g.op_ids().any(forward);
    g.op_ids()
        .filter(|&o| !any || forward(o))
        .map(|o| g.op_cost_with(o, device).0)
        .sum()
}
