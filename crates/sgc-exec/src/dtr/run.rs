//! [`DtrExecutor`]: run-time DTR on a backend. Device memory is one allocation of
//! `memory` bytes; every storage (persistent ones included) lives at the offset the pool
//! gives it, and moves when the pool compacts (a real copy on the backend).

use super::engine::{Engine, Names};
use super::facts::Facts;
use super::{report, DtrOptions, DtrReport, Event, Target};
use crate::backend::{Backend, BufferId, Operand};
use crate::executor::{
    check_binding, check_ops, loss_name, moves_no_data, operand, read_tensor, scalar,
};
use crate::host::HostTensor;
use crate::kernel::Kernel;
use crate::{view, ExecError};
use sgc_ir::{Graph, OpId, TensorId, TensorKind};
use std::time::Instant;

/// One op, ready to launch once its roots' offsets are known.
struct Launch {
    kernel: Kernel,
    inputs: Vec<Operand>,
    outputs: Vec<Operand>,
    /// Storage root of each input and output operand.
    input_roots: Vec<TensorId>,
    output_roots: Vec<TensorId>,
}

/// The backend as the engine's target.
struct Kernels<B: Backend> {
    backend: B,
    pool: BufferId,
    launches: Vec<Option<Launch>>,
    names: Vec<String>,
    /// Host copy of each bound input, written at every step's start.
    inputs: Vec<Option<Vec<u8>>>,
    /// Time spent writing inputs.
    input_seconds: f64,
}

impl<B: Backend> Target for Kernels<B> {
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
                op: self.names[op.index()].clone(),
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
        if let Some(bytes) = &self.inputs[root.index()] {
            self.backend.write(self.pool, offset, bytes)?;
        }
        self.input_seconds += start.elapsed().as_secs_f64();
        Ok(())
    }
}

/// Runs training steps of a graph under run-time DTR on backend `B` (see the
/// [module docs](super)); its interface is [`crate::Executor`]'s.
pub struct DtrExecutor<B: Backend> {
    graph: Graph,
    options: DtrOptions,
    engine: Engine,
    target: Kernels<B>,
    bound: Vec<bool>,
    wall: f64,
}

impl<B: Backend> DtrExecutor<B> {
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
        let mut launches = Vec::with_capacity(ops.len());
        for (&op, kernel) in ops.iter().zip(kernels) {
            if facts.no_op[op.index()] {
                launches.push(None);
                continue;
            }
            let o = graph.op(op);
            let operands = |ts: &[TensorId]| -> Result<Vec<Operand>, ExecError> {
                ts.iter()
                    .map(|&t| {
                        let mut x = operand(graph, t, pool, 0);
                        x.view = view::view_of(graph, t)?.map(Box::new);
                        Ok(x)
                    })
                    .collect()
            };
            let roots = |ts: &[TensorId]| ts.iter().map(|&t| graph.storage_root(t)).collect();
            launches.push(Some(Launch {
                kernel,
                inputs: operands(&o.inputs)?,
                outputs: operands(&o.outputs)?,
                input_roots: roots(&o.inputs),
                output_roots: roots(&o.outputs),
            }));
        }
        let engine = Engine::new(facts, Names::of(graph), options)?;
        Ok(DtrExecutor {
            graph: graph.clone(),
            options: options.clone(),
            engine,
            target: Kernels {
                backend,
                pool,
                launches,
                names: graph.ops().iter().map(|o| o.name.clone()).collect(),
                inputs: vec![None; graph.num_tensors()],
                input_seconds: 0.0,
            },
            bound: vec![false; graph.num_tensors()],
            wall: 0.0,
        })
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Binds an input (copied in at every step) or a persistent tensor (written now at its
    /// place in the pool). Shape and dtype are checked.
    pub fn bind(&mut self, name: &str, value: &HostTensor) -> Result<(), ExecError> {
        let t = check_binding(&self.graph, name, value)?;
        let decl = self.graph.tensor(t);
        let root = self.graph.storage_root(t);
        let bytes = value.to_bytes();
        if decl.kind.is_persistent() && root == t {
            let off = self.engine.offsets[root.index()];
            self.target.backend.write(self.target.pool, off, &bytes)?;
        } else if decl.kind == TensorKind::Input && root == t {
            self.target.inputs[t.index()] = Some(bytes);
        } else {
            return Err(ExecError::NotBindable {
                tensor: name.to_string(),
                kind: decl.kind.as_str().to_string(),
            });
        }
        self.bound[t.index()] = true;
        Ok(())
    }

    /// Binds every input and persistent tensor to seeded values ([`crate::init`]).
    pub fn bind_seeded(&mut self, seed: u64) -> Result<(), ExecError> {
        for (n, v) in crate::init::seeded(&self.graph, seed)? {
            self.bind(&n, &v)?;
        }
        Ok(())
    }

    /// Runs one training step.
    pub fn step(&mut self) -> Result<(), ExecError> {
        for t in self.graph.tensor_ids() {
            let d = self.graph.tensor(t);
            let needs = self.graph.storage_root(t) == t
                && (d.kind == TensorKind::Input || d.kind.is_persistent());
            if needs && !self.bound[t.index()] {
                return Err(ExecError::Unbound(
                    d.name.clone(),
                    d.kind.as_str().to_string(),
                ));
            }
        }
        let start = Instant::now();
        let r = self.engine.step(&mut self.target);
        self.wall += start.elapsed().as_secs_f64();
        r
    }

    /// Runs `steps` steps; the loss after each (empty if the graph names no loss).
    pub fn run(&mut self, steps: usize) -> Result<Vec<f32>, ExecError> {
        let mut losses = Vec::new();
        for _ in 0..steps {
            self.step()?;
            if self.graph.loss().is_some() {
                losses.push(self.loss()?);
            }
        }
        Ok(losses)
    }

    /// Reads a persistent tensor or a graph output after a step.
    pub fn read(&mut self, name: &str) -> Result<HostTensor, ExecError> {
        let t = self
            .graph
            .tensor_by_name(name)
            .ok_or_else(|| ExecError::NoSuchTensor(name.to_string()))?;
        let d = self.graph.tensor(t);
        let root = self.graph.storage_root(t);
        let kept = self.graph.is_persistent(t)
            || (self.engine.counters.steps > 0
                && self.engine.facts.output[root.index()]
                && self.engine.resident(root));
        if !kept {
            return Err(ExecError::NotResident(name.to_string()));
        }
        let off = self.engine.offsets[root.index()];
        read_tensor(&mut self.target.backend, d, self.target.pool, off)
    }

    /// The scalar loss after the last step.
    pub fn loss(&mut self) -> Result<f32, ExecError> {
        let name = loss_name(&self.graph)?;
        let v = self.read(&name)?;
        scalar(name, &v)
    }

    /// What the steps so far did; durations in seconds.
    pub fn report(&self) -> DtrReport {
        let c = &self.engine.counters;
        let busy = c.compute + c.recompute + c.defrag + self.target.input_seconds;
        report(
            &self.graph,
            &self.options,
            &self.engine,
            self.target.backend.name(),
            "s".into(),
            self.wall,
            (self.wall - busy).max(0.0),
        )
    }

    /// Every event so far (with `options.trace`).
    pub fn trace(&self) -> Option<&[Event]> {
        self.engine.trace.as_deref()
    }

    /// Storages resident now that are neither persistent nor graph outputs (none after a
    /// step).
    pub fn leftovers(&self) -> Vec<String> {
        self.engine
            .leftovers()
            .into_iter()
            .map(|t| self.graph.tensor(t).name.clone())
            .collect()
    }
}
