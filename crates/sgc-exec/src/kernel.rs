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
    // Kernels of the PyTorch exporter's ops (`aten.*`, `sgc.*`) that the ones above do not
    // already compute (those lower onto them: `aten.relu` is `Relu`, `aten.mm` is `MatMul`,
    // `aten.view` is `Reshape`, ...). CPU only (see [`Kernel::on_cuda`]).
    /// `aten.convolution` with groups or a bias: `(x, w[, bias])`, `w [O, C/groups, kh, kw]`.
    ConvGrouped {
        stride: usize,
        padding: usize,
        groups: usize,
        bias: bool,
    },
    /// `aten.convolution_backward`: `(dy, x, w)` -> the results `mask` asks for, of
    /// `(dx, dw, dbias)`.
    ConvBackward {
        stride: usize,
        padding: usize,
        groups: usize,
        mask: [bool; 3],
    },
    /// `aten.native_dropout`: `x -> (x * mask / (1 - p), mask)`, `mask` (bool) one with
    /// probability `1 - p`, drawn like [`Kernel::Bernoulli`].
    Dropout {
        p: f64,
        seed: u64,
    },
    /// `aten.native_dropout_backward`: `(dy, mask) -> dy * mask * scale`.
    DropoutBackward {
        scale: f32,
    },
    /// `aten.mul.Tensor(x, mask)` with a boolean mask of `x`'s shape: `x * mask` (the
    /// recomputable half of a dropout the exporter split, see `sgc_trace.trace`).
    MaskMul,
    /// `aten.unbind`: one output per index of `axis`, the axis dropped.
    Unbind {
        axis: usize,
    },
    /// `aten.stack`: the inputs along a new axis `axis`.
    Stack {
        axis: usize,
    },
    /// A fresh tensor of zeros (`aten.zeros`, `aten.empty`, `new_empty_strided`: ATen
    /// leaves `empty` undefined; zeros is one definition, the same in every run); its
    /// `inputs` operands only lend a dtype.
    Zeros {
        inputs: usize,
    },
    /// `aten.copy`: `(dst, src) -> src` broadcast to `dst`'s shape (a functional copy).
    Assign,
    /// `aten.bernoulli.p`: ones with probability `p` (drawn from a counter-based stream
    /// keyed by `seed` and the run: the op is never recomputed, so planned and unplanned
    /// runs draw the same values).
    Bernoulli {
        p: f64,
        seed: u64,
    },
    /// `aten.native_batch_norm_backward`: `(dy, x, gamma, mean, invstd)` -> the results
    /// `mask` asks for, of `(dx, dgamma, dbeta)`.
    BatchNormBackward {
        mask: [bool; 3],
    },
    /// `sgc.batch_norm_update_stats`: `(running_mean, running_var, mean, invstd)` ->
    /// `(lerp(running_mean, mean, momentum), lerp(running_var, unbiased var, momentum))`.
    BatchNormUpdateStats {
        momentum: f32,
        eps: f32,
        count: u64,
    },
    /// `aten.copy_`: input 1 copied into input 0 (any dtype, byte for byte); no outputs.
    CopyInto,
    /// `x + value`, for f32 and i64 tensors.
    AddScalar {
        value: f64,
    },
    MulScalar {
        value: f32,
    },
    DivScalar {
        value: f32,
    },
    /// `(dy, x) -> dy * (x > threshold)`.
    ThresholdBackward {
        threshold: f32,
    },
    /// `x -> (y, indices)`: the maximum of each window and its flat index in the plane.
    MaxPool2dIndices {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// `(dy, x, indices) -> dx`: each window's gradient added at its index.
    MaxPool2dIndicesBackward {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// `count_include_pad` average pooling.
    AvgPool2d {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// `(dy, x) -> dx`.
    AvgPool2dBackward {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// Sum (or mean) over the contiguous axes `start..end`, accumulated in f64.
    Reduce {
        start: usize,
        end: usize,
        mean: bool,
    },
    /// Broadcast to the output shape (axes aligned on the right).
    Expand,
    /// Every element `value`.
    Fill {
        value: f32,
    },
    /// `(bias [N], a [M, K], b [K, N]) -> a @ b + bias` (`b [N, K]` when `transpose_b`).
    AddMm {
        transpose_b: bool,
    },
    /// Log-softmax over the last axis.
    LogSoftmax,
    /// `(dy, y) -> dy - exp(y) * sum(dy)` over the last axis.
    LogSoftmaxBackward,
    /// `(logp [N, C], target [N]) -> (loss [], total_weight [])`, mean over the targets
    /// that are not `ignore_index`.
    NllLoss {
        ignore_index: i64,
    },
    /// `(dloss [], logp [N, C], target [N], total_weight []) -> dlogp`.
    NllLossBackward {
        ignore_index: i64,
    },
    /// An element-wise function of one tensor.
    Pointwise(Unary),
    /// `(dy, v) -> dy * f'(...)`, `v` being the input or the output as [`Unary::grad`] says.
    PointwiseBackward(Unary),
    /// `(weight [V, D], ids [*]) -> [*, D]` (ATen's operand order).
    EmbeddingRows,
    /// `(dy [*, D], ids [*]) -> dw [V, D]`, the row `padding_idx` (if any) left zero.
    EmbeddingDenseBackward {
        padding_idx: Option<usize>,
    },
    /// `native_layer_norm_backward`: `(dy, x, mean, rstd, gamma, beta)` -> the results
    /// `mask` asks for, of `(dx, dgamma, dbeta)`.
    LayerNormBackward {
        mask: [bool; 3],
    },
    /// `_softmax_backward_data`: `(dy, y) -> y * (dy - sum(dy * y))` over the last axis.
    SoftmaxBackward,
    /// `aten.split`: consecutive slices of `size` along `axis`, one per output.
    Split {
        axis: usize,
        size: usize,
    },
    /// `a op b` with broadcasting (axes aligned on the right) to the output shape.
    Broadcast {
        op: BinOp,
    },
}

/// The operation of [`Kernel::Broadcast`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
}

/// The element-wise functions of [`Kernel::Pointwise`]. Adding one takes its op kinds in
/// the vocabulary (`sgc_ir::ops`) and, here, a variant with its kinds, formula and
/// derivative, plus its rows in [`KERNELS`]; a test checks every derivative against
/// finite differences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    Sigmoid,
    Tanh,
    Silu,
    Hardswish,
    Hardsigmoid,
    /// `x * Phi(x)` with the exact normal CDF (PyTorch's default `approximate="none"`).
    GeluErf,
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `ln(1 + e^x)`, `x` itself above 20 (ATen's default `beta = 1`, `threshold = 20`).
    Softplus,
}

impl Unary {
    pub const ALL: &'static [Unary] = &[
        Unary::Sigmoid,
        Unary::Tanh,
        Unary::Silu,
        Unary::Hardswish,
        Unary::Hardsigmoid,
        Unary::GeluErf,
        Unary::Mish,
        Unary::Softplus,
    ];

    /// The op kinds of the function and of its gradient.
    pub fn kinds(self) -> (OpKind, OpKind) {
        use OpKind as K;
        match self {
            Unary::Sigmoid => (K::AtenSigmoid, K::AtenSigmoidBackward),
            Unary::Tanh => (K::AtenTanh, K::AtenTanhBackward),
            Unary::Silu => (K::AtenSilu, K::AtenSiluBackward),
            Unary::Hardswish => (K::AtenHardswish, K::AtenHardswishBackward),
            Unary::Hardsigmoid => (K::AtenHardsigmoid, K::AtenHardsigmoidBackward),
            Unary::GeluErf => (K::AtenGelu, K::AtenGeluBackward),
            Unary::Mish => (K::AtenMish, K::AtenMishBackward),
            Unary::Softplus => (K::AtenSoftplus, K::AtenSoftplusBackward),
        }
    }

    /// The pointwise kernel of op kind `kind`, if it is one of these functions or gradients.
    fn kernel_of(kind: OpKind) -> Option<Kernel> {
        Unary::ALL.iter().find_map(|&u| match u.kinds() {
            (f, _) if f == kind => Some(Kernel::Pointwise(u)),
            (_, g) if g == kind => Some(Kernel::PointwiseBackward(u)),
            _ => None,
        })
    }

    /// Whether the backward op reads the forward output (`sigmoid`, `tanh`: ATen's
    /// `(grad_output, output)`) rather than the input (`(grad_output, self)`).
    pub fn grad_reads_output(self) -> bool {
        matches!(self, Unary::Sigmoid | Unary::Tanh)
    }

    pub fn apply(self, x: f32) -> f32 {
        match self {
            Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Unary::Tanh => x.tanh(),
            Unary::Silu => x / (1.0 + (-x).exp()),
            Unary::Hardswish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
            Unary::Hardsigmoid => (x / 6.0 + 0.5).clamp(0.0, 1.0),
            Unary::GeluErf => 0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2)),
            Unary::Mish => x * x.exp().ln_1p().tanh(),
            Unary::Softplus if x > 20.0 => x,
            Unary::Softplus => x.exp().ln_1p(),
        }
    }

    /// `dy * f'`, from the value the backward op reads.
    pub fn grad(self, dy: f32, v: f32) -> f32 {
        match self {
            Unary::Sigmoid => dy * (1.0 - v) * v,
            Unary::Tanh => dy * (1.0 - v * v),
            Unary::Silu => {
                let s = 1.0 / (1.0 + (-v).exp());
                dy * s * (1.0 + v * (1.0 - s))
            }
            Unary::Hardswish if v < -3.0 => 0.0,
            Unary::Hardswish if v <= 3.0 => dy * (v / 3.0 + 0.5),
            Unary::Hardswish => dy,
            Unary::Hardsigmoid if v > -3.0 && v < 3.0 => dy / 6.0,
            Unary::Hardsigmoid => 0.0,
            Unary::GeluErf => {
                let cdf = 0.5 * (1.0 + libm::erff(v * std::f32::consts::FRAC_1_SQRT_2));
                let pdf = (-0.5 * v * v).exp() * 0.398_942_3;
                dy * (cdf + v * pdf)
            }
            Unary::Mish => {
                let (t, s) = (v.exp().ln_1p().tanh(), 1.0 / (1.0 + (-v).exp()));
                dy * (t + v * s * (1.0 - t * t))
            }
            Unary::Softplus if v > 20.0 => dy,
            Unary::Softplus => dy / (1.0 + (-v).exp()),
        }
    }
}

/// The one table of the op kinds the executor runs, and whether the CUDA backend runs them
/// too (the CPU backend runs all; CUDA with the limits its `supports` names; an exporter op
/// that lowers onto a builder kernel, such as `aten.relu`, is marked CPU-only until a GPU
/// test covers it). [`Kernel::from_op`] refuses every other kind by name. A test checks the
/// table against `from_op`.
pub const KERNELS: &[(OpKind, bool)] = &[
    (OpKind::MatMul, true),
    (OpKind::MatMulTn, true),
    (OpKind::BatchedMatMul, true),
    (OpKind::BiasAdd, true),
    (OpKind::BiasAddGrad, true),
    (OpKind::Add, true),
    (OpKind::Mul, true),
    (OpKind::Relu, true),
    (OpKind::ReluGrad, true),
    (OpKind::Gelu, true),
    (OpKind::GeluGrad, true),
    (OpKind::Conv2d, true),
    (OpKind::Conv2dGradInput, true),
    (OpKind::Conv2dGradWeight, true),
    (OpKind::MaxPool2d, true),
    (OpKind::MaxPool2dGrad, true),
    (OpKind::GlobalAvgPool, true),
    (OpKind::GlobalAvgPoolGrad, true),
    (OpKind::BatchNorm, true),
    (OpKind::BatchNormGrad, true),
    (OpKind::LayerNorm, true),
    (OpKind::LayerNormGrad, true),
    (OpKind::Softmax, true),
    (OpKind::SoftmaxGrad, true),
    (OpKind::Embedding, true),
    (OpKind::EmbeddingGrad, true),
    (OpKind::Reshape, true),
    (OpKind::Transpose, true),
    (OpKind::Concat, true),
    (OpKind::Slice, true),
    (OpKind::Upsample2x, true),
    (OpKind::Upsample2xGrad, true),
    (OpKind::CrossEntropy, true),
    (OpKind::CrossEntropyGrad, true),
    (OpKind::SgdUpdate, true),
    (OpKind::AtenConvolution, true),
    (OpKind::AtenConvolutionBackward, false),
    (OpKind::AtenBatchNorm, true),
    (OpKind::AtenBatchNormBackward, false),
    (OpKind::BatchNormUpdateStats, false),
    (OpKind::AtenCopyInPlace, false),
    (OpKind::AtenAddTensor, false),
    (OpKind::AtenAddScalar, false),
    (OpKind::AtenMulScalar, false),
    (OpKind::AtenDivScalar, false),
    (OpKind::AtenRelu, true),
    (OpKind::AtenThresholdBackward, false),
    (OpKind::AtenMaxPool2d, false),
    (OpKind::AtenMaxPool2dBackward, false),
    (OpKind::AtenAvgPool2d, false),
    (OpKind::AtenAvgPool2dBackward, false),
    (OpKind::AtenSum, false),
    (OpKind::AtenMean, false),
    (OpKind::AtenView, true),
    (OpKind::AtenUnsafeView, true),
    (OpKind::AtenAlias, true),
    (OpKind::AtenClone, true),
    (OpKind::AtenExpand, false),
    (OpKind::AtenOnesLike, false),
    (OpKind::AtenT, true),
    (OpKind::AtenMm, true),
    (OpKind::AtenAddmm, false),
    (OpKind::AtenLogSoftmax, false),
    (OpKind::AtenLogSoftmaxBackward, false),
    (OpKind::AtenNllLoss, false),
    (OpKind::AtenNllLossBackward, false),
    (OpKind::AtenCat, true),
    (OpKind::AtenSlice, true),
    (OpKind::AtenSigmoid, false),
    (OpKind::AtenSigmoidBackward, false),
    (OpKind::AtenTanh, false),
    (OpKind::AtenTanhBackward, false),
    (OpKind::AtenSilu, false),
    (OpKind::AtenSiluBackward, false),
    (OpKind::AtenMish, false),
    (OpKind::AtenMishBackward, false),
    (OpKind::AtenSoftplus, false),
    (OpKind::AtenSoftplusBackward, false),
    (OpKind::AtenSubTensor, false),
    (OpKind::AtenEmptyLike, false),
    (OpKind::AtenBernoulli, false),
    (OpKind::AtenZeros, false),
    (OpKind::AtenDropout, false),
    (OpKind::AtenDropoutBackward, false),
    (OpKind::AtenUnbind, false),
    (OpKind::AtenStack, false),
    (OpKind::AtenEmpty, false),
    (OpKind::AtenNewEmptyStrided, false),
    (OpKind::AtenCopy, false),
    (OpKind::AtenFill, false),
    (OpKind::AtenHardswish, false),
    (OpKind::AtenHardswishBackward, false),
    (OpKind::AtenHardsigmoid, false),
    (OpKind::AtenHardsigmoidBackward, false),
    (OpKind::AtenGelu, false),
    (OpKind::AtenGeluBackward, false),
    (OpKind::AtenMulTensor, false),
    (OpKind::AtenDivTensor, false),
    (OpKind::AtenSplit, false),
    (OpKind::AtenEmbedding, false),
    (OpKind::AtenEmbeddingBackward, false),
    (OpKind::AtenLayerNormBackward, false),
    (OpKind::AtenSoftmaxBackward, false),
    (OpKind::AtenLayerNorm, true),
    (OpKind::AtenSoftmax, true),
    (OpKind::AtenSafeSoftmax, true),
    (OpKind::AtenBmm, true),
    (OpKind::AtenTranspose, true),
    (OpKind::AtenPermute, true),
    (OpKind::AtenUnsqueeze, true),
    (OpKind::AtenSqueezeDim, true),
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

    /// A square 2-d attribute: `[a, a]` or `a`.
    fn square(&self, key: &str) -> Result<usize, ExecError> {
        let bad = || {
            self.err(format!(
                "`{key}` must be one size or two equal sizes (only square windows run)"
            ))
        };
        match self.get(key) {
            Some(Value::Array(v)) => {
                let xs: Vec<u64> = v.iter().filter_map(Value::as_u64).collect();
                match xs.as_slice() {
                    [a] => Ok(*a as usize),
                    [a, b] if a == b => Ok(*a as usize),
                    _ => Err(bad()),
                }
            }
            Some(v) => v.as_u64().map(|a| a as usize).ok_or_else(bad),
            None => Err(bad()),
        }
    }

    fn square_or(&self, key: &str, default: usize) -> Result<usize, ExecError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Array(v)) if v.is_empty() => Ok(default),
            Some(_) => self.square(key),
        }
    }

    /// `output_mask` (absent: all three results).
    fn mask(&self) -> Result<[bool; 3], ExecError> {
        match self.get("output_mask") {
            None => Ok([true; 3]),
            Some(v) => {
                let m: Vec<bool> = v
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_bool).collect())
                    .unwrap_or_default();
                <[bool; 3]>::try_from(m)
                    .map_err(|_| self.err("`output_mask` must be three booleans".into()))
            }
        }
    }

    fn f64_of(&self, key: &str) -> Result<f64, ExecError> {
        self.get(key)
            .and_then(Value::as_f64)
            .filter(|f| f.is_finite())
            .ok_or_else(|| self.err(format!("`{key}` must be a finite number")))
    }

    fn i64_or(&self, key: &str, default: i64) -> Result<i64, ExecError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| self.err(format!("`{key}` must be an integer"))),
        }
    }

    /// Refuses an attribute whose value is not `expected` (a feature the kernel lacks).
    fn require(&self, key: &str, ok: impl Fn(&Value) -> bool, what: &str) -> Result<(), ExecError> {
        match self.get(key) {
            Some(v) if !ok(v) => Err(self.err(format!("`{key}` = {v}: only {what} runs"))),
            _ => Ok(()),
        }
    }

    /// An axis attribute of a rank-`rank` operand (negative counts from the end).
    fn axis_of(&self, key: &str, rank: usize) -> Result<usize, ExecError> {
        let d = self.i64_or(key, 0)?;
        sgc_ir::ops::axis(d, rank)
            .ok_or_else(|| self.err(format!("`{key}` is not an axis of a rank-{rank} operand")))
    }

    fn window(&self) -> Result<(usize, usize, usize), ExecError> {
        Ok((
            self.usize("kernel")?,
            self.usize("stride")?,
            self.usize("padding")?,
        ))
    }
}

/// A seed from an op's name (FNV-1a): the same op draws the same stream in every run.
fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The kernel of an exporter op (`None`: no kernel runs it).
fn aten(graph: &Graph, op: OpId, kind: OpKind, a: &Attrs) -> Result<Option<Kernel>, ExecError> {
    use OpKind as K;
    let o = graph.op(op);
    let rank = |i: usize| o.inputs.get(i).map_or(0, |&t| graph.tensor(t).shape.len());
    let shape = |i: usize| o.inputs.get(i).map(|&t| graph.tensor(t).shape.clone());
    let is_bool = |i: usize| {
        o.inputs
            .get(i)
            .is_some_and(|&t| graph.tensor(t).dtype == sgc_ir::DType::Bool)
    };
    let window = || -> Result<(usize, usize, usize), ExecError> {
        let kernel = a.square("kernel_size")?;
        let stride = a.square_or("stride", kernel)?;
        Ok((kernel, stride, a.square_or("padding", 0)?))
    };
    let groups = a.get("groups").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
    let conv = || -> Result<(usize, usize), ExecError> {
        a.require(
            "transposed",
            |v| v.as_bool() == Some(false),
            "a convolution that is not transposed",
        )?;
        a.require(
            "dilation",
            |v| {
                v.as_array()
                    .is_some_and(|d| d.iter().all(|x| x.as_u64() == Some(1)))
            },
            "dilation 1",
        )?;
        Ok((a.square("stride")?, a.square("padding")?))
    };
    Ok(Some(match kind {
        K::AtenConvolution => {
            let (stride, padding) = conv()?;
            let bias = o.inputs.len() > 2;
            if groups == 1 && !bias {
                Kernel::Conv2d { stride, padding }
            } else {
                Kernel::ConvGrouped {
                    stride,
                    padding,
                    groups,
                    bias,
                }
            }
        }
        K::AtenConvolutionBackward => {
            let (stride, padding) = conv()?;
            Kernel::ConvBackward {
                stride,
                padding,
                groups,
                mask: a.mask()?,
            }
        }
        K::AtenDropout => {
            a.require("train", |v| v.as_bool() == Some(true), "training mode")?;
            Kernel::Dropout {
                p: a.f64_of("p")?,
                seed: name_seed(&o.name),
            }
        }
        K::AtenDropoutBackward => Kernel::DropoutBackward {
            scale: a.f64_of("scale")? as f32,
        },
        K::AtenUnbind => Kernel::Unbind {
            axis: a.axis_of("dim", rank(0))?,
        },
        K::AtenStack => Kernel::Stack {
            axis: a.axis_of("dim", rank(0) + 1)?,
        },
        K::AtenZeros | K::AtenEmpty | K::AtenNewEmptyStrided => Kernel::Zeros {
            inputs: o.inputs.len(),
        },
        K::AtenCopy => Kernel::Assign,
        K::AtenBernoulli => Kernel::Bernoulli {
            p: a.f64_of("p")?,
            seed: name_seed(&o.name),
        },
        K::AtenBatchNorm => Kernel::BatchNorm {
            eps: a.f32_or("eps", Some(1e-5))?,
        },
        K::AtenBatchNormBackward => {
            a.require("train", |v| v.as_bool() == Some(true), "training mode")?;
            Kernel::BatchNormBackward { mask: a.mask()? }
        }
        K::BatchNormUpdateStats => Kernel::BatchNormUpdateStats {
            momentum: a.f32_or("momentum", None)?,
            eps: a.f32_or("eps", None)?,
            count: a
                .get("count")
                .and_then(Value::as_u64)
                .filter(|&c| c > 1)
                .ok_or_else(|| a.err("`count` must be an integer above 1".into()))?,
        },
        K::AtenCopyInPlace => Kernel::CopyInto,
        K::AtenSoftplus | K::AtenSoftplusBackward => {
            a.require("beta", |v| v.as_f64() == Some(1.0), "beta = 1")?;
            a.require("threshold", |v| v.as_f64() == Some(20.0), "threshold = 20")?;
            return Ok(Unary::kernel_of(kind));
        }
        K::AtenMulTensor | K::AtenAddTensor | K::AtenSubTensor
            if o.inputs.len() == 2 && (shape(0) != shape(1) || kind == K::AtenSubTensor) =>
        {
            a.require("alpha", |v| v.as_f64() == Some(1.0), "alpha = 1")?;
            let op = match kind {
                K::AtenMulTensor => BinOp::Mul,
                K::AtenSubTensor => BinOp::Sub,
                _ => BinOp::Add,
            };
            Kernel::Broadcast { op }
        }
        K::AtenAddTensor if o.inputs.len() == 2 && shape(0) == shape(1) => {
            a.require("alpha", |v| v.as_f64() == Some(1.0), "alpha = 1")?;
            Kernel::Add
        }
        K::AtenAddTensor | K::AtenAddScalar => Kernel::AddScalar {
            value: a.f64_of("other")?,
        },
        // `x - c` is `x + (-c)` in IEEE arithmetic, bit for bit.
        K::AtenSubTensor => Kernel::AddScalar {
            value: -a.f64_of("other")?,
        },
        K::AtenEmptyLike => Kernel::Fill { value: 0.0 },
        K::AtenFill => Kernel::Fill {
            value: a.f64_of("value")? as f32,
        },
        K::AtenMulScalar => Kernel::MulScalar {
            value: a.f64_of("other")? as f32,
        },
        K::AtenDivScalar => Kernel::DivScalar {
            value: a.f64_of("other")? as f32,
        },
        K::AtenRelu => Kernel::Relu,
        K::AtenThresholdBackward => Kernel::ThresholdBackward {
            threshold: a.f64_of("threshold")? as f32,
        },
        K::AtenMaxPool2d | K::AtenMaxPool2dBackward => {
            a.require(
                "dilation",
                |v| {
                    v.as_array()
                        .is_some_and(|d| d.iter().all(|x| x.as_u64() == Some(1)))
                },
                "dilation 1",
            )?;
            a.require(
                "ceil_mode",
                |v| v.as_bool() == Some(false),
                "ceil_mode = false",
            )?;
            let (kernel, stride, padding) = window()?;
            if kind == K::AtenMaxPool2d {
                Kernel::MaxPool2dIndices {
                    kernel,
                    stride,
                    padding,
                }
            } else {
                Kernel::MaxPool2dIndicesBackward {
                    kernel,
                    stride,
                    padding,
                }
            }
        }
        K::AtenAvgPool2d | K::AtenAvgPool2dBackward => {
            a.require(
                "ceil_mode",
                |v| v.as_bool() == Some(false),
                "ceil_mode = false",
            )?;
            a.require(
                "count_include_pad",
                |v| v.as_bool() == Some(true),
                "count_include_pad = true",
            )?;
            a.require("divisor_override", Value::is_null, "no divisor_override")?;
            let (kernel, stride, padding) = window()?;
            if kind == K::AtenAvgPool2d {
                Kernel::AvgPool2d {
                    kernel,
                    stride,
                    padding,
                }
            } else {
                Kernel::AvgPool2dBackward {
                    kernel,
                    stride,
                    padding,
                }
            }
        }
        K::AtenSum | K::AtenMean => {
            let r = rank(0);
            let dims: Vec<usize> = match a.get("dim") {
                None | Some(Value::Null) => (0..r).collect(),
                Some(Value::Array(v)) => v
                    .iter()
                    .map(|d| d.as_i64().and_then(|d| sgc_ir::ops::axis(d, r)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| a.err("`dim` must list axes of the operand".into()))?,
                Some(_) => return Err(a.err("`dim` must be a list of axes".into())),
            };
            let (start, end) = (
                dims.iter().copied().min().unwrap_or(0),
                dims.iter().copied().max().map_or(0, |m| m + 1),
            );
            if end - start != dims.len()
                || (end > start
                    && dims.iter().collect::<std::collections::BTreeSet<_>>().len() != dims.len())
            {
                return Err(a.err(format!(
                    "`dim` = {dims:?}: only a reduction over adjacent axes runs"
                )));
            }
            Kernel::Reduce {
                start,
                end,
                mean: kind == K::AtenMean,
            }
        }
        K::AtenView | K::AtenUnsafeView | K::AtenAlias | K::AtenClone => Kernel::Reshape,
        K::AtenExpand => Kernel::Expand,
        K::AtenOnesLike => Kernel::Fill { value: 1.0 },
        K::AtenT => Kernel::Transpose {
            perm: if rank(0) == 2 {
                vec![1, 0]
            } else {
                (0..rank(0)).collect()
            },
        },
        K::AtenMm => Kernel::MatMul { transpose_b: false },
        K::AtenAddmm => {
            a.require("beta", |v| v.as_f64() == Some(1.0), "beta = 1")?;
            a.require("alpha", |v| v.as_f64() == Some(1.0), "alpha = 1")?;
            Kernel::AddMm { transpose_b: false }
        }
        K::AtenLogSoftmax | K::AtenLogSoftmaxBackward => {
            let r = rank(0);
            if a.axis_of("dim", r)? + 1 != r {
                return Err(a.err("`dim`: only the last axis runs".into()));
            }
            if kind == K::AtenLogSoftmax {
                a.require(
                    "half_to_float",
                    |v| v.as_bool() == Some(false),
                    "half_to_float = false",
                )?;
                Kernel::LogSoftmax
            } else {
                Kernel::LogSoftmaxBackward
            }
        }
        K::AtenNllLoss | K::AtenNllLossBackward => {
            a.require(
                "reduction",
                |v| v.as_u64() == Some(1),
                "reduction = mean (1)",
            )?;
            a.require("weight", Value::is_null, "no class weights")?;
            let ignore_index = a.i64_or("ignore_index", -100)?;
            if kind == K::AtenNllLoss {
                Kernel::NllLoss { ignore_index }
            } else {
                Kernel::NllLossBackward { ignore_index }
            }
        }
        K::AtenGelu | K::AtenGeluBackward => {
            let tanh = match a.get("approximate") {
                None => false,
                Some(v) if v.as_str() == Some("none") => false,
                Some(v) if v.as_str() == Some("tanh") => true,
                Some(v) => {
                    return Err(a.err(format!(
                        "`approximate` = {v}: only \"none\" and \"tanh\" run"
                    )))
                }
            };
            match (kind == K::AtenGelu, tanh) {
                (true, false) => Kernel::Pointwise(Unary::GeluErf),
                (false, false) => Kernel::PointwiseBackward(Unary::GeluErf),
                (true, true) => Kernel::Gelu,
                (false, true) => {
                    return Err(a.err("the tanh GELU's backward is not wired yet".into()))
                }
            }
        }
        K::AtenMulTensor if o.inputs.len() == 2 && is_bool(1) => {
            if shape(0) != shape(1) {
                return Err(a.err("a boolean mask must have the shape of what it masks".into()));
            }
            Kernel::MaskMul
        }
        K::AtenMulTensor if o.inputs.len() == 2 => Kernel::Mul,
        K::AtenMulTensor => Kernel::MulScalar {
            value: a.f64_of("other")? as f32,
        },
        K::AtenDivTensor if o.inputs.len() == 1 => Kernel::DivScalar {
            value: a.f64_of("other")? as f32,
        },
        K::AtenEmbedding => Kernel::EmbeddingRows,
        K::AtenEmbeddingBackward => {
            let p = a.i64_or("padding_idx", -1)?;
            Kernel::EmbeddingDenseBackward {
                padding_idx: usize::try_from(p).ok(),
            }
        }
        K::AtenLayerNorm => {
            let ns = a
                .get("normalized_shape")
                .and_then(Value::as_array)
                .map_or(1, Vec::len);
            if ns != 1 {
                return Err(a.err("`normalized_shape`: only a norm over the last axis runs".into()));
            }
            Kernel::LayerNorm {
                eps: a.f32_or("eps", Some(1e-5))?,
            }
        }
        K::AtenLayerNormBackward => {
            let ns = a
                .get("normalized_shape")
                .and_then(Value::as_array)
                .map_or(1, Vec::len);
            if ns != 1 || o.inputs.len() != 6 {
                return Err(
                    a.err("only a norm over the last axis with weight and bias runs".into())
                );
            }
            Kernel::LayerNormBackward { mask: a.mask()? }
        }
        K::AtenSoftmax | K::AtenSafeSoftmax | K::AtenSoftmaxBackward => {
            let r = rank(0);
            if a.axis_of("dim", r)? + 1 != r {
                return Err(a.err("`dim`: only the last axis runs".into()));
            }
            if kind == K::AtenSoftmaxBackward {
                Kernel::SoftmaxBackward
            } else {
                Kernel::Softmax {
                    scale: 1.0,
                    causal: false,
                }
            }
        }
        K::AtenBmm => Kernel::BatchedMatMul {
            transpose_a: false,
            transpose_b: false,
        },
        K::AtenTranspose => {
            let r = rank(0);
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(a.axis_of("dim0", r)?, a.axis_of("dim1", r)?);
            Kernel::Transpose { perm }
        }
        K::AtenPermute => {
            let r = rank(0);
            let dims = a
                .get("dims")
                .and_then(Value::as_array)
                .ok_or_else(|| a.err("`dims` is missing".into()))?;
            let perm = dims
                .iter()
                .map(|d| d.as_i64().and_then(|d| sgc_ir::ops::axis(d, r)))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| a.err("`dims` must list axes".into()))?;
            Kernel::Transpose { perm }
        }
        K::AtenUnsqueeze | K::AtenSqueezeDim => Kernel::Reshape,
        K::AtenSplit => Kernel::Split {
            axis: a.axis_of("dim", rank(0))?,
            size: a
                .get("split_size")
                .and_then(Value::as_u64)
                .filter(|&s| s > 0)
                .ok_or_else(|| a.err("`split_size` must be a positive integer".into()))?
                as usize,
        },
        K::AtenCat => Kernel::Concat {
            axis: a.axis_of("dim", rank(0))?,
        },
        K::AtenSlice => {
            let axis = a.axis_of("dim", rank(0))?;
            a.require("step", |v| v.as_i64() == Some(1), "step 1")?;
            let len = graph.tensor(o.inputs[0]).shape[axis] as i64;
            let clamp = |v: i64| (if v < 0 { v + len } else { v }).clamp(0, len) as usize;
            let start = clamp(a.i64_or("start", 0)?);
            let end = clamp(a.i64_or("end", len)?).max(start);
            Kernel::Slice { axis, start, end }
        }
        _ => return Ok(Unary::kernel_of(kind)),
    }))
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
            kind => return aten(graph, op, kind, &a)?.ok_or_else(unknown),
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
            ConvBackward { .. } => K::AtenConvolutionBackward,
            ConvGrouped { .. } => K::AtenConvolution,
            Bernoulli { .. } => K::AtenBernoulli,
            Zeros { .. } => K::AtenZeros,
            Dropout { .. } => K::AtenDropout,
            DropoutBackward { .. } => K::AtenDropoutBackward,
            MaskMul => K::AtenMulTensor,
            Unbind { .. } => K::AtenUnbind,
            Stack { .. } => K::AtenStack,
            Assign => K::AtenCopy,
            BatchNormBackward { .. } => K::AtenBatchNormBackward,
            BatchNormUpdateStats { .. } => K::BatchNormUpdateStats,
            CopyInto => K::AtenCopyInPlace,
            AddScalar { .. } => K::AtenAddScalar,
            MulScalar { .. } => K::AtenMulScalar,
            DivScalar { .. } => K::AtenDivScalar,
            ThresholdBackward { .. } => K::AtenThresholdBackward,
            MaxPool2dIndices { .. } => K::AtenMaxPool2d,
            MaxPool2dIndicesBackward { .. } => K::AtenMaxPool2dBackward,
            AvgPool2d { .. } => K::AtenAvgPool2d,
            AvgPool2dBackward { .. } => K::AtenAvgPool2dBackward,
            Reduce { mean: true, .. } => K::AtenMean,
            Reduce { mean: false, .. } => K::AtenSum,
            Expand => K::AtenExpand,
            Fill { .. } => K::AtenOnesLike,
            AddMm { .. } => K::AtenAddmm,
            LogSoftmax => K::AtenLogSoftmax,
            LogSoftmaxBackward => K::AtenLogSoftmaxBackward,
            NllLoss { .. } => K::AtenNllLoss,
            NllLossBackward { .. } => K::AtenNllLossBackward,
            Pointwise(u) => u.kinds().0,
            PointwiseBackward(u) => u.kinds().1,
            EmbeddingRows => K::AtenEmbedding,
            EmbeddingDenseBackward { .. } => K::AtenEmbeddingBackward,
            LayerNormBackward { .. } => K::AtenLayerNormBackward,
            SoftmaxBackward => K::AtenSoftmaxBackward,
            Split { .. } => K::AtenSplit,
            Broadcast { op: BinOp::Mul } => K::AtenMulTensor,
            Broadcast { op: BinOp::Sub } => K::AtenSubTensor,
            Broadcast { op: BinOp::Add } => K::AtenAddTensor,
        }
    }

    /// Whether the CUDA backend has this kernel (the builder's ops; the exporter's run on
    /// the CPU backend, the ones that lower onto a builder kernel on both).
    pub fn on_cuda(&self) -> bool {
        KERNELS.iter().any(|&(k, cuda)| cuda && k == self.kind())
    }

    /// Whether the kernel writes its first input in place and has no outputs
    /// (`sgd_update`, `aten.copy_`).
    pub fn writes_first_input(&self) -> bool {
        matches!(self, Kernel::SgdUpdate { .. } | Kernel::CopyInto)
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

    /// Every pointwise derivative against a central difference of its function (in f64
    /// steps around f32 values, away from the kinks of the hard functions).
    #[test]
    fn pointwise_derivatives_match_finite_differences() {
        for &u in Unary::ALL {
            for i in -40..=40 {
                let x = i as f32 * 0.1 + 0.013;
                if matches!(u, Unary::Hardswish | Unary::Hardsigmoid)
                    && (x.abs() - 3.0).abs() < 0.05
                {
                    continue;
                }
                let h = 1e-2f32;
                let numeric =
                    (f64::from(u.apply(x + h)) - f64::from(u.apply(x - h))) / (2.0 * f64::from(h));
                let v = if u.grad_reads_output() { u.apply(x) } else { x };
                let analytic = f64::from(u.grad(1.0, v));
                assert!(
                    (numeric - analytic).abs() <= 2e-3 * numeric.abs().max(1.0),
                    "{u:?} at {x}: derivative {analytic}, central difference {numeric}"
                );
            }
        }
    }

    #[test]
    fn the_kernel_table_is_what_from_op_accepts() {
        for &kind in OpKind::ALL {
            let g = one_op(kind.name());
            let parsed = Kernel::from_op(&g, OpId::new(0));
            // Attributes the one-op graph lacks are a `BadAttr`: the kind has a kernel.
            let implemented = !matches!(parsed, Err(ExecError::UnknownOpType { .. }));
            let listed = KERNELS.iter().find(|(k, _)| *k == kind);
            assert_eq!(implemented, listed.is_some(), "{}: {parsed:?}", kind.name());
            if let (Ok(k), Some(&(_, cuda))) = (&parsed, listed) {
                assert_eq!(
                    k.on_cuda(),
                    cuda,
                    "{}: the table's CUDA column",
                    kind.name()
                );
            }
        }
        let g = one_op("not_an_op");
        assert!(matches!(
            Kernel::from_op(&g, OpId::new(0)),
            Err(ExecError::UnknownOpType { .. })
        ));
    }
}
