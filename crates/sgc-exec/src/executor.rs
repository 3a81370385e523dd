//! The executor: runs an [`sgc_plan_format::Plan`] of a graph on a [`Backend`] (its steps in
//! order, every tensor at the plan's arena offset) and measures what it used. Binding,
//! stepping and reading are the shared run loop ([`Runner`]); what is here is the
//! schedule, [`PlanReplay`].
//!
//! # Method
//!
//! Building an executor does every check before any kernel runs: the plan goes through
//! the plan verifier (`sgc_plan_format::check`: frees, recompute flags, summary, arena offsets),
//! each op type is parsed into a [`Kernel`] (unknown types are refused by name), the
//! backend is asked whether it has the kernel, and every operand's dtype and shape is
//! checked against the kernel. There is no second model of the schedule or the layout:
//! what runs is the plan that was verified. Then it makes exactly one allocation for the
//! arena and one per persistent storage (params, state, consts), and resolves, for every
//! step, each operand to (buffer, offset): a storage root's current instance changes each
//! time its producer runs (recomputation), a view reads its root's bytes at the root's
//! current offset, and a persistent tensor reads its own allocation.
//!
//! A training step writes the bound inputs at their instances' offsets (inputs are
//! resident from step 0), then launches each step's kernel, with a backend
//! [mark](Backend::mark) before the first and after each: the time between two marks is
//! the op's, from the first to the last the step's (device time: CUDA events on CUDA, so
//! nothing waits between launches). A `reshape` whose output views its input is a no-op.
//! `sgd_update` writes the parameter in place, so parameters carry over from one step to
//! the next.
//!
//! A plan's offloads (`crate::offload`) add one host allocation, the pool, at the plan's
//! host size, and copies between steps: each offloaded storage is copied to the pool after
//! `copy_after` and back after `fetch_after` into its second instance, where the resolver
//! has its readers from `fetch_after + 1` on.

use crate::backend::{AllocStats, Backend, BufferId, Operand};
use crate::error::ExecError;
use crate::kernel::Kernel;
use crate::offload::Offloads;
use crate::runner::{check_ops, placed_operand, Inputs, Runner, Schedule};
use serde::Serialize;
use sgc_ir::{Graph, OpId, TensorId, TensorKind};
use sgc_plan_format::Plan;
use std::collections::HashMap;

/// One step, resolved: the kernel and where each operand lives.
struct Launch {
    kernel: Kernel,
    inputs: Vec<Operand>,
    outputs: Vec<Operand>,
    /// A view-producing `reshape`: nothing to do.
    no_op: bool,
}

/// Time spent in one op over all the steps run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpTime {
    pub op: String,
    pub op_type: String,
    /// Kernel runs (more than the training steps when the op is recomputed).
    pub runs: u64,
    pub seconds: f64,
}

/// Measured memory and time of the steps run so far.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunReport {
    pub device: String,
    /// Training steps run.
    pub steps: usize,
    /// Schedule length (ops per training step, recomputations included).
    pub schedule_len: usize,
    /// Ops run more than once per step.
    pub recompute_steps: usize,
    /// The plan's arena size.
    pub arena_bytes: u64,
    /// Bytes of the persistent allocations.
    pub persistent_bytes: u64,
    /// The plan's promise: arena plus persistent bytes.
    pub planned_bytes: u64,
    /// The backend allocator's counters (what was actually allocated).
    pub allocator: AllocStats,
    /// The memory model's peak of the schedule (what a perfect packing would need).
    pub model_peak_bytes: u64,
    /// Persistent bytes plus the largest op's footprint: no schedule needs less.
    pub lower_bound_bytes: u64,
    /// Bytes of the host pool offloaded storages are copied into (not device bytes; the
    /// plan's host peak is its bound).
    pub host_pool_bytes: u64,
    /// Storages offloaded per step.
    pub offloads: usize,
    /// Bytes copied to host per step (and as many back).
    pub offload_bytes: u64,
    /// Device time of all steps (first launch to last; wall clock on the CPU, CUDA events
    /// on CUDA).
    pub seconds: f64,
    /// Of which in recomputation steps.
    pub recompute_seconds: f64,
    /// Device time of each step, in order.
    pub step_seconds: Vec<f64>,
    /// Per op, in graph order.
    pub op_times: Vec<OpTime>,
}

/// Runs a graph's schedule on backend `B`: see the [module docs](self).
pub type Executor<B> = Runner<B, PlanReplay>;

/// The schedule of an [`Executor`]: a verified plan, replayed as written.
pub struct PlanReplay {
    plan: Plan,
    arena: BufferId,
    /// Allocation of each persistent storage root.
    persistent: Vec<Option<BufferId>>,
    launches: Vec<Launch>,
    offloads: Offloads,
    /// Arena offset of each input root (its instance from step 0).
    input_offsets: Vec<Option<u64>>,
    /// Arena offset of each non-persistent root resident at the end, if any.
    final_offsets: Vec<Option<u64>>,
    model_peak: u64,
    steps_run: usize,
    op_seconds: Vec<f64>,
    op_runs: Vec<u64>,
    recompute_seconds: f64,
    /// Device seconds of each step run, first launch to last.
    step_seconds: Vec<f64>,
}

impl<B: Backend> Schedule<B> for PlanReplay {
    fn persistent_home(&self, graph: &Graph, t: TensorId) -> Option<(BufferId, u64)> {
        self.persistent[graph.storage_root(t).index()].map(|b| (b, 0))
    }

    fn step(&mut self, graph: &Graph, backend: &mut B, inputs: &Inputs) -> Result<(), ExecError> {
        for (t, off) in self.input_offsets.iter().enumerate() {
            if let (Some(bytes), Some(off)) = (inputs.of(TensorId::new(t)), off) {
                backend.write(self.arena, *off, bytes)?;
            }
        }
        // A mark before the first launch and after each: per-op times without stalling
        // the device (CUDA events), and the step's own device time from first to last.
        let mut marks = Vec::with_capacity(self.launches.len() + 1);
        marks.push((usize::MAX, backend.mark()?));
        let mut flight = self.offloads.in_flight();
        for (i, l) in self.launches.iter().enumerate() {
            self.offloads.cross(i, backend, &mut flight)?;
            if l.no_op {
                continue;
            }
            backend
                .launch(&l.kernel, &l.inputs, &l.outputs)
                .map_err(|e| ExecError::Step {
                    step: i,
                    op: graph.op(self.plan.steps[i].op).name.clone(),
                    source: Box::new(e),
                })?;
            marks.push((i, backend.mark()?));
        }
        self.offloads
            .cross(self.launches.len(), backend, &mut flight)?;
        for pair in marks.windows(2) {
            let (i, to) = &pair[1];
            let secs = backend.seconds_between(&pair[0].1, to)?;
            let step = &self.plan.steps[*i];
            self.op_seconds[step.op.index()] += secs;
            self.op_runs[step.op.index()] += 1;
            if step.recompute {
                self.recompute_seconds += secs;
            }
        }
        let (first, last) = (&marks[0].1, &marks[marks.len() - 1].1);
        self.step_seconds
            .push(backend.seconds_between(first, last)?);
        self.steps_run += 1;
        Ok(())
    }

    fn resident(&self, graph: &Graph, t: TensorId) -> Option<(BufferId, u64)> {
        let root = graph.storage_root(t).index();
        match (self.persistent[root], self.final_offsets[root]) {
            (Some(b), _) => Some((b, 0)),
            (None, Some(o)) if self.steps_run > 0 => Some((self.arena, o)),
            _ => None,
        }
    }
}

impl<B: Backend> Runner<B, PlanReplay> {
    /// The executor of a plan for `graph`: its steps, recomputations marked, every tensor
    /// at the plan's arena offset (one allocation of the plan's arena size). A plan without
    /// an arena is refused ([`ExecError::NoArena`]: the executor places nothing; the facade's
    /// `sgc::runner` plans and places). A plan that the verifier refuses (an early or a
    /// missing free, a false recompute flag, a summary its steps do not give, overlapping
    /// offsets) is refused here, before any memory is allocated or any kernel runs.
    pub fn from_plan(graph: &Graph, plan: &Plan, mut backend: B) -> Result<Self, ExecError> {
        plan.check_graph(graph)?;
        if plan.arena.is_none() {
            return Err(ExecError::NoArena);
        }
        let ops: Vec<OpId> = plan.steps.iter().map(|s| s.op).collect();
        let plan = plan.clone();
        sgc_plan_format::check(graph, &plan)?;
        let kernels = check_ops(graph, &ops, &backend)?;
        let model_peak = sgc_ir::simulate_offloaded(graph, &ops, &plan.offloads)?.peak;
        let places = Places::of(&plan);
        let arena = backend.alloc(places.arena_bytes)?;
        let offloads = Offloads::of(graph, &plan, arena)?;
        if let Some(host) = plan.host.as_ref().filter(|_| offloads.len() > 0) {
            backend.alloc_host_pool(host.size)?;
        }
        let mut persistent = vec![None; graph.num_tensors()];
        for t in graph.tensor_ids() {
            if graph.storage_root(t) == t && graph.is_persistent(t) {
                persistent[t.index()] = Some(backend.alloc(graph.tensor(t).size)?);
            }
        }
        let mut resolver = Resolver::new(graph, &places, arena, &persistent, &offloads);
        let launches = resolver.resolve(&ops, kernels)?;
        let final_offsets = places.resident_at_end(&plan, resolver.current);
        let replay = PlanReplay {
            input_offsets: resolver.input_offsets,
            final_offsets,
            plan,
            arena,
            persistent,
            launches,
            offloads,
            model_peak,
            steps_run: 0,
            op_seconds: vec![0.0; graph.num_ops()],
            op_runs: vec![0; graph.num_ops()],
            recompute_seconds: 0.0,
            step_seconds: Vec::new(),
        };
        Ok(Runner::with_schedule(graph, backend, replay))
    }

    /// The plan being run (with its arena, placed if the given plan had none).
    pub fn plan(&self) -> &Plan {
        &self.schedule.plan
    }

    /// Device seconds of each step run so far, in order (cheaper than a [`Self::report`]).
    pub fn step_seconds(&self) -> &[f64] {
        &self.schedule.step_seconds
    }

    /// Device seconds spent in each op so far, by op index (recomputations included).
    pub fn op_seconds(&self) -> &[f64] {
        &self.schedule.op_seconds
    }

    /// Device seconds spent in recomputation steps so far.
    pub fn recompute_seconds(&self) -> f64 {
        self.schedule.recompute_seconds
    }

    /// Bytes of the arena allocation.
    pub fn arena_bytes(&self) -> u64 {
        self.schedule.plan.arena.as_ref().map_or(0, |a| a.size)
    }

    /// Measured memory and time so far.
    pub fn report(&self) -> RunReport {
        let g = &self.graph;
        let s = &self.schedule;
        let op_times = g
            .op_ids()
            .filter(|o| s.op_runs[o.index()] > 0)
            .map(|o| OpTime {
                op: g.op(o).name.clone(),
                op_type: g.op(o).op_type.clone(),
                runs: s.op_runs[o.index()],
                seconds: s.op_seconds[o.index()],
            })
            .collect();
        let persistent = g.persistent_bytes();
        RunReport {
            device: self.backend.name(),
            steps: s.steps_run,
            schedule_len: s.plan.steps.len(),
            recompute_steps: s.plan.steps.iter().filter(|s| s.recompute).count(),
            arena_bytes: self.arena_bytes(),
            persistent_bytes: persistent,
            planned_bytes: self.arena_bytes() + persistent,
            allocator: self.backend.memory(),
            model_peak_bytes: s.model_peak,
            lower_bound_bytes: g.lower_bound().bytes,
            host_pool_bytes: self.backend.host_pool_bytes(),
            offloads: s.offloads.len(),
            offload_bytes: s.offloads.bytes(),
            seconds: s.step_seconds.iter().sum(),
            recompute_seconds: s.recompute_seconds,
            step_seconds: s.step_seconds.clone(),
            op_times,
        }
    }
}

/// The plan's arena offsets, by storage instance (root and first step).
struct Places {
    arena_bytes: u64,
    offsets: HashMap<(TensorId, usize), u64>,
}

impl Places {
    /// From a plan whose arena is present (`from_plan` places it when it is not).
    fn of(plan: &Plan) -> Places {
        let arena = plan.arena.as_ref();
        let offsets = plan
            .lifetimes
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let off = arena.and_then(|a| a.offsets.get(i)).copied().unwrap_or(0);
                ((l.root, l.first_step), off)
            })
            .collect();
        Places {
            arena_bytes: arena.map_or(0, |a| a.size),
            offsets,
        }
    }

    /// The offset of the instance of `root` that starts at step `start`.
    fn offset_of(&self, root: TensorId, start: usize) -> Option<u64> {
        self.offsets.get(&(root, start)).copied()
    }

    /// `current` (each root's last offset) kept only for the storages resident when the
    /// step ends (graph outputs, whose lifetimes reach the last step).
    fn resident_at_end(&self, plan: &Plan, mut current: Vec<Option<u64>>) -> Vec<Option<u64>> {
        let last = plan.steps.len().saturating_sub(1);
        let mut keep = vec![false; current.len()];
        for l in plan.lifetimes.iter().filter(|l| l.last_step == last) {
            keep[l.root.index()] = true;
        }
        for (i, o) in current.iter_mut().enumerate() {
            if !keep[i] {
                *o = None;
            }
        }
        current
    }
}

/// Walks the plan's steps, tracking the arena offset of each root's current instance.
struct Resolver<'a> {
    graph: &'a Graph,
    places: &'a Places,
    arena: BufferId,
    persistent: &'a [Option<BufferId>],
    offloads: &'a Offloads,
    current: Vec<Option<u64>>,
    input_offsets: Vec<Option<u64>>,
}

impl<'a> Resolver<'a> {
    fn new(
        graph: &'a Graph,
        places: &'a Places,
        arena: BufferId,
        persistent: &'a [Option<BufferId>],
        offloads: &'a Offloads,
    ) -> Self {
        let mut current = vec![None; graph.num_tensors()];
        for t in graph.tensor_ids() {
            if graph.tensor(t).kind == TensorKind::Input && graph.storage_root(t) == t {
                current[t.index()] = places.offset_of(t, 0);
            }
        }
        Resolver {
            graph,
            places,
            arena,
            persistent,
            offloads,
            input_offsets: current.clone(),
            current,
        }
    }

    /// Storages fetched back from the host live in their second instance from step `s`.
    fn fetched_into(&mut self, s: usize) -> Result<(), ExecError> {
        let fetched: Vec<TensorId> = self.offloads.fetched_into(s).collect();
        for root in fetched {
            self.start_instance(root, s, "fetched back before")?;
        }
        Ok(())
    }

    /// `root`'s instance that starts at step `s` is its current one (`how` it starts, for
    /// the error when the plan has no place for it).
    fn start_instance(&mut self, root: TensorId, s: usize, how: &str) -> Result<(), ExecError> {
        let off = self.places.offset_of(root, s).ok_or_else(|| {
            ExecError::Layout(format!(
                "no placement for `{}` {how} step {s}",
                self.graph.tensor(root).name
            ))
        })?;
        self.current[root.index()] = Some(off);
        Ok(())
    }

    fn locate(&self, t: TensorId) -> Result<Operand, ExecError> {
        let root = self.graph.storage_root(t);
        let (buf, off) = match self.persistent[root.index()] {
            Some(buf) => (buf, 0),
            None => {
                let off = self.current[root.index()].ok_or_else(|| {
                    ExecError::Layout(format!(
                        "tensor `{}` is used before its storage is placed",
                        self.graph.tensor(t).name
                    ))
                })?;
                (self.arena, off)
            }
        };
        placed_operand(self.graph, t, buf, off)
    }

    fn resolve(&mut self, ops: &[OpId], kernels: Vec<Kernel>) -> Result<Vec<Launch>, ExecError> {
        let mut launches = Vec::with_capacity(kernels.len());
        for (s, (&op, kernel)) in ops.iter().zip(kernels).enumerate() {
            self.fetched_into(s)?;
            let o = self.graph.op(op);
            let inputs = o
                .inputs
                .iter()
                .map(|&t| self.locate(t))
                .collect::<Result<Vec<_>, _>>()?;
            for &t in &o.outputs {
                let root = self.graph.storage_root(t);
                if root == t && self.persistent[root.index()].is_none() {
                    self.start_instance(root, s, "produced at")?;
                }
            }
            let outputs = o
                .outputs
                .iter()
                .map(|&t| self.locate(t))
                .collect::<Result<Vec<_>, _>>()?;
            let no_op = moves_no_data(self.graph, op, &kernel);
            launches.push(Launch {
                kernel,
                inputs,
                outputs,
                no_op,
            });
        }
        Ok(launches)
    }
}

/// A view op whose outputs alias its input moves no data: its readers get a view operand
/// (crate::view).
pub(crate) fn moves_no_data(graph: &Graph, op: OpId, kernel: &Kernel) -> bool {
    let o = graph.op(op);
    kernel.is_view_like()
        && o.outputs
            .iter()
            .all(|&t| graph.storage_root(t) == graph.storage_root(o.inputs[0]))
}
