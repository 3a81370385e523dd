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
//! Persistent storage (param, state, const) is always resident; inputs are resident from
//! step 0 until freed.

use crate::plan::{GraphRef, Lifetime, Plan};
use serde::{Deserialize, Serialize};
use sgc_ir::{Graph, OpId, TensorId, TensorKind};
use std::fmt;

/// The replayed peak of an accepted plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VerifiedPeak {
    /// Persistent bytes plus the most bytes resident during a step.
    pub peak_bytes: u64,
    /// The first step reaching it.
    pub peak_step: Option<usize>,
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ViolationKind {
    GraphMismatch {
        expected: String,
        found: String,
    },
    UnknownOp,
    UnknownTensor {
        index: u32,
    },
    OriginalOutOfOrder {
        previous: String,
    },
    OriginalTwice,
    RecomputeBeforeOriginal,
    NonRecomputableRerun,
    NeverRun,
    NeverProduced,
    UseAfterFree {
        freed_at: usize,
    },
    StaleView,
    BaseNotResident,
    DirtyPersistent {
        writer: String,
    },
    FreeNotResident,
    FreePersistent,
    OutputMissing,
    PeakMismatch {
        claimed: u64,
        replayed: u64,
    },
    LifetimesMismatch {
        claimed: usize,
        replayed: usize,
        first_difference: String,
    },
}

/// One violation, naming the step, the op and the tensor it concerns where there are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub step: Option<usize>,
    pub op: Option<String>,
    pub tensor: Option<String>,
    #[serde(flatten)]
    pub kind: ViolationKind,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = self.step {
            write!(f, "step {s}")?;
        } else {
            write!(f, "plan")?;
        }
        if let Some(o) = &self.op {
            write!(f, " (op `{o}`)")?;
        }
        let t = self.tensor.as_deref().unwrap_or("?");
        use ViolationKind as K;
        match &self.kind {
            K::GraphMismatch { expected, found } => {
                write!(f, ": made for graph {expected}, checked against {found}")
            }
            K::UnknownOp => write!(f, ": names an op the graph does not have"),
            K::UnknownTensor { index } => write!(f, ": frees tensor #{index}, which the graph does not have"),
            K::OriginalOutOfOrder { previous } => write!(f, ": original run out of traced order (after op `{previous}`)"),
            K::OriginalTwice => write!(f, ": original run of an op that already ran"),
            K::RecomputeBeforeOriginal => write!(f, ": recomputed copy of an op that has not run yet"),
            K::NonRecomputableRerun => write!(f, ": runs a non-recomputable op a second time"),
            K::NeverRun => write!(f, ": the op never runs"),
            K::NeverProduced => write!(f, ": reads `{t}`, which no earlier step produced"),
            K::UseAfterFree { freed_at } => write!(f, ": reads `{t}`, freed after step {freed_at} and not recomputed since"),
            K::StaleView => write!(f, ": reads view `{t}`, made before its base was recomputed"),
            K::BaseNotResident => write!(f, ": makes view `{t}` of storage that is not resident"),
            K::DirtyPersistent { writer } => write!(f, ": recomputed copy reads `{t}` after non-recomputable op `{writer}` may have written it"),
            K::FreeNotResident => write!(f, ": frees `{t}`, which is not resident"),
            K::FreePersistent => write!(f, ": frees persistent `{t}`"),
            K::OutputMissing => write!(f, ": graph output `{t}` is not resident (or stale) at the end"),
            K::PeakMismatch { claimed, replayed } => write!(f, ": claims a peak of {claimed} B, replay gives {replayed} B"),
            K::LifetimesMismatch { claimed, replayed, first_difference } => write!(f, ": {claimed} lifetimes claimed, {replayed} replayed; first difference: {first_difference}"),
        }
    }
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
    last_original: Option<OpId>,
    bytes: u64,
    persistent: u64,
    peak: (u64, Option<usize>),
    lifetimes: Vec<Lifetime>,
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
            last_original: None,
            bytes: 0,
            persistent: 0,
            peak: (0, None),
            lifetimes: Vec::new(),
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
        if step.op.index() >= g.num_ops() {
            self.violation(Some(s), None, None, ViolationKind::UnknownOp);
            return;
        }
        let op = step.op;
        self.check_run(s, op, step.recompute);
        for &t in &g.op(op).inputs {
            self.check_read(s, op, t, step.recompute);
        }
        for &t in &g.op(op).outputs {
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
        for &t in &step.free {
            self.free(s, op, t);
        }
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
        if self.violations.is_empty() {
            Ok(VerifiedPeak {
                peak_bytes: replayed,
                peak_step: self.peak.1,
            })
        } else {
            Err(self.violations)
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
}
