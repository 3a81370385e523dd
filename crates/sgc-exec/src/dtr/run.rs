//! [`DtrExecutor`]: run-time DTR on a backend. Device memory is one allocation of
//! `memory` bytes; every storage (persistent ones included) lives at the offset the pool
//! gives it, and moves when the pool compacts (a real copy on the backend). Binding,
//! stepping and reading are the shared run loop ([`Runner`]); what is here is the
//! schedule, [`RunTimeDtr`].

use super::engine::{Engine, Names};
use super::facts::Facts;
use super::{report, DtrOptions, DtrReport, Event, Target};
use crate::backend::{Backend, BufferId, Operand};
use crate::error::ExecError;
use crate::executor::moves_no_data;
use crate::kernel::Kernel;
use crate::runner::{check_ops, placed_operand, Inputs, Runner, Schedule};
use sgc_ir::{Graph, OpId, TensorId};
use std::time::Instant;

/// Runs training steps of a graph under run-time DTR on backend `B` (see the
/// [module docs](super)); its interface is [`crate::executor::Executor`]'s.
pub type DtrExecutor<B> = Runner<B, RunTimeDtr>;

/// One op, ready to launch once its roots' offsets are known.
struct Launch {
    kernel: Kernel,
    inputs: Vec<Operand>,
    outputs: Vec<Operand>,
    /// Storage root of each input and output operand.
    input_roots: Vec<TensorId>,
    output_roots: Vec<TensorId>,
}

/// The schedule of a [`DtrExecutor`]: the engine deciding evictions as the step runs.
pub struct RunTimeDtr {
    options: DtrOptions,
    engine: Engine,
    pool: BufferId,
    /// Per op of the traced order; `None` for ops that move no data.
    launches: Vec<Option<Launch>>,
    /// Time spent writing inputs.
    input_seconds: f64,
    wall: f64,
}

/// The backend as the engine's target, for one step.
struct Kernels<'a, B: Backend> {
    graph: &'a Graph,
    backend: &'a mut B,
    pool: BufferId,
    launches: &'a mut [Option<Launch>],
    inputs: &'a Inputs,
    input_seconds: &'a mut f64,
}

impl<B: Backend> Target for Kernels<'_, B> {
    fn launch(&mut self, op: OpId, offsets: &[u64]) -> Result<f64, ExecError> {
        let Some(l) = self.launches[op.index()].as_mut() else {
            return Ok(0.0);
        };
        for (o, r) in l.inputs.iter_mut().zip(&l.input_roots) {
            o.offset = offsets[r.index()];
        }
        for (o, r) in l.outputs.iter_mut().zip(&l.output_roots) {
            o.offset = offsets[r.index()];
        }
        let start = Instant::now();
        self.backend
            .launch(&l.kernel, &l.inputs, &l.outputs)
            .map_err(|e| ExecError::Step {
                step: op.index(),
                op: self.graph.op(op).name.clone(),
                source: Box::new(e),
            })?;
        self.backend.synchronize()?;
        Ok(start.elapsed().as_secs_f64())
    }

    fn copy(&mut self, from: u64, to: u64, bytes: u64) -> Result<f64, ExecError> {
        let start = Instant::now();
        self.backend.copy(self.pool, from, to, bytes)?;
        self.backend.synchronize()?;
        Ok(start.elapsed().as_secs_f64())
    }

    fn write_input(&mut self, root: TensorId, offset: u64) -> Result<(), ExecError> {
        let start = Instant::now();
        if let Some(bytes) = self.inputs.of(root) {
            self.backend.write(self.pool, offset, bytes)?;
        }
        *self.input_seconds += start.elapsed().as_secs_f64();
        Ok(())
    }
}

impl<B: Backend> Schedule<B> for RunTimeDtr {
    fn persistent_home(&self, graph: &Graph, t: TensorId) -> Option<(BufferId, u64)> {
        let root = graph.storage_root(t);
        (graph.tensor(t).kind.is_persistent() && root == t)
            .then(|| (self.pool, self.engine.offsets[root.index()]))
    }

    fn step(&mut self, graph: &Graph, backend: &mut B, inputs: &Inputs) -> Result<(), ExecError> {
        let start = Instant::now();
        let mut target = Kernels {
            graph,
            backend,
            pool: self.pool,
            launches: &mut self.launches,
            inputs,
            input_seconds: &mut self.input_seconds,
        };
        let r = self.engine.step(&mut target);
        self.wall += start.elapsed().as_secs_f64();
        r
    }

    fn resident(&self, graph: &Graph, t: TensorId) -> Option<(BufferId, u64)> {
        let root = graph.storage_root(t);
        let kept = graph.is_persistent(t)
            || (self.engine.counters.steps > 0
                && self.engine.facts.output[root.index()]
                && self.engine.resident(root));
        kept.then(|| (self.pool, self.engine.offsets[root.index()]))
    }
}

impl<B: Backend> Runner<B, RunTimeDtr> {
    /// Checks every op against the backend (unknown types and bad operands refused by
    /// name), allocates the pool and places the persistent storages.
    pub fn new(graph: &Graph, mut backend: B, options: &DtrOptions) -> Result<Self, ExecError> {
        let ops: Vec<OpId> = graph.op_ids().collect();
        let kernels = check_ops(graph, &ops, &backend)?;
        let no_op: Vec<bool> = ops
            .iter()
            .zip(&kernels)
            .map(|(&op, k)| moves_no_data(graph, op, k))
            .collect();
        let writes_first: Vec<bool> = kernels.iter().map(Kernel::writes_first_input).collect();
        let facts = Facts::new(graph, no_op, &writes_first, options.device_profile.as_ref());
        let pool = backend.alloc(options.memory)?;
        let launches = ops
            .iter()
            .zip(kernels)
            .map(|(&op, kernel)| {
                if facts.no_op[op.index()] {
                    Ok(None)
                } else {
                    launch(graph, op, kernel, pool).map(Some)
                }
            })
            .collect::<Result<_, ExecError>>()?;
        let engine = Engine::new(facts, Names::of(graph), options)?;
        let dtr = RunTimeDtr {
            options: options.clone(),
            engine,
            pool,
            launches,
            input_seconds: 0.0,
            wall: 0.0,
        };
        Ok(Runner::with_schedule(graph, backend, dtr))
    }

    /// What the steps so far did; durations in seconds.
    pub fn report(&self) -> DtrReport {
        let s = &self.schedule;
        let c = &s.engine.counters;
        let busy = c.compute + c.recompute + c.defrag + s.input_seconds;
        report(
            &self.graph,
            &s.options,
            &s.engine,
            self.backend.name(),
            "s".into(),
            s.wall,
            (s.wall - busy).max(0.0),
        )
    }

    /// Every event so far (with `options.trace`).
    pub fn trace(&self) -> Option<&[Event]> {
        self.schedule.engine.trace.as_deref()
    }

    /// Storages resident now that are neither persistent nor graph outputs (none after a
    /// step).
    pub fn leftovers(&self) -> Vec<String> {
        self.schedule
            .engine
            .leftovers()
            .into_iter()
            .map(|t| self.graph.tensor(t).name.clone())
            .collect()
    }
}

/// Op `op` with its operands in `pool`, at offset 0 until the engine places them.
fn launch(graph: &Graph, op: OpId, kernel: Kernel, pool: BufferId) -> Result<Launch, ExecError> {
    let o = graph.op(op);
    let operands = |ts: &[TensorId]| -> Result<Vec<Operand>, ExecError> {
        ts.iter()
            .map(|&t| placed_operand(graph, t, pool, 0))
            .collect()
    };
    let roots = |ts: &[TensorId]| ts.iter().map(|&t| graph.storage_root(t)).collect();
    Ok(Launch {
        kernel,
        inputs: operands(&o.inputs)?,
        outputs: operands(&o.outputs)?,
        input_roots: roots(&o.inputs),
        output_roots: roots(&o.outputs),
    })
}
