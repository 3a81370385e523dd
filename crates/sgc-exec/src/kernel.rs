//! The op-type dispatch table: every op type the executor runs, parsed once with its
//! attributes into a [`Kernel`], and its operand shapes checked, before any step runs.
//!
//! The semantics (layouts, attributes, formulas) are those of the training builder
//! (`sgc_ir::train`, `docs/ops.md`). [`Kernel::from_op`] refuses an unknown op type by
//! name; [`Kernel::check_shapes`] refuses operands whose shapes or dtypes the kernel
//! would misread, so kernels index in bounds by construction.

use crate::ExecError;
use serde_json::{Map, Value};
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

/// Every op type the executor knows, in the order of [`Kernel`]'s variants.
pub const OP_TYPES: &[&str] = &[
    "matmul",
    "matmul_tn",
    "batched_matmul",
    "bias_add",
    "bias_add_grad",
    "add",
    "mul",
    "relu",
    "relu_grad",
    "gelu",
    "gelu_grad",
    "conv2d",
    "conv2d_grad_input",
    "conv2d_grad_weight",
    "max_pool2d",
    "max_pool2d_grad",
    "global_avg_pool",
    "global_avg_pool_grad",
    "batch_norm",
    "batch_norm_grad",
    "layer_norm",
    "layer_norm_grad",
    "softmax",
    "softmax_grad",
    "embedding",
    "embedding_grad",
    "reshape",
    "transpose",
    "concat",
    "slice",
    "upsample_nearest2x",
    "upsample_nearest2x_grad",
    "cross_entropy",
    "cross_entropy_grad",
    "sgd_update",
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
        Ok(match o.op_type.as_str() {
            "matmul" => Kernel::MatMul {
                transpose_b: a.bool_or("transpose_b", false)?,
            },
            "matmul_tn" => Kernel::MatMulTn,
            "batched_matmul" => Kernel::BatchedMatMul {
                transpose_a: a.bool_or("transpose_a", false)?,
                transpose_b: a.bool_or("transpose_b", false)?,
            },
            "bias_add" => Kernel::BiasAdd {
                axis: a.usize("axis")?,
            },
            "bias_add_grad" => Kernel::BiasAddGrad {
                axis: a.usize("axis")?,
            },
            "add" => Kernel::Add,
            "mul" => Kernel::Mul,
            "relu" => Kernel::Relu,
            "relu_grad" => Kernel::ReluGrad,
            "gelu" => Kernel::Gelu,
            "gelu_grad" => Kernel::GeluGrad,
            "conv2d" => {
                let (stride, padding) = conv()?;
                Kernel::Conv2d { stride, padding }
            }
            "conv2d_grad_input" => {
                let (stride, padding) = conv()?;
                Kernel::Conv2dGradInput { stride, padding }
            }
            "conv2d_grad_weight" => {
                let (stride, padding) = conv()?;
                Kernel::Conv2dGradWeight { stride, padding }
            }
            "max_pool2d" => {
                let (kernel, stride, padding) = a.window()?;
                Kernel::MaxPool2d {
                    kernel,
                    stride,
                    padding,
                }
            }
            "max_pool2d_grad" => {
                let (kernel, stride, padding) = a.window()?;
                Kernel::MaxPool2dGrad {
                    kernel,
                    stride,
                    padding,
                }
            }
            "global_avg_pool" => Kernel::GlobalAvgPool,
            "global_avg_pool_grad" => Kernel::GlobalAvgPoolGrad,
            "batch_norm" => Kernel::BatchNorm {
                eps: a.f32_or("eps", Some(1e-5))?,
            },
            "batch_norm_grad" => Kernel::BatchNormGrad,
            "layer_norm" => Kernel::LayerNorm {
                eps: a.f32_or("eps", Some(1e-5))?,
            },
            "layer_norm_grad" => Kernel::LayerNormGrad,
            "softmax" => Kernel::Softmax {
                scale: a.f32_or("scale", Some(1.0))?,
                causal: a.bool_or("causal", false)?,
            },
            "softmax_grad" => Kernel::SoftmaxGrad {
                scale: a.f32_or("scale", Some(1.0))?,
            },
            "embedding" => Kernel::Embedding,
            "embedding_grad" => Kernel::EmbeddingGrad,
            "reshape" => Kernel::Reshape,
            "transpose" => Kernel::Transpose { perm: a.perm()? },
            "concat" => Kernel::Concat {
                axis: a.usize("axis")?,
            },
            "slice" => Kernel::Slice {
                axis: a.usize("axis")?,
                start: a.usize("start")?,
                end: a.usize("end")?,
            },
            "upsample_nearest2x" => Kernel::Upsample2x,
            "upsample_nearest2x_grad" => Kernel::Upsample2xGrad,
            "cross_entropy" => Kernel::CrossEntropy,
            "cross_entropy_grad" => Kernel::CrossEntropyGrad,
            "sgd_update" => Kernel::SgdUpdate {
                lr: a.f32_or("lr", None)?,
            },
            other => {
                return Err(ExecError::UnknownOpType {
                    op: o.name.clone(),
                    op_type: other.to_string(),
                    backend: "any".to_string(),
                })
            }
        })
    }

    /// The op type this kernel runs (its name in both backends).
    /// Whether the kernel stays correct when its output is the very buffer of one of its
    /// inputs (an in-place pair of the plan): element-wise kernels, and `softmax_grad`,
    /// whose row sum is read before the row is written.
    pub fn runs_in_place(&self) -> bool {
        matches!(
            self,
            Kernel::BiasAdd { .. }
                | Kernel::Add
                | Kernel::Mul
                | Kernel::Relu
                | Kernel::ReluGrad
                | Kernel::Gelu
                | Kernel::GeluGrad
                | Kernel::SoftmaxGrad { .. }
        )
    }

    pub fn name(&self) -> &'static str {
        OP_TYPES[self.index()]
    }

    fn index(&self) -> usize {
        use Kernel::*;
        match self {
            MatMul { .. } => 0,
            MatMulTn => 1,
            BatchedMatMul { .. } => 2,
            BiasAdd { .. } => 3,
            BiasAddGrad { .. } => 4,
            Add => 5,
            Mul => 6,
            Relu => 7,
            ReluGrad => 8,
            Gelu => 9,
            GeluGrad => 10,
            Conv2d { .. } => 11,
            Conv2dGradInput { .. } => 12,
            Conv2dGradWeight { .. } => 13,
            MaxPool2d { .. } => 14,
            MaxPool2dGrad { .. } => 15,
            GlobalAvgPool => 16,
            GlobalAvgPoolGrad => 17,
            BatchNorm { .. } => 18,
            BatchNormGrad => 19,
            LayerNorm { .. } => 20,
            LayerNormGrad => 21,
            Softmax { .. } => 22,
            SoftmaxGrad { .. } => 23,
            Embedding => 24,
            EmbeddingGrad => 25,
            Reshape => 26,
            Transpose { .. } => 27,
            Concat { .. } => 28,
            Slice { .. } => 29,
            Upsample2x => 30,
            Upsample2xGrad => 31,
            CrossEntropy => 32,
            CrossEntropyGrad => 33,
            SgdUpdate { .. } => 34,
        }
    }
}
