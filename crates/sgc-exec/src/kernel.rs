//! The op-type dispatch: every op type the executor runs, parsed once with its attributes
//! into a [`Kernel`], and its operand shapes checked, before any step runs.
//!
//! A [`Kernel`] is one op family's kernel ([`crate::ops`]): the family parses the op's
//! attributes, checks its operands and runs it in each backend; this module only routes.
//! The semantics (layouts, attributes, formulas) are those of the training builder
//! (`sgc_ir::train`, `docs/ops.md`) and of ATen for the exporter's ops.
//! [`Kernel::from_op`] refuses an unknown op type by name; [`crate::shapes::check`] refuses
//! operands whose shapes or dtypes the kernel would misread, so kernels index in bounds by
//! construction.

use crate::error::ExecError;
use crate::ops::{self, Cx, Family};
use sgc_ir::ops::OpKind;
use sgc_ir::{Graph, OpId};

pub use crate::ops::attention::Attention;
pub use crate::ops::conv::Conv;
pub use crate::ops::elementwise::{BinOp, Cmp, Elementwise, Unary};
pub use crate::ops::embedding::Embedding;
pub use crate::ops::linalg::Linalg;
pub use crate::ops::loss::Loss;
pub use crate::ops::math::{Math, MathBin, MathFn};
pub use crate::ops::norm::Norm;
pub use crate::ops::pool::{AvgDivisor, Pool};
pub use crate::ops::random::Random;
pub use crate::ops::reduce::Reduce;
pub use crate::ops::shape::Shape;

/// Declares [`FamilyKernel`] with one variant per family, in parse order: the first
/// family whose `parse` claims an op kind runs it.
macro_rules! families {
    ($($family:ident => $module:ident),* $(,)?) => {
        /// A family's kernel with its parsed attributes.
        #[derive(Clone, Debug, PartialEq)]
        pub enum FamilyKernel {
            $($family($family),)*
        }

        $(impl From<$family> for FamilyKernel {
            fn from(k: $family) -> FamilyKernel {
                FamilyKernel::$family(k)
            }
        })*

        impl FamilyKernel {
            /// The family's answers about this kernel.
            pub fn family(&self) -> &dyn Family {
                match self {
                    $(FamilyKernel::$family(k) => k,)*
                }
            }
        }

        /// The kernel of `kind`, from the first family that claims it.
        fn parse(kind: OpKind, cx: &Cx) -> Result<Option<FamilyKernel>, ExecError> {
            $(if let Some(k) = ops::$module::parse(kind, cx)? {
                return Ok(Some(FamilyKernel::$family(k)));
            })*
            Ok(None)
        }

        /// Every family's table of the op kinds it runs.
        const TABLES: &[&[(OpKind, bool)]] = &[$(ops::$module::KINDS,)*];
    };
}

/// One op, ready to launch: the op kind it was parsed from (its name in both backends and
/// in errors) and its family's kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    kind: OpKind,
    op: FamilyKernel,
}

families! {
    // Before `Elementwise`: it claims `mul.Tensor` by a boolean mask.
    Random => random,
    Elementwise => elementwise,
    Math => math,
    Linalg => linalg,
    Conv => conv,
    Pool => pool,
    Norm => norm,
    Loss => loss,
    Embedding => embedding,
    Shape => shape,
    Reduce => reduce,
    Attention => attention,
}

/// The op kinds the executor runs, and whether the CUDA backend runs them too (the CPU
/// backend runs all; CUDA those marked, with the limits `cuda_backend::runs` names): the
/// union of the families' tables. [`crate::coverage`] lists a graph's ops outside them.
pub fn kernels() -> impl Iterator<Item = (OpKind, bool)> {
    TABLES.iter().flat_map(|t| t.iter().copied())
}

impl Kernel {
    /// Parses op `op` of `graph` into a kernel: an unknown op type or a malformed
    /// attribute is an error naming the op.
    pub fn from_op(graph: &Graph, op: OpId) -> Result<Kernel, ExecError> {
        let o = graph.op(op);
        let unknown = || ExecError::UnknownOpType {
            op: o.name.clone(),
            op_type: o.op_type.clone(),
            backend: "any".to_string(),
        };
        let kind = o.kind.ok_or_else(unknown)?;
        let op = parse(kind, &Cx::new(graph, o))?.ok_or_else(unknown)?;
        Ok(Kernel { kind, op })
    }

    /// The kernel of op kind `kind` with attributes already parsed (`op` must be the
    /// family kernel `kind` parses to; tests and backends' rewrites build kernels this way).
    pub fn new(kind: OpKind, op: impl Into<FamilyKernel>) -> Kernel {
        Kernel {
            kind,
            op: op.into(),
        }
    }

    /// The same op kind running another kernel of its family (a backend's rewrite).
    pub fn with_op(&self, op: impl Into<FamilyKernel>) -> Kernel {
        Kernel::new(self.kind, op)
    }

    /// The family's kernel.
    pub fn op(&self) -> &FamilyKernel {
        &self.op
    }

    /// The family's answers about this kernel.
    pub fn family(&self) -> &dyn Family {
        self.op.family()
    }

    /// Whether the kernel stays correct when its output is the very buffer of one of its
    /// inputs (an in-place pair of the plan): the op vocabulary's `in_place`.
    pub fn runs_in_place(&self) -> bool {
        self.kind().spec().in_place
    }

    /// The op type this kernel runs (its name in both backends).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The op kind this kernel was parsed from.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// Whether the CUDA backend has a kernel for this op kind (its family's table).
    pub fn on_cuda(&self) -> bool {
        let kind = self.kind();
        kernels().any(|(k, cuda)| cuda && k == kind)
    }

    /// Whether the kernel writes its first input in place and has no outputs
    /// (`sgd_update`, `aten.copy_`).
    pub fn writes_first_input(&self) -> bool {
        self.family().arity().1 == 0
    }

    /// Whether the kernel only re-reads its input (reshape, transpose, expand, slice,
    /// split, unbind): a view, moving no data, when its outputs share the input's storage.
    pub fn is_view_like(&self) -> bool {
        matches!(&self.op, FamilyKernel::Shape(s) if s.is_view_like())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sgc_ir::{format, OpId};

    /// A one-op graph of type `op_type` with every attribute any kernel reads.
    fn one_op(op_type: &str) -> Graph {
        let text = json!({
            "format": "sgc-graph", "version": 1,
            "tensors": [{"name": "x", "dtype": "f32", "shape": [2, 2], "kind": "input"},
                        {"name": "y", "dtype": "f32", "shape": [2, 2]}],
            "ops": [{"name": "op", "op": op_type, "inputs": ["x"], "outputs": ["y"],
                     "recomputable": OpKind::parse(op_type).is_none_or(|k| k.spec().recomputable()),
                     "attrs": {"stride": 1, "padding": 0, "kernel": 1, "axis": 0,
                               "perm": [1, 0], "start": 0, "end": 1, "lr": 0.1}}],
            "outputs": ["y"]
        });
        format::from_str(&text.to_string()).unwrap()
    }

    #[test]
    fn the_kernel_table_is_what_from_op_accepts() {
        for &kind in OpKind::ALL {
            let g = one_op(kind.name());
            let parsed = Kernel::from_op(&g, OpId::new(0));
            // Attributes the one-op graph lacks are a `BadAttr`: the kind has a kernel.
            let implemented = !matches!(parsed, Err(ExecError::UnknownOpType { .. }));
            let listed = kernels().any(|(k, _)| k == kind);
            assert_eq!(implemented, listed, "{}: {parsed:?}", kind.name());
            if let Ok(k) = &parsed {
                assert_eq!(k.kind(), kind, "a kernel keeps the kind it was parsed from");
            }
        }
        let g = one_op("not_an_op");
        assert!(matches!(
            Kernel::from_op(&g, OpId::new(0)),
            Err(ExecError::UnknownOpType { .. })
        ));
    }
}
