//! sgc-exec: run a training-step graph, planned or not, and measure it.
//!
//! - [`Backend`] (in [`backend`]): the device abstraction, implemented by the CPU reference
//!   backend ([`CpuBackend`], `cpu_backend/`) and the CUDA backend ([`CudaBackend`],
//!   `cuda_backend/`, behind the `cuda` feature; without it a stand-in returns an error).
//! - [`Kernel`] (in [`kernel`]): the op-type dispatch table; unknown op types are refused
//!   by name before anything runs.
//! - [`Executor`]: runs an `sgc_plan::Plan` (the plan of strategy `none` when unplanned):
//!   binds inputs and parameters by name, runs steps, reads outputs and gradients, and
//!   reports measured memory and time ([`RunReport`]).
//! - [`dtr`]: run-time DTR (MegEngine's dynamic rematerialisation): [`DtrExecutor`] runs
//!   steps with eviction decided while they run, on a pool allocator with defragmentation;
//!   [`dtr::Simulator`] is the same engine on a clock, for graphs too big to run here.
//! - [`init`]: deterministic, seeded values for every input and parameter.

pub mod backend;
pub mod cpu_backend;
pub mod cuda_backend;
pub mod dtr;
mod error;
pub mod executor;
pub mod host;
pub mod init;
pub mod kernel;
pub mod operand;
pub mod ops;
pub mod runner;
pub mod shapes;
mod view;
mod window;

pub use backend::{AllocStats, Backend, BufferId, Operand, View, ViewStep};
pub use cpu_backend::CpuBackend;
pub use cuda_backend::CudaBackend;
pub use dtr::{DtrExecutor, DtrOptions, DtrReport};
pub use error::{ExecError, KernelError};
pub use executor::{Executor, OpTime, RunReport};
pub use host::{HostData, HostTensor};
pub use kernel::Kernel;
