//! The op vocabulary: every op type the training builder (`docs/ops.md`) and the PyTorch
//! exporter (`aten.*`, `sgc.*`) write, as one typed [`OpKind`], with what each stage needs
//! to know about it in one [`OpSpec`]:
//!
//! - [`BatchRule`]: how its outputs carry the batch given its inputs' (used by
//!   [`crate::rescale`] to follow the batch through the graph);
//! - `in_place`: whether a kernel stays correct when an output is the very buffer of an
//!   input (element-wise ops);
//! - [`Effect`]: whether running it again gives the same result and changes nothing else
//!   (`Pure`), draws random numbers (`Random`: a recomputation would draw others) or writes
//!   state (`Writes`: it must run once per step); such an op is not recomputable unless a
//!   graph file says `"recomputable": true`, which is refused on load
//!   ([`crate::GraphError::EffectfulRecomputable`]);
//! - [`Init`]: how a parameter it reads is initialised for a run (fan-in, ones, zeros), and
//!   which integer input indexes which axis of which operand (class ids, token ids);
//! - [`Flops`]: its cost rule, the flop count from its shapes (the builder's formulas, the
//!   flop counter's for PyTorch's products and convolutions), used where a file gives none.
//!
//! The table is the one invocation of `vocabulary!` below: adding an op type is one line there
//! (plus its kernels, if the executor should run it). The op type of a graph file is parsed
//! into a kind once, when the graph loads ([`crate::Op::kind`]); a type that is not in the
//! table stays plannable (its sizes come from the file) and is named in an error only by a
//! stage that needs more (rescale, run).

/// Axis `d` of a rank-`rank` shape, negative values counting from the end (ATen's and
/// the builder's attribute convention); `None` outside the shape.
pub fn axis(d: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let d = if d < 0 { d + r } else { d };
    (0..r).contains(&d).then_some(d as usize)
}

/// A set of operand or result positions (bit `i` = position `i`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slots(u64);

impl Slots {
    pub const ALL: Slots = Slots(u64::MAX);
    pub const NONE: Slots = Slots(0);

    /// The positions in `list`.
    pub const fn of(list: &[u8]) -> Slots {
        let mut bits = 0u64;
        let mut i = 0;
        while i < list.len() {
            bits |= 1 << list[i];
            i += 1;
        }
        Slots(bits)
    }

    pub fn contains(self, i: usize) -> bool {
        i < 64 && self.0 & (1 << i) != 0
    }

    /// The first position of the set (`None` when it is empty).
    pub fn first(self) -> Option<usize> {
        (self.0 != 0).then(|| self.0.trailing_zeros() as usize)
    }
}

/// Where the batch must not be in an op that works on some axes of its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Anywhere.
    Any,
    /// Only on axis 0 (N of an NCHW image op).
    Axis0,
    /// Not on this axis (the channel axis 1 of a batch norm, the classes of a loss).
    NotAxis(u8),
    /// Not on the last `n` axes (the rows a matmul, a softmax or a norm works on).
    NotTrailing(u8),
    /// Not on the axis named by this attribute (negative values count from the end).
    NotAttr(&'static str),
    /// Not on any axis this list attribute names (`roll`'s `dims`); an absent or empty
    /// list names every axis (`roll` of the flattened tensor).
    NotAttrAxes(&'static str),
    /// Not on an axis that attribute `pad` pads (`constant_pad_nd`: a `(before, after)`
    /// pair per axis, from the last axis back).
    NotPadded,
}

/// Which attributes name the axes of a permutation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermAttr {
    /// `perm`: `y.shape[i] = x.shape[perm[i]]` (the builder's `transpose`).
    Perm,
    /// `dims`, like `perm` (`aten.permute`).
    Dims,
    /// `dim0` and `dim1` swapped (`aten.transpose.int`).
    Swap,
    /// The two axes of a matrix swapped (`aten.t`).
    Matrix,
}

/// How an op's outputs carry the batch, given where its inputs carry it (see
/// [`crate::rescale`] for how each rule is applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchRule {
    /// Element-wise with broadcasting: operands aligned on their last axes must carry the
    /// batch on the same aligned axis; every output carries it there.
    Map,
    /// The operands in `data` carry the batch alike (the first of them must carry it), the
    /// other operands must not depend on it; the results in `outs` carry it as `data`'s
    /// first does, the others do not depend on it. Result positions count the slots of an
    /// `output_mask` attribute when the op has one (absent results are skipped).
    Rows {
        data: Slots,
        outs: Slots,
        keep: Keep,
    },
    /// A view with another shape: the batch keeps its element stride.
    Reshape,
    /// A permutation of the axes; the batch moves with its axis.
    Permute(PermAttr),
    /// A reduction over the axes of attribute `dim` (with `keepdim`): an output of a
    /// reduction over the batch does not depend on it.
    Reduce,
    /// `a [M, K] @ b [K, N]` over operands `first` and `first + 1` (any other operand, a
    /// bias, must not depend on the batch): the batch on M or N carries over; the batch on
    /// K of both is contracted away.
    MatMul { first: u8 },
    /// Removes axis `dim` (default 0), which must not carry the batch (`select`, `unbind`).
    Remove,
    /// Inserts axis `dim` (default 0) into operand 0's shape (`stack`, `select_backward`).
    Insert,
    /// No operand: the output carries the batch only where the file declares `batch_dim`.
    Source,
    /// The op cannot read a batch-dependent tensor; the reason says why.
    Refuse(&'static str),
}

/// What running an op does besides computing its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Outputs depend on the inputs alone; running it again is harmless.
    Pure,
    /// Draws random numbers (dropout masks): a recomputation would draw different ones.
    Random,
    /// Writes state in place (a parameter update, a running-statistics copy).
    Writes,
}

/// How a parameter is initialised for a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// Uniform in `±1/sqrt(fan_in)`, the fan-in being `shape[0]` (a `[K, N]` weight).
    FanInRows,
    /// The fan-in being `shape[1]` (a PyTorch `[out, in]` weight).
    FanInCols,
    /// The fan-in being `prod(shape[1..])` (an `[O, C, kh, kw]` filter).
    FanInFilter,
    /// All ones (the scale of a norm).
    Ones,
    /// All zeros (a bias, the shift of a norm).
    Zeros,
}

/// An integer operand that indexes an axis of another operand: ids must stay below its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    pub ids: u8,
    pub of: u8,
    /// The indexed axis of operand `of` (negative counts from the end).
    pub axis: i8,
}

/// How many floating-point operations an op does, from its shapes (a multiply-add counts
/// 2): the builder's formulas of `docs/ops.md` for its op types, and the flop counter's
/// for PyTorch's matrix products and convolutions (`torch.utils.flop_counter`). Used where
/// a file gives no `flops` (the roofline estimate of [`crate::cost`]); a test checks it
/// against every zoo and real graph's recorded counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flops {
    /// No formula: the file's count, else nothing.
    Unknown,
    Zero,
    /// `k * numel(output 0)`.
    Out(u8),
    /// `k * numel(input i)`.
    In(u8, u8),
    /// A matrix product: `2 * numel(input a) * N`, `N` the output's last axis.
    Gemm(u8),
    /// A convolution: `2 * numel(output 0) * prod(input w [1..])` (a transposed one:
    /// `numel(input 0)`).
    Conv(u8),
    /// A convolution's gradient from `dy`: `2 * numel(input dy) * prod(input w [1..])`.
    ConvDy(u8, u8),
    /// A convolution's weight gradient: `2 * numel(input dy) * prod(output 0 [1..])`.
    ConvDw(u8),
    /// Pooling: `numel(y) * kernel^2`, `y` the output or the input given.
    Pool(Option<u8>),
    /// `aten.convolution_backward (dy, x, w)`: one `ConvDy` per gradient of `dx`, `dw` that
    /// `output_mask` asks for (a transposed convolution's from `x`'s positions).
    ConvBackward,
}

impl Flops {
    /// The count for an op with these operand shapes and attributes, if there is a formula.
    pub fn count(
        self,
        ins: &[&[u64]],
        outs: &[&[u64]],
        attrs: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Option<f64> {
        let numel = |s: &[u64]| s.iter().map(|&d| d as f64).product::<f64>();
        let tail = |s: &[u64]| s.iter().skip(1).map(|&d| d as f64).product::<f64>();
        let input = |i: u8| ins.get(usize::from(i)).copied();
        let out0 = outs.first().copied();
        Some(match self {
            Flops::Unknown => return None,
            Flops::Zero => 0.0,
            Flops::Out(k) => f64::from(k) * numel(out0?),
            Flops::In(i, k) => f64::from(k) * numel(input(i)?),
            Flops::Gemm(a) => 2.0 * numel(input(a)?) * *out0?.last()? as f64,
            Flops::Conv(w) => {
                // A transposed convolution runs the products from its input's positions.
                let transposed = attrs
                    .and_then(|a| a.get("transposed"))
                    .and_then(|v| v.as_bool());
                let positions = if transposed == Some(true) {
                    input(0)?
                } else {
                    out0?
                };
                2.0 * numel(positions) * tail(input(w)?)
            }
            Flops::ConvDy(dy, w) => 2.0 * numel(input(dy)?) * tail(input(w)?),
            Flops::ConvDw(dy) => 2.0 * numel(input(dy)?) * tail(out0?),
            Flops::Pool(y) => {
                let k = attrs?.get("kernel")?.as_u64()? as f64;
                let y = match y {
                    Some(i) => input(i)?,
                    None => out0?,
                };
                numel(y) * k * k
            }
            Flops::ConvBackward => {
                let mask = attrs?.get("output_mask")?.as_array()?;
                let passes = mask
                    .iter()
                    .take(2)
                    .filter(|m| m.as_bool() == Some(true))
                    .count();
                let transposed = attrs?.get("transposed").and_then(|v| v.as_bool());
                let positions = if transposed == Some(true) {
                    input(1)?
                } else {
                    input(0)?
                };
                passes as f64 * 2.0 * numel(positions) * tail(input(2)?)
            }
        })
    }
}

/// Everything the stages know about one op kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSpec {
    pub batch: BatchRule,
    pub in_place: bool,
    pub effect: Effect,
    /// `(operand, init)` for up to two parameter operands.
    pub params: [Option<(u8, Init)>; 2],
    pub ids: Option<Ids>,
    /// Its cost rule.
    pub flops: Flops,
}

impl OpSpec {
    const fn new(batch: BatchRule) -> OpSpec {
        OpSpec {
            batch,
            in_place: false,
            effect: Effect::Pure,
            params: [None, None],
            ids: None,
            flops: Flops::Unknown,
        }
    }

    const fn flops(mut self, flops: Flops) -> OpSpec {
        self.flops = flops;
        self
    }

    const fn in_place(mut self) -> OpSpec {
        self.in_place = true;
        self
    }

    const fn effect(mut self, effect: Effect) -> OpSpec {
        self.effect = effect;
        self
    }

    const fn param(mut self, slot: u8, init: Init) -> OpSpec {
        if self.params[0].is_none() {
            self.params[0] = Some((slot, init));
        } else {
            self.params[1] = Some((slot, init));
        }
        self
    }

    const fn ids(mut self, ids: u8, of: u8, axis: i8) -> OpSpec {
        self.ids = Some(Ids { ids, of, axis });
        self
    }

    /// Whether a planner may run the op again to rebuild a freed output.
    pub fn recomputable(&self) -> bool {
        self.effect == Effect::Pure
    }

    /// How parameter operand `slot` is initialised, if the op says.
    pub fn init(&self, slot: usize) -> Option<Init> {
        self.params
            .iter()
            .flatten()
            .find(|(s, _)| usize::from(*s) == slot)
            .map(|&(_, init)| init)
    }
}

const fn map() -> OpSpec {
    OpSpec::new(BatchRule::Map)
}

/// An element-wise op that may write its output over its first operand.
const fn pointwise() -> OpSpec {
    map().in_place()
}

const fn rows(data: &[u8], outs: Slots, keep: Keep) -> OpSpec {
    OpSpec::new(BatchRule::Rows {
        data: Slots::of(data),
        outs,
        keep,
    })
}

/// Every operand carries the batch alike, and so does every result.
const fn each(keep: Keep) -> OpSpec {
    OpSpec::new(BatchRule::Rows {
        data: Slots::ALL,
        outs: Slots::ALL,
        keep,
    })
}

const fn rule(batch: BatchRule) -> OpSpec {
    OpSpec::new(batch)
}

const ALL: Slots = Slots::ALL;
const NONE: Slots = Slots::NONE;
const FIRST: Slots = Slots::of(&[0]);

macro_rules! vocabulary {
    ($( $(#[$doc:meta])* $kind:ident = $name:literal => $spec:expr; )*) => {
        /// An op type this project knows (module docs).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind { $( $(#[$doc])* $kind, )* }

        impl OpKind {
            /// Every kind, in table order.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$kind,)*];

            /// The op type as a graph file writes it.
            pub fn name(self) -> &'static str {
                match self { $(OpKind::$kind => $name,)* }
            }

            /// The kind of a graph file's op type, if the table has it.
            pub fn parse(op_type: &str) -> Option<OpKind> {
                match op_type { $($name => Some(OpKind::$kind),)* _ => None }
            }

            /// What the stages know about this kind.
            pub fn spec(self) -> OpSpec {
                match self { $(OpKind::$kind => $spec,)* }
            }
        }
    };
}

use BatchRule as B;
use Effect::{Random, Writes};
use Init::{FanInCols, FanInFilter, FanInRows, Ones, Zeros};
use Keep::{Any, Axis0, NotAttr, NotAttrAxes, NotAxis, NotPadded, NotTrailing};

vocabulary! {
    // The training builder's ops (`docs/ops.md`).
    /// `a [*, K] @ b [K, N]` (`b [N, K]` when `transpose_b`).
    MatMul = "matmul" => rows(&[0], ALL, NotTrailing(1)).param(1, FanInRows).flops(Flops::Gemm(0));
    /// `p [*, M]^T @ q [*, N]` over the flattened rows (a weight gradient).
    MatMulTn = "matmul_tn" => rows(&[0, 1], NONE, NotTrailing(1)).flops(Flops::Gemm(0));
    BatchedMatMul = "batched_matmul" => rows(&[0, 1], ALL, NotTrailing(2)).flops(Flops::Gemm(0));
    BiasAdd = "bias_add" => rows(&[0], ALL, NotAttr("axis")).in_place().param(1, Zeros).flops(Flops::In(0, 1));
    BiasAddGrad = "bias_add_grad" => rows(&[0], NONE, NotAttr("axis")).flops(Flops::In(0, 1));
    Add = "add" => pointwise().flops(Flops::Out(1));
    Mul = "mul" => pointwise().flops(Flops::Out(1));
    Relu = "relu" => pointwise().flops(Flops::Out(1));
    ReluGrad = "relu_grad" => pointwise().flops(Flops::Out(1));
    Gelu = "gelu" => pointwise().flops(Flops::Out(8));
    GeluGrad = "gelu_grad" => pointwise().flops(Flops::Out(16));
    Conv2d = "conv2d" => rows(&[0], ALL, Axis0).param(1, FanInFilter).flops(Flops::Conv(1));
    Conv2dGradInput = "conv2d_grad_input" => rows(&[0], ALL, Axis0).flops(Flops::ConvDy(0, 1));
    Conv2dGradWeight = "conv2d_grad_weight" => rows(&[0, 1], NONE, Axis0).flops(Flops::ConvDw(1));
    MaxPool2d = "max_pool2d" => each(Axis0).flops(Flops::Pool(None));
    MaxPool2dGrad = "max_pool2d_grad" => each(Axis0).flops(Flops::Pool(Some(1)));
    GlobalAvgPool = "global_avg_pool" => each(Axis0).flops(Flops::In(0, 1));
    GlobalAvgPoolGrad = "global_avg_pool_grad" => each(Axis0).flops(Flops::Out(1));
    BatchNorm = "batch_norm" => rows(&[0], FIRST, NotAxis(1)).param(1, Ones).param(2, Zeros).flops(Flops::In(0, 8));
    BatchNormGrad = "batch_norm_grad" => rows(&[0, 4], FIRST, NotAxis(1)).flops(Flops::In(0, 12));
    LayerNorm = "layer_norm" => rows(&[0], ALL, NotTrailing(1)).param(1, Ones).param(2, Zeros).flops(Flops::In(0, 8));
    LayerNormGrad = "layer_norm_grad" => rows(&[0, 2, 3, 4], FIRST, NotTrailing(1)).flops(Flops::In(0, 12));
    Softmax = "softmax" => each(NotTrailing(1)).flops(Flops::In(0, 5));
    SoftmaxGrad = "softmax_grad" => each(NotTrailing(1)).in_place().flops(Flops::In(0, 4));
    Embedding = "embedding" => rows(&[0], ALL, Any).param(1, FanInRows).ids(0, 1, 0).flops(Flops::Out(1));
    EmbeddingGrad = "embedding_grad" => rows(&[0, 1], NONE, Any).flops(Flops::In(1, 1));
    Reshape = "reshape" => rule(B::Reshape).flops(Flops::Zero);
    Transpose = "transpose" => rule(B::Permute(PermAttr::Perm)).flops(Flops::Out(1));
    Concat = "concat" => each(NotAttr("axis")).flops(Flops::Out(1));
    Slice = "slice" => rows(&[0], ALL, NotAttr("axis")).flops(Flops::Out(1));
    Upsample2x = "upsample_nearest2x" => each(Axis0).flops(Flops::Out(1));
    Upsample2xGrad = "upsample_nearest2x_grad" => each(Axis0).flops(Flops::In(0, 1));
    CrossEntropy = "cross_entropy" => rows(&[0, 1], NONE, NotTrailing(1)).ids(1, 0, -1).flops(Flops::In(0, 5));
    CrossEntropyGrad = "cross_entropy_grad" => rows(&[0, 1], ALL, NotTrailing(1)).ids(1, 0, -1).flops(Flops::In(0, 5));
    SgdUpdate = "sgd_update" => rule(B::Refuse("the parameter update reads a tensor whose shape depends on the batch")).effect(Writes).flops(Flops::In(0, 2));
    /// `param += alpha * grad` in place, no outputs: the exporter's SGD step (`update="sgd"`).
    AtenAddInPlace = "aten.add_.Tensor" => rule(B::Refuse("the parameter update reads a tensor whose shape depends on the batch")).effect(Writes).flops(Flops::In(0, 2));

    // The PyTorch exporter's ops (`python/sgc_trace`, ATen's core set and two of its own).
    AtenAddTensor = "aten.add.Tensor" => pointwise();
    AtenAddScalar = "aten.add.Scalar" => pointwise();
    AtenSubTensor = "aten.sub.Tensor" => pointwise();
    AtenMulTensor = "aten.mul.Tensor" => pointwise();
    AtenMulScalar = "aten.mul.Scalar" => pointwise();
    AtenDivTensor = "aten.div.Tensor" => pointwise();
    AtenDivScalar = "aten.div.Scalar" => pointwise();
    AtenPow = "aten.pow.Tensor_Scalar" => pointwise();
    AtenWhere = "aten.where.self" => map();
    /// `x == other` (a number), a bool tensor.
    AtenEqScalar = "aten.eq.Scalar" => map();
    /// `x != other` (a number), a bool tensor.
    AtenNeScalar = "aten.ne.Scalar" => map();
    AtenLtScalar = "aten.lt.Scalar" => map();
    AtenLeScalar = "aten.le.Scalar" => map();
    AtenGtScalar = "aten.gt.Scalar" => map();
    AtenGeScalar = "aten.ge.Scalar" => map();
    /// `a op b` of two tensors, broadcast, a bool tensor (the backward of `maximum`,
    /// `minimum` and `clamp` compares).
    AtenEqTensor = "aten.eq.Tensor" => map();
    AtenNeTensor = "aten.ne.Tensor" => map();
    AtenLtTensor = "aten.lt.Tensor" => map();
    AtenLeTensor = "aten.le.Tensor" => map();
    AtenGtTensor = "aten.gt.Tensor" => map();
    AtenGeTensor = "aten.ge.Tensor" => map();
    AtenRelu = "aten.relu.default" => pointwise();
    AtenThresholdBackward = "aten.threshold_backward.default" => pointwise();
    AtenGelu = "aten.gelu.default" => pointwise();
    AtenGeluBackward = "aten.gelu_backward.default" => pointwise();
    AtenSigmoid = "aten.sigmoid.default" => pointwise();
    AtenSigmoidBackward = "aten.sigmoid_backward.default" => pointwise();
    AtenTanh = "aten.tanh.default" => pointwise();
    AtenTanhBackward = "aten.tanh_backward.default" => pointwise();
    AtenSilu = "aten.silu.default" => pointwise();
    AtenSiluBackward = "aten.silu_backward.default" => pointwise();
    AtenSoftplus = "aten.softplus.default" => pointwise();
    AtenSoftplusBackward = "aten.softplus_backward.default" => pointwise();
    AtenMish = "aten.mish.default" => pointwise();
    AtenMishBackward = "aten.mish_backward.default" => pointwise();
    /// `clamp(x, min_val, max_val)` (ReLU6 is `hardtanh(x, 0, 6)`).
    AtenHardtanh = "aten.hardtanh.default" => pointwise();
    /// `(dy, x) -> dy` where `min_val < x < max_val`, else 0.
    AtenHardtanhBackward = "aten.hardtanh_backward.default" => pointwise();
    AtenHardswish = "aten.hardswish.default" => pointwise();
    AtenHardswishBackward = "aten.hardswish_backward.default" => pointwise();
    AtenHardsigmoid = "aten.hardsigmoid.default" => pointwise();
    AtenHardsigmoidBackward = "aten.hardsigmoid_backward.default" => pointwise();
    // Core ATen's math functions of one tensor (no backward ops of their own: autograd
    // writes their derivatives with `mul`, `div`, ...), `clamp` by scalars, and the
    // broadcasting `maximum`, `minimum` and `pow` of two tensors.
    AtenNeg = "aten.neg.default" => pointwise();
    AtenExp = "aten.exp.default" => pointwise();
    AtenExp2 = "aten.exp2.default" => pointwise();
    AtenExpm1 = "aten.expm1.default" => pointwise();
    AtenLog = "aten.log.default" => pointwise();
    AtenLog2 = "aten.log2.default" => pointwise();
    AtenLog10 = "aten.log10.default" => pointwise();
    AtenLog1p = "aten.log1p.default" => pointwise();
    AtenSqrt = "aten.sqrt.default" => pointwise();
    AtenRsqrt = "aten.rsqrt.default" => pointwise();
    AtenReciprocal = "aten.reciprocal.default" => pointwise();
    AtenAbs = "aten.abs.default" => pointwise();
    AtenSign = "aten.sign.default" => pointwise();
    AtenSin = "aten.sin.default" => pointwise();
    AtenCos = "aten.cos.default" => pointwise();
    AtenTan = "aten.tan.default" => pointwise();
    AtenAsin = "aten.asin.default" => pointwise();
    AtenAcos = "aten.acos.default" => pointwise();
    AtenAtan = "aten.atan.default" => pointwise();
    AtenSinh = "aten.sinh.default" => pointwise();
    AtenCosh = "aten.cosh.default" => pointwise();
    AtenAsinh = "aten.asinh.default" => pointwise();
    AtenAcosh = "aten.acosh.default" => pointwise();
    AtenAtanh = "aten.atanh.default" => pointwise();
    AtenErf = "aten.erf.default" => pointwise();
    AtenFloor = "aten.floor.default" => pointwise();
    AtenCeil = "aten.ceil.default" => pointwise();
    AtenRound = "aten.round.default" => pointwise();
    AtenTrunc = "aten.trunc.default" => pointwise();
    /// `x` clamped to `[min, max]`, either bound optional (scalars).
    AtenClamp = "aten.clamp.default" => pointwise();
    AtenClampMin = "aten.clamp_min.default" => pointwise();
    AtenClampMax = "aten.clamp_max.default" => pointwise();
    AtenMaximum = "aten.maximum.default" => pointwise();
    AtenMinimum = "aten.minimum.default" => pointwise();
    AtenPowTensor = "aten.pow.Tensor_Tensor" => pointwise();
    AtenLeakyRelu = "aten.leaky_relu.default" => pointwise();
    AtenLeakyReluBackward = "aten.leaky_relu_backward.default" => pointwise();
    AtenDropout = "aten.native_dropout.default" => map().effect(Random);
    AtenDropoutBackward = "aten.native_dropout_backward.default" => pointwise();
    AtenBernoulli = "aten.bernoulli.p" => map().effect(Random);
    /// `x` converted to the output's dtype (autocast's casts; `.float()`, `.long()`): floats
    /// rounded to nearest even, floats to integers truncated toward zero, anything to bool
    /// `!= 0`. Its attributes (`dtype`, `memory_format`) are the output's declaration.
    AtenToCopy = "aten._to_copy.default" => map();
    AtenClone = "aten.clone.default" => map();
    AtenAlias = "aten.alias.default" => map();
    AtenCopy = "aten.copy.default" => map();
    AtenCopyInPlace = "aten.copy_.default" => map().effect(Writes);
    AtenFill = "aten.fill.Scalar" => map();
    AtenOnesLike = "aten.ones_like.default" => map();
    AtenEmptyLike = "aten.empty_like.default" => map();
    AtenZerosLike = "aten.zeros_like.default" => map();
    /// `zero(x)`: the functional form of `x.zero_()`.
    AtenZero = "aten.zero.default" => map();
    AtenFullLike = "aten.full_like.default" => map();
    AtenNewEmptyStrided = "aten.new_empty_strided.default" => map();
    AtenLiftFreshCopy = "aten.lift_fresh_copy.default" => map();
    AtenExpand = "aten.expand.default" => map();
    AtenView = "aten.view.default" => rule(B::Reshape);
    AtenUnsafeView = "aten._unsafe_view.default" => rule(B::Reshape);
    AtenUnsqueeze = "aten.unsqueeze.default" => rule(B::Reshape);
    AtenSqueezeDim = "aten.squeeze.dim" => rule(B::Reshape);
    AtenT = "aten.t.default" => rule(B::Permute(PermAttr::Matrix)).param(0, FanInCols);
    AtenTranspose = "aten.transpose.int" => rule(B::Permute(PermAttr::Swap));
    AtenPermute = "aten.permute.default" => rule(B::Permute(PermAttr::Dims));
    AtenSum = "aten.sum.dim_IntList" => rule(B::Reduce);
    AtenMean = "aten.mean.dim" => rule(B::Reduce);
    AtenCat = "aten.cat.default" => each(NotAttr("dim"));
    AtenStack = "aten.stack.default" => rule(B::Insert);
    /// `x[.., start:end:step, ..]` along `dim` (a view; any `step >= 1`).
    AtenSlice = "aten.slice.Tensor" => rows(&[0], ALL, NotAttr("dim"));
    /// `(input, src) -> input` with `input[.., start:end:step, ..] = src` along `dim` (also
    /// `slice_backward`, which the exporter decomposes into `zeros` and this).
    AtenSliceScatter = "aten.slice_scatter.default" => rows(&[0, 1], ALL, NotAttr("dim"));
    /// `x` with `pad[2k]` elements of `value` before and `pad[2k + 1]` after its `k`-th
    /// axis from the end (a negative pad crops).
    AtenConstantPadNd = "aten.constant_pad_nd.default" => each(NotPadded);
    /// `x` shifted by `shifts[k]` along `dims[k]`, wrapping around (no `dims`: along the
    /// flattened tensor).
    AtenRoll = "aten.roll.default" => each(NotAttrAxes("dims"));
    AtenSplit = "aten.split.Tensor" => rows(&[0], ALL, NotAttr("dim"));
    AtenSelect = "aten.select.int" => rule(B::Remove);
    AtenSelectBackward = "aten.select_backward.default" => rule(B::Insert);
    AtenUnbind = "aten.unbind.int" => rule(B::Remove);
    AtenGather = "aten.gather.default" => each(NotAttr("dim"));
    AtenTril = "aten.tril.default" => each(NotTrailing(2));
    AtenMm = "aten.mm.default" => rule(B::MatMul { first: 0 }).flops(Flops::Gemm(0));
    AtenAddmm = "aten.addmm.default" => rule(B::MatMul { first: 1 }).param(0, Zeros).flops(Flops::Gemm(1));
    AtenBmm = "aten.bmm.default" => each(NotTrailing(2)).flops(Flops::Gemm(0));
    AtenConvolution = "aten.convolution.default" => rows(&[0], ALL, Axis0).param(1, FanInFilter).param(2, Zeros).flops(Flops::Conv(1));
    AtenConvolutionBackward = "aten.convolution_backward.default" => rows(&[0, 1], FIRST, Axis0).flops(Flops::ConvBackward);
    AtenMaxPool2d = "aten.max_pool2d_with_indices.default" => each(Axis0);
    AtenMaxPool2dBackward = "aten.max_pool2d_with_indices_backward.default" => each(Axis0);
    AtenAvgPool2d = "aten.avg_pool2d.default" => each(Axis0);
    AtenAvgPool2dBackward = "aten.avg_pool2d_backward.default" => each(Axis0);
    /// The mean over each of `output_size` windows of `[N, C, H, W]` (window `i` of an axis
    /// spans `floor(i * in / out)` to `ceil((i + 1) * in / out)`; they overlap when `out`
    /// does not divide `in`, and repeat elements when `out > in`).
    AtenAdaptiveAvgPool2d = "aten._adaptive_avg_pool2d.default" => each(Axis0);
    /// `(dy, x) -> dx`: each window's gradient spread evenly over its elements.
    AtenAdaptiveAvgPool2dBackward = "aten._adaptive_avg_pool2d_backward.default" => each(Axis0);
    /// Training-mode batch norm: `(x, weight, bias) -> (y, save_mean, save_invstd)`.
    AtenBatchNorm = "aten._native_batch_norm_legit.no_stats" => rows(&[0], FIRST, NotAxis(1)).param(1, Ones).param(2, Zeros);
    AtenBatchNormBackward = "aten.native_batch_norm_backward.default" => rows(&[0, 1], FIRST, NotAxis(1));
    /// The running-statistics update the exporter splits off a training-mode batch norm:
    /// `(running_mean, running_var, save_mean, save_invstd) -> (new_mean, new_var)`,
    /// attribute `count` = the elements per channel (it scales with the batch).
    BatchNormUpdateStats = "sgc.batch_norm_update_stats" => rows(&[], NONE, Any);
    AtenLayerNorm = "aten.native_layer_norm.default" => rows(&[0], ALL, NotTrailing(1)).param(1, Ones).param(2, Zeros);
    AtenLayerNormBackward = "aten.native_layer_norm_backward.default" => rows(&[0, 1, 2, 3], FIRST, NotTrailing(1));
    AtenSoftmax = "aten._softmax.default" => each(NotAttr("dim"));
    AtenSafeSoftmax = "aten._safe_softmax.default" => each(NotAttr("dim"));
    AtenSoftmaxBackward = "aten._softmax_backward_data.default" => each(NotAttr("dim"));
    AtenLogSoftmax = "aten._log_softmax.default" => each(NotAttr("dim"));
    AtenLogSoftmaxBackward = "aten._log_softmax_backward_data.default" => each(NotAttr("dim"));
    AtenNllLoss = "aten.nll_loss_forward.default" => rows(&[0, 1], NONE, NotAxis(1)).ids(1, 0, 1);
    AtenNllLossBackward = "aten.nll_loss_backward.default" => rows(&[1, 2], ALL, NotAxis(1)).ids(2, 1, 1);
    AtenNllLoss2d = "aten.nll_loss2d_forward.default" => rows(&[0, 1], NONE, NotAxis(1)).ids(1, 0, 1);
    AtenNllLoss2dBackward = "aten.nll_loss2d_backward.default" => rows(&[1, 2], ALL, NotAxis(1)).ids(2, 1, 1);
    AtenEmbedding = "aten.embedding.default" => rows(&[1], ALL, Any).param(0, FanInRows).ids(1, 0, 0);
    AtenEmbeddingBackward = "aten.embedding_dense_backward.default" => rows(&[0, 1], NONE, Any);
    /// `self[ids]`: rows `ids [*I]` of `self [R, *rest]` -> `[*I, *rest]` (one index tensor, on axis 0).
    AtenIndex = "aten.index.Tensor" => rule(B::Refuse("advanced indexing of a batch-dependent tensor does not rescale"));
    /// `self` with rows `ids` set to (or, `accumulate`, increased by) `values [*I, *rest]`.
    AtenIndexPut = "aten.index_put.default" => rule(B::Refuse("advanced indexing of a batch-dependent tensor does not rescale"));
    AtenSdpa = "aten._scaled_dot_product_flash_attention_for_cpu.default" => each(NotTrailing(2));
    AtenSdpaBackward = "aten._scaled_dot_product_flash_attention_for_cpu_backward.default" => each(NotTrailing(2));
    AtenArange = "aten.arange.default" => rule(B::Source);
    AtenOnes = "aten.ones.default" => rule(B::Source);
    AtenFull = "aten.full.default" => rule(B::Source);
    AtenZeros = "aten.zeros.default" => rule(B::Source);
    AtenEmpty = "aten.empty.memory_format" => rule(B::Source);
    AtenScalarTensor = "aten.scalar_tensor.default" => rule(B::Source);
}

/// Attributes that hold a shape, rewritten by [`crate::rescale`] to the rescaled output's.
pub const SHAPE_ATTRS: &[&str] = &["size", "input_sizes"];

/// Attributes that count elements of the batch, scaled by [`crate::rescale`] with it.
pub const BATCH_COUNT_ATTRS: &[&str] = &["count"];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_parse_back_and_are_unique() {
        let mut seen = HashSet::new();
        for &k in OpKind::ALL {
            assert!(seen.insert(k.name()), "{} listed twice", k.name());
            assert_eq!(OpKind::parse(k.name()), Some(k));
        }
        assert_eq!(OpKind::parse("no_such_op"), None);
    }

    #[test]
    fn stateful_and_random_ops_are_not_recomputable() {
        assert!(!OpKind::SgdUpdate.spec().recomputable());
        assert!(!OpKind::AtenCopyInPlace.spec().recomputable());
        assert!(!OpKind::AtenDropout.spec().recomputable());
        assert!(OpKind::AtenBatchNorm.spec().recomputable());
    }

    #[test]
    fn slots() {
        let s = Slots::of(&[1, 3]);
        assert!(s.contains(1) && s.contains(3) && !s.contains(0) && !s.contains(64));
        assert_eq!(s.first(), Some(1));
        assert_eq!(Slots::NONE.first(), None);
    }
}
