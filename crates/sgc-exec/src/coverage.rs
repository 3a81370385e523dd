//! Which ops of a graph a backend cannot run, decided without the device: every op goes
//! through the checks the executor makes before the first step ([`crate::runner`]: its
//! kernel parsed, the backend's `supports`, operand dtypes and shapes), with the backend's
//! own `supports` answer ([`crate::cuda_backend::runs`] for CUDA, the function the real
//! backend calls), so a graph this lists nothing for passes those checks on the device too.
//! `sgc inspect FILE --device cuda` prints it; CI checks it is empty for the zoo and the
//! corpus on both backends.

use crate::backend::Backend;
use crate::cpu_backend::CpuBackend;
use crate::runner::{check_op_on, Support};
use serde::Serialize;
use sgc_ir::Graph;

pub use crate::left_out::{why_left_out, LEFT_OUT};

/// A backend, by what its kernels are known to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Cpu,
    Cuda,
}

impl Target {
    /// Its name in reports and errors (`cpu`, `cuda`).
    pub fn name(self) -> &'static str {
        match self {
            Target::Cpu => "cpu",
            Target::Cuda => "cuda",
        }
    }
}

/// One op the backend cannot run, and the executor's reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gap {
    pub op: String,
    pub op_type: String,
    pub reason: String,
}

/// Every op of `graph` that `target` cannot run, in graph order (empty: it runs them all).
pub fn gaps(graph: &Graph, target: Target) -> Vec<Gap> {
    let cpu = CpuBackend::new();
    let support = || Support {
        kernel: |k: &crate::Kernel| match target {
            Target::Cpu => cpu.supports(k),
            Target::Cuda => crate::cuda_backend::runs(k),
        },
        dtypes: |k: &crate::Kernel, d: &[sgc_ir::DType]| match target {
            Target::Cpu => cpu.supports_dtypes(k, d),
            Target::Cuda => crate::cuda_backend::runs_dtypes(k, d),
        },
        holds: |d| match target {
            Target::Cpu => cpu.holds(d),
            Target::Cuda => crate::cuda_backend::holds(d),
        },
    };
    graph
        .op_ids()
        .filter_map(|id| {
            let err = check_op_on(graph, id, target.name(), support()).err()?;
            let o = graph.op(id);
            Some(Gap {
                op: o.name.clone(),
                op_type: o.op_type.clone(),
                reason: err.to_string(),
            })
        })
        .collect()
}

/// The gaps per op type, `(op type, how many ops)`, in the order each type first appears.
pub fn per_type(gaps: &[Gap]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for g in gaps {
        match out.iter_mut().find(|(t, _)| *t == g.op_type) {
            Some((_, n)) => *n += 1,
            None => out.push((g.op_type.clone(), 1)),
        }
    }
    out
}
