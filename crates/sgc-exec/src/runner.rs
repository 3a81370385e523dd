//! The run loop both executors share: binding inputs and persistent tensors by name,
//! running training steps, reading outputs, gradients and the loss. A [`Runner`] owns the
//! graph, the backend and the bound values; its [`Schedule`] is the one thing that
//! differs, deciding how a step runs and where each tensor lives:
//!
//! - [`crate::executor::PlanReplay`] ([`crate::executor::Executor`]): a verified plan replayed as
//!   written, every tensor at the plan's arena offset, resolved before the first step;
//! - [`crate::dtr::RunTimeDtr`] ([`crate::dtr::DtrExecutor`]): the traced order, eviction and
//!   recomputation decided while the step runs, every storage where the pool puts it.
//!
//! The checks every executor makes before any kernel runs (op types the backend has,
//! operand dtypes and shapes) and the operands it hands the backend are here too.

use crate::backend::{Backend, BufferId, Operand};
use crate::error::ExecError;
use crate::host::HostTensor;
use crate::kernel::Kernel;
use crate::{shapes, view};
use sgc_ir::{DType, Graph, OpId, TensorId, TensorKind};

/// How a [`Runner`] runs a step and where its tensors live (see the
/// [module docs](self)).
pub trait Schedule<B: Backend> {
    /// Where persistent tensor `t` is written when it is bound (buffer, offset); `None`
    /// when `t` has no persistent storage of its own.
    fn persistent_home(&self, graph: &Graph, t: TensorId) -> Option<(BufferId, u64)>;

    /// Runs one training step on `backend`, every bound input written at its place
    /// first; every input and persistent tensor is bound.
    fn step(&mut self, graph: &Graph, backend: &mut B, inputs: &Inputs) -> Result<(), ExecError>;

    /// Where tensor `t` can be read now (buffer, offset): a persistent tensor at any time,
    /// a graph output resident when the last step ended; `None` for anything else.
    fn resident(&self, graph: &Graph, t: TensorId) -> Option<(BufferId, u64)>;
}

/// Runs training steps of a graph on backend `B`, its schedule `S` deciding how (see the
/// [module docs](self)).
pub struct Runner<B: Backend, S> {
    pub(crate) graph: Graph,
    pub(crate) backend: B,
    pub(crate) schedule: S,
    inputs: Inputs,
    bound: Vec<bool>,
}

/// Host copy of each bound input root, written at every step's start.
pub struct Inputs(Vec<Option<Vec<u8>>>);

impl Inputs {
    /// The bytes bound to input root `root`, if any.
    pub fn of(&self, root: TensorId) -> Option<&[u8]> {
        self.0[root.index()].as_deref()
    }
}

impl<B: Backend, S: Schedule<B>> Runner<B, S> {
    /// A runner with nothing bound yet.
    pub(crate) fn with_schedule(graph: &Graph, backend: B, schedule: S) -> Self {
        Runner {
            graph: graph.clone(),
            backend,
            schedule,
            inputs: Inputs(vec![None; graph.num_tensors()]),
            bound: vec![false; graph.num_tensors()],
        }
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Binds an input (copied in at every step) or a persistent tensor (written now at its
    /// place; `sgd_update` changes params in place from then on). Shape and dtype are
    /// checked.
    pub fn bind(&mut self, name: &str, value: &HostTensor) -> Result<(), ExecError> {
        let t = check_binding(&self.graph, name, value)?;
        let decl = self.graph.tensor(t);
        let bytes = value.to_bytes();
        if let Some((buf, off)) = self.schedule.persistent_home(&self.graph, t) {
            self.backend.write(buf, off, &bytes)?;
        } else if decl.kind == TensorKind::Input && self.graph.storage_root(t) == t {
            self.inputs.0[t.index()] = Some(bytes);
        } else {
            return Err(ExecError::NotBindable {
                tensor: name.to_string(),
                kind: decl.kind.as_str().to_string(),
            });
        }
        self.bound[t.index()] = true;
        Ok(())
    }

    /// Binds every `(name, value)` pair.
    pub fn bind_all<'a>(
        &mut self,
        values: impl IntoIterator<Item = &'a (String, HostTensor)>,
    ) -> Result<(), ExecError> {
        values.into_iter().try_for_each(|(n, v)| self.bind(n, v))
    }

    /// Binds every input and persistent tensor to seeded values ([`crate::init`]).
    pub fn bind_seeded(&mut self, seed: u64) -> Result<(), ExecError> {
        let values = crate::init::seeded(&self.graph, seed)?;
        self.bind_all(&values)
    }

    fn check_bound(&self) -> Result<(), ExecError> {
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
        Ok(())
    }

    /// Runs one training step (the whole schedule).
    pub fn step(&mut self) -> Result<(), ExecError> {
        self.check_bound()?;
        self.schedule
            .step(&self.graph, &mut self.backend, &self.inputs)
    }

    /// Runs `steps` training steps; returns the loss after each (empty if the graph
    /// names no loss).
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

    /// Reads a tensor resident when the step ends: a persistent tensor or a graph
    /// output (the loss, gradients).
    pub fn read(&mut self, name: &str) -> Result<HostTensor, ExecError> {
        let t = self
            .graph
            .tensor_by_name(name)
            .ok_or_else(|| ExecError::NoSuchTensor(name.to_string()))?;
        let (buf, off) = self
            .schedule
            .resident(&self.graph, t)
            .ok_or_else(|| ExecError::NotResident(name.to_string()))?;
        // The stored tensor read whole; a view of it gathered as the view reads it.
        let root = self.graph.tensor(self.graph.storage_root(t));
        let stored = read_bytes(&mut self.backend, root, buf, off)?;
        let decl = self.graph.tensor(t);
        let width = decl.dtype.size() as usize;
        let shape: Vec<usize> = decl.shape.iter().map(|&d| d as usize).collect();
        let bytes = match crate::view::view_of(&self.graph, t)? {
            None => stored[..(shape.iter().product::<usize>() * width).min(stored.len())].to_vec(),
            Some(view) => {
                let indices = view.indices().ok_or_else(|| {
                    ExecError::backend(
                        "host",
                        format!("the view `{name}` does not fit its stored tensor"),
                    )
                })?;
                indices
                    .iter()
                    .flat_map(|&i| stored[i * width..(i + 1) * width].iter().copied())
                    .collect()
            }
        };
        host_tensor(decl, shape, &bytes)
    }

    /// The scalar loss after the last step.
    pub fn loss(&mut self) -> Result<f32, ExecError> {
        let t = self
            .graph
            .loss()
            .ok_or_else(|| ExecError::NoSuchTensor("(the graph names no loss)".into()))?;
        let name = self.graph.tensor(t).name.clone();
        let v = self.read(&name)?;
        v.to_f32().and_then(|s| s.first().copied()).ok_or_else(|| {
            ExecError::dtype(
                &name,
                v.dtype(),
                "host",
                &[DType::F32, DType::F16, DType::Bf16],
            )
        })
    }
}

/// The tensor `name` names, if `value` matches its declared dtype and shape.
fn check_binding(graph: &Graph, name: &str, value: &HostTensor) -> Result<TensorId, ExecError> {
    let t = graph
        .tensor_by_name(name)
        .ok_or_else(|| ExecError::NoSuchTensor(name.to_string()))?;
    let decl = graph.tensor(t);
    let shape: Vec<usize> = decl.shape.iter().map(|&d| d as usize).collect();
    if value.dtype() != decl.dtype
        || value.shape != shape
        || value.len() != shape.iter().product::<usize>()
    {
        return Err(ExecError::BindMismatch {
            tensor: name.to_string(),
            found: format!(
                "{} {:?} ({} elements)",
                value.dtype().as_str(),
                value.shape,
                value.len()
            ),
            expected: format!("{} {:?}", decl.dtype.as_str(), shape),
        });
    }
    Ok(t)
}

/// The bytes of tensor `d` stored at `(buf, off)`.
fn read_bytes<B: Backend>(
    backend: &mut B,
    d: &sgc_ir::Tensor,
    buf: BufferId,
    off: u64,
) -> Result<Vec<u8>, ExecError> {
    let numel: u64 = d.shape.iter().product();
    let mut bytes = vec![0u8; (numel * d.dtype.size()) as usize];
    backend.read(buf, off, &mut bytes)?;
    Ok(bytes)
}

fn host_tensor(
    d: &sgc_ir::Tensor,
    shape: Vec<usize>,
    bytes: &[u8],
) -> Result<HostTensor, ExecError> {
    HostTensor::from_bytes(d.dtype, shape, bytes)
        .ok_or_else(|| ExecError::dtype(&d.name, d.dtype, "host", crate::host::HOST_DTYPES))
}

/// Parses and checks every op of `ops` before anything runs: its kernel (unknown types
/// refused by name), whether the backend has it, and every operand's dtype and shape.
/// One kernel per entry of `ops`.
pub(crate) fn check_ops<B: Backend>(
    graph: &Graph,
    ops: &[OpId],
    backend: &B,
) -> Result<Vec<Kernel>, ExecError> {
    let mut kernels: Vec<Option<Kernel>> = vec![None; graph.num_ops()];
    for &op in ops {
        if kernels[op.index()].is_none() {
            kernels[op.index()] = Some(check_op(graph, op, backend)?);
        }
    }
    Ok(ops
        .iter()
        .filter_map(|op| kernels[op.index()].clone())
        .collect())
}

fn check_op<B: Backend>(graph: &Graph, op: OpId, backend: &B) -> Result<Kernel, ExecError> {
    check_op_on(
        graph,
        op,
        &backend.name(),
        Support {
            kernel: |k: &Kernel| backend.supports(k),
            dtypes: |k: &Kernel, d: &[DType]| backend.supports_dtypes(k, d),
            holds: |d| backend.holds(d),
        },
    )
}

/// The checks of [`check_ops`] for one op, on a backend named `backend` that runs the
/// kernels `supports` accepts (also [`crate::coverage`], which has no backend to ask).
pub(crate) fn check_op_on(
    graph: &Graph,
    op: OpId,
    backend: &str,
    support: Support<
        impl Fn(&Kernel) -> bool,
        impl Fn(&Kernel, &[DType]) -> bool,
        impl Fn(DType) -> bool,
    >,
) -> Result<Kernel, ExecError> {
    let o = graph.op(op);
    let k = Kernel::from_op(graph, op).map_err(|e| match e {
        ExecError::UnknownOpType { op, op_type, .. } => ExecError::UnknownOpType {
            op,
            op_type,
            backend: backend.to_string(),
        },
        e => e,
    })?;
    if !(support.kernel)(&k) {
        return Err(ExecError::UnknownOpType {
            op: o.name.clone(),
            op_type: o.op_type.clone(),
            backend: backend.to_string(),
        });
    }
    let dtypes: Vec<DType> = o.inputs.iter().map(|&t| graph.tensor(t).dtype).collect();
    if !(support.dtypes)(&k, &dtypes) {
        let names: Vec<&str> = dtypes.iter().map(|d| d.as_str()).collect();
        return Err(ExecError::BadOperands {
            op: o.name.clone(),
            op_type: o.op_type.clone(),
            detail: Box::new(crate::error::KernelError::Operands(format!(
                "the {backend} backend does not run it on inputs of {}",
                names.join(", ")
            ))),
        });
    }
    for &t in o.inputs.iter().chain(&o.outputs) {
        let d = graph.tensor(t);
        if !(support.holds)(d.dtype) {
            let all: Vec<DType> = DType::ALL
                .into_iter()
                .filter(|&d| (support.holds)(d))
                .collect();
            return Err(ExecError::dtype(&d.name, d.dtype, backend, &all));
        }
    }
    let shape_only = |ts: &[TensorId]| {
        ts.iter()
            .map(|&t| operand(graph, t, BufferId(0), 0))
            .collect::<Vec<_>>()
    };
    shapes::check(&k, &shape_only(&o.inputs), &shape_only(&o.outputs)).map_err(|detail| {
        ExecError::BadOperands {
            op: o.name.clone(),
            op_type: o.op_type.clone(),
            detail: Box::new(detail),
        }
    })?;
    Ok(k)
}

/// What a backend runs, asked of each op by [`check_op_on`]: the kernel, the kernel on its
/// inputs' dtypes, and the dtypes it holds.
pub(crate) struct Support<K, D, H> {
    pub kernel: K,
    pub dtypes: D,
    pub holds: H,
}

/// Tensor `t` as an operand at `offset` in `buffer` (its dtype and shape, no view).
fn operand(graph: &Graph, t: TensorId, buffer: BufferId, offset: u64) -> Operand {
    let d = graph.tensor(t);
    Operand::new(
        buffer,
        offset,
        d.dtype,
        d.shape.iter().map(|&x| x as usize).collect(),
    )
}

/// Tensor `t` as the backend reads it, its storage at `offset` in `buffer`: a view of
/// another storage carries the steps from that storage to `t` ([`crate::view`]).
pub(crate) fn placed_operand(
    graph: &Graph,
    t: TensorId,
    buffer: BufferId,
    offset: u64,
) -> Result<Operand, ExecError> {
    let mut op = operand(graph, t, buffer, offset);
    op.view = view::view_of(graph, t)?.map(Box::new);
    Ok(op)
}
