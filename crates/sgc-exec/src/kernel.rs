//! The op-type dispatch table: every op type the executor runs, parsed once with its
//! attributes into a [`Kernel`], and its operand shapes checked, before any step runs.
//!
//! The semantics (layouts, attributes, formulas) are those of the training builder
//! (`sgc_ir::train`, `docs/ops.md`). [`Kernel::from_op`] refuses an unknown op type by
//! name; [`Kernel::check_shapes`] refuses operands whose shapes or dtypes the kernel
//! would misread, so kernels index in bounds by construction.

use crate::ExecError;
use serde_json::{Map, Value};
use sgc_ir::ops::OpKind;
use sgc_ir::{Graph, OpId};

/// One op, ready to launch: its type and parsed attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum Kernel {
    /// `a [*, K] @ b [K, N]` (`b [N, K]` when `transpose_b`) -> `[*, N]`.
    MatMul {
        transpose_b: bool,
    },
    /// `p [*, M]^T @ q [*, N]` over the flattened leading rows -> `[M, N]`.
    MatMulTn,
    /// `op_a(a) [*, M, K] @ op_b(b) [*, K, N]` -> `[*, M, N]`.
    BatchedMatMul {
        transpose_a: bool,
        transpose_b: bool,
    },
    /// `x + bias` broadcast along `axis`.
    BiasAdd {
        axis: usize,
    },
    /// `dy` summed over every axis but `axis`.
    BiasAddGrad {
        axis: usize,
    },
    Add,
    Mul,
    Relu,
    /// `(y, dy) -> dy * (y > 0)`.
    ReluGrad,
    /// The tanh approximation of GELU.
    Gelu,
    /// `(x, dy) -> dy * gelu'(x)`.
    GeluGrad,
    /// `x [N, C, H, W]`, `w [O, C, kh, kw]` -> `[N, O, Ho, Wo]`.
    Conv2d {
        stride: usize,
        padding: usize,
    },
    /// `(dy, w) -> dx`.
    Conv2dGradInput {
        stride: usize,
        padding: usize,
    },
    /// `(x, dy) -> dw`.
    Conv2dGradWeight {
        stride: usize,
        padding: usize,
    },
    MaxPool2d {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// `(x, dy) -> dx`, the gradient routed to the first maximum of each window.
    MaxPool2dGrad {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    GlobalAvgPool,
    /// `dy [N, C] -> dx [N, C, H, W]`.
    GlobalAvgPoolGrad,
    /// `(x, gamma, beta) -> (y, mean, invstd)`, statistics over every axis but 1.
    BatchNorm {
        eps: f32,
    },
    /// `(x, gamma, mean, invstd, dy) -> (dx, dgamma, dbeta)`.
    BatchNormGrad,
    /// `(x, gamma, beta) -> (y, mean, rstd)` over the last axis.
    LayerNorm {
        eps: f32,
    },
    /// `(x, gamma, mean, rstd, dy) -> (dx, dgamma, dbeta)`.
    LayerNormGrad,
    /// Softmax over the last axis of `scale * x`, optionally causally masked.
    Softmax {
        scale: f32,
        causal: bool,
    },
    /// `(y, dy) -> scale * y * (dy - sum(dy * y))`.
    SoftmaxGrad {
        scale: f32,
    },
    /// `(ids [*], w [V, D]) -> [*, D]`.
    Embedding,
    /// `(ids [*], dy [*, D]) -> dw [V, D]`, rows accumulated in id order.
    EmbeddingGrad,
    /// A view (or a copy when the output has its own storage).
    Reshape,
    /// Contiguous copy with `out.shape[i] = x.shape[perm[i]]`.
    Transpose {
        perm: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    /// `x[.., start..end, ..]` along `axis`.
    Slice {
        axis: usize,
        start: usize,
        end: usize,
    },
    Upsample2x,
    /// Sum over each 2x2 block.
    Upsample2xGrad,
    /// Mean over rows of `logsumexp(logits) - logits[label]`.
    CrossEntropy,
    /// `(softmax(logits) - onehot(label)) / rows`.
    CrossEntropyGrad,
    /// `param -= lr * grad`, in place; no outputs.
    SgdUpdate {
        lr: f32,
    },
}

/// The one table of the op kinds the executor runs: both backends implement a kernel for
/// each (the CUDA backend with the limits its `supports` names), and [`Kernel::from_op`]
/// refuses every other kind by name. A test checks the table against `from_op`.
pub const KERNELS: &[OpKind] = &[
    OpKind::MatMul,
    OpKind::MatMulTn,
    OpKind::BatchedMatMul,
    OpKind::BiasAdd,
    OpKind::BiasAddGrad,
    OpKind::Add,
    OpKind::Mul,
    OpKind::Relu,
    OpKind::ReluGrad,
    OpKind::Gelu,
    OpKind::GeluGrad,
    OpKind::Conv2d,
    OpKind::Conv2dGradInput,
    OpKind::Conv2dGradWeight,
    OpKind::MaxPool2d,
    OpKind::MaxPool2dGrad,
    OpKind::GlobalAvgPool,
    OpKind::GlobalAvgPoolGrad,
    OpKind::BatchNorm,
    OpKind::BatchNormGrad,
    OpKind::LayerNorm,
    OpKind::LayerNormGrad,
    OpKind::Softmax,
    OpKind::SoftmaxGrad,
    OpKind::Embedding,
    OpKind::EmbeddingGrad,
    OpKind::Reshape,
    OpKind::Transpose,
    OpKind::Concat,
    OpKind::Slice,
    OpKind::Upsample2x,
    OpKind::Upsample2xGrad,
    OpKind::CrossEntropy,
    OpKind::CrossEntropyGrad,
    OpKind::SgdUpdate,
];

/// Reads attributes of one op, with errors naming it.
struct Attrs<'a> {
    op: &'a str,
    op_type: &'a str,
    map: Option<&'a Map<String, Value>>,
}

impl Attrs<'_> {
    fn err(&self, detail: String) -> ExecError {
        ExecError::BadAttr {
            op: self.op.to_string(),
            op_type: self.op_type.to_string(),
            detail,
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.map.and_then(|m| m.get(key))
    }

    fn usize(&self, key: &str) -> Result<usize, ExecError> {
        self.get(key)
            .and_then(Value::as_u64)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| self.err(format!("`{key}` must be a non-negative integer")))
    }

    fn f32_or(&self, key: &str, default: Option<f64>) -> Result<f32, ExecError> {
        match self.get(key) {
            Some(v) => v.as_f64().map(|f| f as f32),
            None => default.map(|f| f as f32),
        }
        .filter(|f| f.is_finite())
        .ok_or_else(|| self.err(format!("`{key}` must be a finite number")))
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool, ExecError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(format!("`{key}` must be true or false"))),
        }
    }

    fn perm(&self) -> Result<Vec<usize>, ExecError> {
        let arr = self.get("perm").and_then(Value::as_array);
        let perm: Option<Vec<usize>> = arr.and_then(|a| {
            a.iter()
                .map(|v| v.as_u64().and_then(|u| usize::try_from(u).ok()))
                .collect()
        });
        perm.ok_or_else(|| self.err("`perm` must be an array of axes".to_string()))
    }

    fn window(&self) -> Result<(usize, usize, usize), ExecError> {
        Ok((
            self.usize("kernel")?,
            self.usize("stride")?,
            self.usize("padding")?,
        ))
    }
}

impl Kernel {
    /// Parses op `op` of `graph` into a kernel: an unknown op type or a malformed
    /// attribute is an error naming the op.
    pub fn from_op(graph: &Graph, op: OpId) -> Result<Kernel, ExecError> {
        let o = graph.op(op);
        let a = Attrs {
            op: &o.name,
            op_type: &o.op_type,
            map: o.attrs.as_ref(),
        };
        let conv = || -> Result<(usize, usize), ExecError> {
            Ok((a.usize("stride")?, a.usize("padding")?))
        };
        let unknown = || ExecError::UnknownOpType {
            op: o.name.clone(),
            op_type: o.op_type.clone(),
            backend: "any".to_string(),
        };
        use OpKind as K;
        Ok(match o.kind.ok_or_else(unknown)? {
            K::MatMul => Kernel::MatMul {
                transpose_b: a.bool_or("transpose_b", false)?,
            },
            K::MatMulTn => Kernel::MatMulTn,
            K::BatchedMatMul => Kernel::BatchedMatMul {
                transpose_a: a.bool_or("transpose_a", false)?,
                transpose_b: a.bool_or("transpose_b", false)?,
            },
            K::BiasAdd => Kernel::BiasAdd {
                axis: a.usize("axis")?,
            },
            K::BiasAddGrad => Kernel::BiasAddGrad {
                axis: a.usize("axis")?,
            },
            K::Add => Kernel::Add,
            K::Mul => Kernel::Mul,
            K::Relu => Kernel::Relu,
            K::ReluGrad => Kernel::ReluGrad,
            K::Gelu => Kernel::Gelu,
            K::GeluGrad => Kernel::GeluGrad,
            K::Conv2d => {
                let (stride, padding) = conv()?;
                Kernel::Conv2d { stride, padding }
            }
            K::Conv2dGradInput => {
                let (stride, padding) = conv()?;
                Kernel::Conv2dGradInput { stride, padding }
            }
            K::Conv2dGradWeight => {
                let (stride, padding) = conv()?;
                Kernel::Conv2dGradWeight { stride, padding }
            }
            K::MaxPool2d => {
                let (kernel, stride, padding) = a.window()?;
                Kernel::MaxPool2d {
                    kernel,
                    stride,
                    padding,
                }
            }
            K::MaxPool2dGrad => {
                let (kernel, stride, padding) = a.window()?;
                Kernel::MaxPool2dGrad {
                    kernel,
                    stride,
                    padding,
                }
            }
            K::GlobalAvgPool => Kernel::GlobalAvgPool,
            K::GlobalAvgPoolGrad => Kernel::GlobalAvgPoolGrad,
            K::BatchNorm => Kernel::BatchNorm {
                eps: a.f32_or("eps", Some(1e-5))?,
            },
            K::BatchNormGrad => Kernel::BatchNormGrad,
            K::LayerNorm => Kernel::LayerNorm {
                eps: a.f32_or("eps", Some(1e-5))?,
            },
            K::LayerNormGrad => Kernel::LayerNormGrad,
            K::Softmax => Kernel::Softmax {
                scale: a.f32_or("scale", Some(1.0))?,
                causal: a.bool_or("causal", false)?,
            },
            K::SoftmaxGrad => Kernel::SoftmaxGrad {
                scale: a.f32_or("scale", Some(1.0))?,
            },
            K::Embedding => Kernel::Embedding,
            K::EmbeddingGrad => Kernel::EmbeddingGrad,
            K::Reshape => Kernel::Reshape,
            K::Transpose => Kernel::Transpose { perm: a.perm()? },
            K::Concat => Kernel::Concat {
                axis: a.usize("axis")?,
            },
            K::Slice => Kernel::Slice {
                axis: a.usize("axis")?,
                start: a.usize("start")?,
                end: a.usize("end")?,
            },
            K::Upsample2x => Kernel::Upsample2x,
            K::Upsample2xGrad => Kernel::Upsample2xGrad,
            K::CrossEntropy => Kernel::CrossEntropy,
            K::CrossEntropyGrad => Kernel::CrossEntropyGrad,
            K::SgdUpdate => Kernel::SgdUpdate {
                lr: a.f32_or("lr", None)?,
            },
            _ => return Err(unknown()),
        })
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

    /// The op kind this kernel runs.
    pub fn kind(&self) -> OpKind {
        use Kernel::*;
        use OpKind as K;
        match self {
            MatMul { .. } => K::MatMul,
            MatMulTn => K::MatMulTn,
            BatchedMatMul { .. } => K::BatchedMatMul,
            BiasAdd { .. } => K::BiasAdd,
            BiasAddGrad { .. } => K::BiasAddGrad,
            Add => K::Add,
            Mul => K::Mul,
            Relu => K::Relu,
            ReluGrad => K::ReluGrad,
            Gelu => K::Gelu,
            GeluGrad => K::GeluGrad,
            Conv2d { .. } => K::Conv2d,
            Conv2dGradInput { .. } => K::Conv2dGradInput,
            Conv2dGradWeight { .. } => K::Conv2dGradWeight,
            MaxPool2d { .. } => K::MaxPool2d,
            MaxPool2dGrad { .. } => K::MaxPool2dGrad,
            GlobalAvgPool => K::GlobalAvgPool,
            GlobalAvgPoolGrad => K::GlobalAvgPoolGrad,
            BatchNorm { .. } => K::BatchNorm,
            BatchNormGrad => K::BatchNormGrad,
            LayerNorm { .. } => K::LayerNorm,
            LayerNormGrad => K::LayerNormGrad,
            Softmax { .. } => K::Softmax,
            SoftmaxGrad { .. } => K::SoftmaxGrad,
            Embedding => K::Embedding,
            EmbeddingGrad => K::EmbeddingGrad,
            Reshape => K::Reshape,
            Transpose { .. } => K::Transpose,
            Concat { .. } => K::Concat,
            Slice { .. } => K::Slice,
            Upsample2x => K::Upsample2x,
            Upsample2xGrad => K::Upsample2xGrad,
            CrossEntropy => K::CrossEntropy,
            CrossEntropyGrad => K::CrossEntropyGrad,
            SgdUpdate { .. } => K::SgdUpdate,
        }
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
            assert_eq!(
                parsed.is_ok(),
                KERNELS.contains(&kind),
                "{}: {parsed:?}",
                kind.name()
            );
            if let Ok(k) = parsed {
                assert_eq!(k.kind(), kind);
                assert_eq!(k.name(), kind.name());
            } else {
                assert!(matches!(parsed, Err(ExecError::UnknownOpType { .. })));
            }
        }
        let g = one_op("not_an_op");
        assert!(matches!(
            Kernel::from_op(&g, OpId::new(0)),
            Err(ExecError::UnknownOpType { .. })
        ));
    }
}
