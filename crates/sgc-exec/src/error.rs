//! The executor's error type: every variant names the op, tensor or device concerned.

use sgc_ir::DType;
use thiserror::Error;

/// What a kernel found wrong: in its operands (checked before anything runs, see
/// [`crate::shapes`]) or while running (an index out of range, a device call that failed).
/// The executor wraps it with the op or kernel concerned ([`ExecError::BadOperands`],
/// [`ExecError::Kernel`]).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum KernelError {
    /// The kernel takes another number of inputs or outputs.
    #[error("takes {expected} {what}, got {found}")]
    Arity {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    /// An operand of the wrong dtype.
    #[error("{what} must be {expected}, got {found}")]
    DType {
        what: String,
        expected: &'static str,
        found: &'static str,
    },
    /// An operand of the wrong shape.
    #[error("{what} has shape {found:?}, expected {expected:?}")]
    Shape {
        what: &'static str,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    /// Operand shapes that break the kernel's rule (described).
    #[error("{0}")]
    Operands(String),
    /// An integer index (a token id, a class, a pooling index) outside its range.
    #[error("index {index} at position {position} is outside 0..{bound}")]
    Index {
        index: i64,
        position: usize,
        bound: usize,
    },
    /// A device call (CUDA driver, NVRTC, cuBLAS) failed; the call and its error.
    #[error("{call}: {error}")]
    Device { call: String, error: String },
}

impl KernelError {
    /// A failed device call.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn device(call: impl Into<String>, error: impl std::fmt::Display) -> Self {
        KernelError::Device {
            call: call.into(),
            error: error.to_string(),
        }
    }
}

/// What went wrong while building or running an executor.
#[derive(Debug, Error)]
pub enum ExecError {
    /// The graph uses an op type no kernel implements; refused before anything runs.
    #[error(
        "op `{op}` has type `{op_type}`, which the {backend} backend does not implement{}",
        crate::left_out::why_left_out(op_type)
    )]
    UnknownOpType {
        op: String,
        op_type: String,
        backend: String,
    },
    /// An op's attributes are missing or malformed.
    #[error("op `{op}` ({op_type}): attribute {detail}")]
    BadAttr {
        op: String,
        op_type: String,
        detail: String,
    },
    /// An op's operand shapes or dtypes do not fit its kernel.
    #[error("op `{op}` ({op_type}): {detail}")]
    BadOperands {
        op: String,
        op_type: String,
        detail: Box<KernelError>,
    },
    /// A step of the plan failed; the cause says how.
    #[error("step {step} (op `{op}`): {source}")]
    Step {
        step: usize,
        op: String,
        source: Box<ExecError>,
    },
    /// A kernel failed while running (an index out of range, a device error).
    #[error("{backend} backend: {kernel}: {error}")]
    Kernel {
        backend: String,
        kernel: &'static str,
        error: Box<KernelError>,
    },
    /// A name given to `bind`/`read` is not a tensor of the graph.
    #[error("no tensor named `{0}` in the graph")]
    NoSuchTensor(String),
    /// A bound host tensor does not match the graph's declaration.
    #[error("tensor `{tensor}`: bound {found}, the graph declares {expected}")]
    BindMismatch {
        tensor: String,
        found: String,
        expected: String,
    },
    /// Only inputs and persistent tensors can be bound.
    #[error("tensor `{tensor}` is an activation ({kind}); only inputs, params, state and consts can be bound")]
    NotBindable { tensor: String, kind: String },
    /// A step was run before every input and persistent tensor was bound.
    #[error("tensor `{0}` ({1}) is not bound: bind it (or use sgc_exec::init) before running")]
    Unbound(String, String),
    /// A tensor read after a step is not resident then.
    #[error("tensor `{0}` is not resident when the step ends (only persistent tensors and graph outputs are)")]
    NotResident(String),
    /// The plan is not for this graph.
    #[error("plan: {0}")]
    Plan(#[from] sgc_plan_format::FormatError),
    /// The plan does not pass `sgc_plan_format::check`; nothing ran.
    #[error("plan refused before running: {0}")]
    PlanRejected(#[from] sgc_plan_format::CheckError),
    /// The plan has no arena offsets (planned with `arena: false`): the executor runs a
    /// plan as placed and places nothing itself.
    #[error("plan: it has no arena (it was made with `arena: false`): place its lifetimes first (`sgc::runner::planned` does), or plan with the arena on")]
    NoArena,
    /// The schedule cannot run under the memory model.
    #[error("schedule: {0}")]
    Schedule(#[from] sgc_ir::ScheduleError),
    /// The schedule or layout given is inconsistent with the graph.
    #[error("layout: {0}")]
    Layout(String),
    /// A dtype the backend's kernels do not hold.
    #[error("tensor `{tensor}` has dtype {detail}")]
    UnsupportedDType {
        tensor: String,
        /// The dtype, the backend and the dtypes it holds.
        detail: String,
    },
    /// A backend operation failed (out of range access, driver error, ...).
    #[error("{backend} backend: {detail}")]
    Backend { backend: String, detail: String },
    /// The CUDA backend was asked for but cannot be used.
    #[error("CUDA unavailable: {0}")]
    CudaUnavailable(String),
    /// Run-time DTR could not serve an allocation: nothing left to evict, and too few free
    /// bytes even after compaction.
    #[error("out of memory at op `{op}`{recomputing}: `{tensor}` {detail}")]
    OutOfMemory {
        op: String,
        /// ` (recomputing `X` for it)` when the request came from a recomputation.
        recomputing: String,
        tensor: String,
        detail: String,
    },
    /// Run-time DTR recomputed more than its limit within one step (the threshold or the
    /// memory is too low for the graph to make progress).
    #[error("run-time DTR thrashes at op `{op}`: {recomputes} recomputations in one step (the limit is {limit}); raise the threshold or the memory")]
    Thrashing {
        op: String,
        recomputes: u64,
        limit: u64,
    },
    /// The seeded initialiser cannot pick values for a tensor.
    #[error("cannot initialise tensor `{tensor}`: {detail}")]
    Init { tensor: String, detail: String },
}

impl ExecError {
    /// Tensor `tensor` of `dtype`, which `backend` (holding `holds`) cannot hold.
    pub(crate) fn dtype(tensor: &str, dtype: DType, backend: &str, holds: &[DType]) -> Self {
        let names: Vec<&str> = holds.iter().map(|d| d.as_str()).collect();
        ExecError::UnsupportedDType {
            tensor: tensor.to_string(),
            detail: format!(
                "{}, which the {backend} backend does not hold (it holds {})",
                dtype.as_str(),
                names.join(", ")
            ),
        }
    }

    pub(crate) fn backend(backend: &str, detail: impl Into<String>) -> Self {
        ExecError::Backend {
            backend: backend.to_string(),
            detail: detail.into(),
        }
    }
}
