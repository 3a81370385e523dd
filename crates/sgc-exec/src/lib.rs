//! sgc-exec: run a training-step graph, planned or not, and measure it.
//!
//! - [`Backend`] (in [`backend`]): the device abstraction, implemented by the CPU reference
//!   backend ([`CpuBackend`], `cpu_backend/`) and the CUDA backend ([`CudaBackend`],
//!   `cuda_backend/`, behind the `cuda` feature; without it a stand-in returns an error).
//! - [`ops`]: the op families (linalg, elementwise, conv, pool, norm, loss, embedding,
//!   shape, reduce, random). Each owns its ops: the kernel enum, attribute parsing and
//!   operand checks; `cpu_backend/<family>.rs` and `cuda_backend/<family>.rs` run them.
//!   [`Kernel`] (in [`kernel`]) routes an op to its family; an unknown op type is refused by
//!   name before anything runs.
//! - [`runner`]: the run loop both executors share ([`runner::Runner`]: binding inputs and
//!   parameters by name, steps, reading outputs, gradients and the loss), over a
//!   [`runner::Schedule`] that says what differs.
//! - [`Executor`]: replays a verified `sgc_plan_format::Plan` and reports measured memory
//!   and time ([`RunReport`]); a plan's offloads are copies to a host pool and back between
//!   steps (`offload`). This crate depends on the plan format and its verifier, never on
//!   the planner: the unplanned run is the plan of strategy `none`, made (like any plan)
//!   by the caller; the facade's `sgc::runner` plans and runs in one call.
//! - [`dtr`]: run-time DTR (MegEngine's dynamic rematerialisation): [`DtrExecutor`] runs
//!   steps with eviction decided while they run, on a pool allocator with defragmentation;
//!   [`dtr::Simulator`] is the same engine on a clock, for graphs too big to run here.
//! - [`coverage`]: the ops of a graph a backend cannot run, known without its device.
//! - [`init`]: deterministic, seeded values for every input and parameter.
//! - [`timing`]: step times that mean something (warm-up, alternation, medians), planned
//!   vs unplanned, and each op's measured time written into the graph as `time_us`.

pub mod backend;
pub mod coverage;
pub mod cpu_backend;
pub mod cuda_backend;
pub mod dtr;
mod error;
pub mod executor;
pub mod host;
pub mod init;
pub mod kernel;
mod left_out;
mod offload;
pub mod operand;
pub mod ops;
pub mod real;
pub mod runner;
pub mod shapes;
pub mod timing;
mod view;
mod widening;
mod window;

pub use backend::{AllocStats, Backend, BufferId, HostCopy, Operand, View, ViewStep};
pub use cpu_backend::{CpuBackend, Products};
pub use cuda_backend::CudaBackend;
pub use dtr::{DtrExecutor, DtrOptions, DtrReport};
pub use error::{ExecError, KernelError};
pub use executor::{Executor, OpTime, RunReport};
pub use host::{HostData, HostTensor};
pub use kernel::{FamilyKernel, Kernel};
