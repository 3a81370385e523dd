//! The forward ops of the builder: shape inference, checks and recording. The semantics,
//! attributes and flops formula of every op type are in `docs/ops.md`.

use super::{numel, NewOp, Rule, TrainBuilder, TrainError, Var};
use crate::ids::DType;
use crate::ops::OpKind;
use serde_json::json;

type R<T> = Result<T, TrainError>;

/// Epsilon of `batch_norm` and `layer_norm`.
pub const NORM_EPS: f64 = 1e-5;

fn is_float(d: DType) -> bool {
    matches!(d, DType::F64 | DType::F32 | DType::F16 | DType::Bf16)
}

impl TrainBuilder {
    fn expect_float(&self, op: &str, v: Var) -> R<()> {
        self.expect_dtype(op, v, is_float(self.dtype(v)), "a float type")
    }

    fn expect_dtype(&self, op: &str, v: Var, ok: bool, expected: &str) -> R<()> {
        if ok {
            return Ok(());
        }
        Err(TrainError::DType {
            op: op.to_string(),
            tensor: self.name_of(v).to_string(),
            found: self.dtype(v).as_str().to_string(),
            expected: expected.to_string(),
        })
    }

    fn expect_same_shape(&self, op: &str, a: Var, b: Var) -> R<()> {
        if self.shape(a) != self.shape(b) {
            return Err(TrainError::shape(
                op,
                format!(
                    "operands must have equal shapes, got {:?} and {:?}",
                    self.shape(a),
                    self.shape(b)
                ),
            ));
        }
        self.expect_float(op, a)?;
        self.expect_float(op, b)
    }

    fn expect_rank(&self, op: &str, v: Var, rank: usize) -> R<()> {
        if self.shape(v).len() != rank {
            return Err(TrainError::shape(
                op,
                format!(
                    "operand `{}` must have rank {rank}, got shape {:?}",
                    self.name_of(v),
                    self.shape(v)
                ),
            ));
        }
        Ok(())
    }

    /// An element-wise op with one float operand: output of the same shape.
    fn unary(&mut self, name: &str, kind: OpKind, x: Var, per_elem: f64, rule: Rule) -> R<Var> {
        self.expect_float(name, x)?;
        let y = self.activation_like(name, x)?;
        let flops = per_elem * numel(self.shape(x)) as f64;
        self.forward(
            NewOp::new(name, kind, vec![x], vec![y], flops).inplace(0, 0),
            rule,
        )?;
        Ok(y)
    }

    /// `matmul`: `a [*, K] @ b [K, N]` (or `b [N, K]` transposed) -> `[*, N]`.
    pub fn matmul(&mut self, name: &str, a: Var, b: Var, transpose_b: bool) -> R<Var> {
        self.expect_float(name, a)?;
        self.expect_float(name, b)?;
        let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
        if sa.len() < 2 || sb.len() != 2 {
            return Err(TrainError::shape(
                name,
                format!("matmul takes a of rank >= 2 and b of rank 2, got {sa:?} and {sb:?}"),
            ));
        }
        let (k, n) = if transpose_b {
            (sb[1], sb[0])
        } else {
            (sb[0], sb[1])
        };
        let (rows, last) = sa.split_at(sa.len() - 1);
        if last[0] != k {
            return Err(TrainError::shape(
                name,
                format!("inner dimensions differ: a {sa:?}, b {sb:?}, transpose_b {transpose_b}"),
            ));
        }
        let mut out = rows.to_vec();
        out.push(n);
        let flops = 2.0 * numel(rows) as f64 * k as f64 * n as f64;
        let y = self.activation(name, self.dtype(a), out)?;
        let op = NewOp::new(name, OpKind::MatMul, vec![a, b], vec![y], flops)
            .attrs(json!({ "transpose_b": transpose_b }));
        self.forward(op, Rule::MatMul { transpose_b })?;
        Ok(y)
    }

    /// A linear layer `x @ w (+ bias)`, `w [in, out]`: a `matmul` op named `name`, then a
    /// `bias_add` op `<name>.bias_add` on the last axis when there is a bias.
    pub fn linear(&mut self, name: &str, x: Var, w: Var, bias: Option<Var>) -> R<Var> {
        let Some(bias) = bias else {
            return self.matmul(name, x, w, false);
        };
        let y = self.matmul(&format!("{name}.matmul"), x, w, false)?;
        let axis = self.shape(y).len() - 1;
        self.bias_add(name, y, bias, axis)
    }

    /// `batched_matmul`: `op_a(a) [*, M, K] @ op_b(b) [*, K, N]` -> `[*, M, N]`, where
    /// `op_x` swaps the last two axes when its flag is set.
    pub fn batched_matmul(
        &mut self,
        name: &str,
        a: Var,
        b: Var,
        transpose_a: bool,
        transpose_b: bool,
    ) -> R<Var> {
        self.expect_float(name, a)?;
        self.expect_float(name, b)?;
        let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
        let r = sa.len();
        if r < 3 || sb.len() != r || sa[..r - 2] != sb[..r - 2] {
            return Err(TrainError::shape(
                name,
                format!("batched_matmul takes operands of equal rank >= 3 and equal batch axes, got {sa:?} and {sb:?}"),
            ));
        }
        let (m, k) = if transpose_a {
            (sa[r - 1], sa[r - 2])
        } else {
            (sa[r - 2], sa[r - 1])
        };
        let (kb, n) = if transpose_b {
            (sb[r - 1], sb[r - 2])
        } else {
            (sb[r - 2], sb[r - 1])
        };
        if k != kb {
            return Err(TrainError::shape(
                name,
                format!("inner dimensions differ: a {sa:?} (transpose_a {transpose_a}), b {sb:?} (transpose_b {transpose_b})"),
            ));
        }
        let mut out = sa[..r - 2].to_vec();
        out.extend([m, n]);
        let flops = 2.0 * numel(&sa[..r - 2]) as f64 * m as f64 * k as f64 * n as f64;
        let y = self.activation(name, self.dtype(a), out)?;
        let op = NewOp::new(name, OpKind::BatchedMatMul, vec![a, b], vec![y], flops)
            .attrs(json!({ "transpose_a": transpose_a, "transpose_b": transpose_b }));
        let rule = Rule::BatchedMatMul {
            transpose_a,
            transpose_b,
        };
        self.forward(op, rule)?;
        Ok(y)
    }

    /// `bias_add`: `x + bias` with `bias [x.shape[axis]]` broadcast along `axis`.
    pub fn bias_add(&mut self, name: &str, x: Var, bias: Var, axis: usize) -> R<Var> {
        self.expect_float(name, x)?;
        self.expect_float(name, bias)?;
        let (sx, sb) = (self.shape(x), self.shape(bias));
        if axis >= sx.len() || sb != [sx[axis]] {
            return Err(TrainError::shape(
                name,
                format!("bias {sb:?} does not match axis {axis} of {sx:?}"),
            ));
        }
        let flops = numel(sx) as f64;
        let y = self.activation_like(name, x)?;
        let op = NewOp::new(name, OpKind::BiasAdd, vec![x, bias], vec![y], flops)
            .attrs(json!({ "axis": axis }))
            .inplace(0, 0);
        self.forward(op, Rule::BiasAdd { axis })?;
        Ok(y)
    }

    /// `add`: element-wise `a + b`, equal shapes.
    pub fn add(&mut self, name: &str, a: Var, b: Var) -> R<Var> {
        self.expect_same_shape(name, a, b)?;
        let y = self.activation_like(name, a)?;
        let flops = numel(self.shape(a)) as f64;
        let op = NewOp::new(name, OpKind::Add, vec![a, b], vec![y], flops)
            .inplace(0, 0)
            .inplace(0, 1);
        self.forward(op, Rule::Add)?;
        Ok(y)
    }

    /// `mul`: element-wise `a * b`, equal shapes.
    pub fn mul(&mut self, name: &str, a: Var, b: Var) -> R<Var> {
        self.expect_same_shape(name, a, b)?;
        let y = self.activation_like(name, a)?;
        let flops = numel(self.shape(a)) as f64;
        self.forward(
            NewOp::new(name, OpKind::Mul, vec![a, b], vec![y], flops),
            Rule::Mul,
        )?;
        Ok(y)
    }

    /// `relu`: `max(x, 0)`.
    pub fn relu(&mut self, name: &str, x: Var) -> R<Var> {
        self.unary(name, OpKind::Relu, x, 1.0, Rule::Relu)
    }

    /// `gelu`: the tanh approximation.
    pub fn gelu(&mut self, name: &str, x: Var) -> R<Var> {
        self.expect_float(name, x)?;
        let y = self.activation_like(name, x)?;
        let flops = 8.0 * numel(self.shape(x)) as f64;
        self.forward(
            NewOp::new(name, OpKind::Gelu, vec![x], vec![y], flops),
            Rule::Gelu,
        )?;
        Ok(y)
    }

    /// `conv2d`: `x [N, C, H, W]`, `w [O, C, kh, kw]`, square stride and zero padding.
    pub fn conv2d(&mut self, name: &str, x: Var, w: Var, stride: u64, padding: u64) -> R<Var> {
        self.expect_float(name, x)?;
        self.expect_float(name, w)?;
        self.expect_rank(name, x, 4)?;
        self.expect_rank(name, w, 4)?;
        let (sx, sw) = (self.shape(x).to_vec(), self.shape(w).to_vec());
        if sx[1] != sw[1] {
            return Err(TrainError::shape(
                name,
                format!("input channels differ: x {sx:?}, weight {sw:?}"),
            ));
        }
        let ho = window_out(name, sx[2], sw[2], stride, padding)?;
        let wo = window_out(name, sx[3], sw[3], stride, padding)?;
        let out = vec![sx[0], sw[0], ho, wo];
        let flops = 2.0 * numel(&out) as f64 * numel(&sw[1..]) as f64;
        let y = self.activation(name, self.dtype(x), out)?;
        let op = NewOp::new(name, OpKind::Conv2d, vec![x, w], vec![y], flops)
            .attrs(json!({ "stride": stride, "padding": padding }));
        self.forward(op, Rule::Conv2d { stride, padding })?;
        Ok(y)
    }

    /// `max_pool2d` over `x [N, C, H, W]` (padding counts as -infinity).
    pub fn max_pool2d(
        &mut self,
        name: &str,
        x: Var,
        kernel: u64,
        stride: u64,
        padding: u64,
    ) -> R<Var> {
        self.expect_float(name, x)?;
        self.expect_rank(name, x, 4)?;
        let sx = self.shape(x).to_vec();
        if padding.saturating_mul(2) > kernel {
            return Err(TrainError::shape(name, "padding exceeds half the kernel"));
        }
        let ho = window_out(name, sx[2], kernel, stride, padding)?;
        let wo = window_out(name, sx[3], kernel, stride, padding)?;
        let out = vec![sx[0], sx[1], ho, wo];
        let flops = numel(&out) as f64 * (kernel as f64).powi(2);
        let y = self.activation(name, self.dtype(x), out)?;
        let op = NewOp::new(name, OpKind::MaxPool2d, vec![x], vec![y], flops)
            .attrs(json!({ "kernel": kernel, "stride": stride, "padding": padding }));
        let rule = Rule::MaxPool2d {
            kernel,
            stride,
            padding,
        };
        self.forward(op, rule)?;
        Ok(y)
    }

    /// `global_avg_pool`: `x [N, C, H, W]` -> `[N, C]`, the mean over H and W.
    pub fn global_avg_pool(&mut self, name: &str, x: Var) -> R<Var> {
        self.expect_float(name, x)?;
        self.expect_rank(name, x, 4)?;
        let sx = self.shape(x).to_vec();
        let flops = numel(&sx) as f64;
        let y = self.activation(name, self.dtype(x), vec![sx[0], sx[1]])?;
        let op = NewOp::new(name, OpKind::GlobalAvgPool, vec![x], vec![y], flops);
        self.forward(op, Rule::GlobalAvgPool)?;
        Ok(y)
    }

    /// `batch_norm` in training mode over axis 1 of `x [N, C, ...]`, with the batch
    /// statistics as extra outputs `<name>.mean` and `<name>.invstd` (`[C]`).
    pub fn batch_norm(&mut self, name: &str, x: Var, gamma: Var, beta: Var) -> R<Var> {
        let c = *self.shape(x).get(1).ok_or_else(|| {
            TrainError::shape(name, "batch_norm takes x of rank >= 2 (channels on axis 1)")
        })?;
        self.norm(
            name,
            OpKind::BatchNorm,
            x,
            gamma,
            beta,
            c,
            ("mean", "invstd"),
        )
    }

    /// `layer_norm` over the last axis of `x`, with the statistics as extra outputs
    /// `<name>.mean` and `<name>.rstd` (`x.shape[..-1]`).
    pub fn layer_norm(&mut self, name: &str, x: Var, gamma: Var, beta: Var) -> R<Var> {
        let d = *self
            .shape(x)
            .last()
            .ok_or_else(|| TrainError::shape(name, "layer_norm takes x of rank >= 1"))?;
        self.norm(name, OpKind::LayerNorm, x, gamma, beta, d, ("mean", "rstd"))
    }

    #[allow(clippy::too_many_arguments)]
    fn norm(
        &mut self,
        name: &str,
        kind: OpKind,
        x: Var,
        gamma: Var,
        beta: Var,
        features: u64,
        stats: (&str, &str),
    ) -> R<Var> {
        for v in [x, gamma, beta] {
            self.expect_float(name, v)?;
        }
        for v in [gamma, beta] {
            if self.shape(v) != [features] {
                return Err(TrainError::shape(
                    name,
                    format!(
                        "`{}` must have shape [{features}], got {:?}",
                        self.name_of(v),
                        self.shape(v)
                    ),
                ));
            }
        }
        let stat_shape = if kind == OpKind::BatchNorm {
            vec![features]
        } else {
            let s = self.shape(x);
            s[..s.len() - 1].to_vec()
        };
        let dtype = self.dtype(x);
        let y = self.activation_like(name, x)?;
        let mean = self.activation(&format!("{name}.{}", stats.0), dtype, stat_shape.clone())?;
        let spread = self.activation(&format!("{name}.{}", stats.1), dtype, stat_shape)?;
        let flops = 8.0 * numel(self.shape(x)) as f64;
        let op = NewOp::new(
            name,
            kind,
            vec![x, gamma, beta],
            vec![y, mean, spread],
            flops,
        )
        .attrs(json!({ "eps": NORM_EPS }));
        let rule = if kind == OpKind::BatchNorm {
            Rule::BatchNorm
        } else {
            Rule::LayerNorm
        };
        self.forward(op, rule)?;
        Ok(y)
    }

    /// `softmax` over the last axis of `scale * x`; with `causal`, entries above the
    /// diagonal of the last two axes (key index > query index) are masked out first.
    pub fn softmax(&mut self, name: &str, x: Var, scale: f64, causal: bool) -> R<Var> {
        self.expect_float(name, x)?;
        let s = self.shape(x);
        if s.is_empty() || (causal && (s.len() < 2 || s[s.len() - 1] != s[s.len() - 2])) {
            return Err(TrainError::shape(
                name,
                format!(
                    "softmax takes rank >= 1 (causal: rank >= 2, square last two axes), got {s:?}"
                ),
            ));
        }
        if !scale.is_finite() {
            return Err(TrainError::shape(
                name,
                format!("scale {scale} is not finite"),
            ));
        }
        let flops = 5.0 * numel(s) as f64;
        let y = self.activation_like(name, x)?;
        let op = NewOp::new(name, OpKind::Softmax, vec![x], vec![y], flops)
            .attrs(json!({ "scale": scale, "causal": causal }));
        self.forward(op, Rule::Softmax { scale })?;
        Ok(y)
    }

    /// `dropout` in training mode (`aten.native_dropout`): each entry kept with probability
    /// `1 - p` and scaled by `1 / (1 - p)`, the mask as a second output `<name>.mask`
    /// (bool). It draws random numbers, so it is never recomputed (the op table's `Random`
    /// effect); the backward reads the mask.
    pub fn dropout(&mut self, name: &str, x: Var, p: f64) -> R<Var> {
        self.expect_float(name, x)?;
        if !(0.0..1.0).contains(&p) {
            return Err(TrainError::shape(name, format!("p {p} is not in [0, 1)")));
        }
        let y = self.activation_like(name, x)?;
        let shape = self.shape(x).to_vec();
        let mask = self.activation(&format!("{name}.mask"), DType::Bool, shape)?;
        let flops = 2.0 * numel(self.shape(x)) as f64;
        let op = NewOp::new(name, OpKind::AtenDropout, vec![x], vec![y, mask], flops)
            .attrs(json!({ "p": p, "train": true }));
        let scale = 1.0 / (1.0 - p);
        self.forward(op, Rule::Dropout { scale })?;
        Ok(y)
    }

    /// `embedding`: rows of `weight [V, D]` picked by integer `ids [*]` -> `[*, D]`.
    pub fn embedding(&mut self, name: &str, ids: Var, weight: Var) -> R<Var> {
        let int = matches!(self.dtype(ids), DType::I64 | DType::I32);
        self.expect_dtype(name, ids, int, "i64 or i32")?;
        self.expect_float(name, weight)?;
        self.expect_rank(name, weight, 2)?;
        let mut out = self.shape(ids).to_vec();
        out.push(self.shape(weight)[1]);
        let flops = numel(&out) as f64;
        let y = self.activation(name, self.dtype(weight), out)?;
        let op = NewOp::new(name, OpKind::Embedding, vec![ids, weight], vec![y], flops);
        self.forward(op, Rule::Embedding)?;
        Ok(y)
    }

    /// `reshape`: a view of `x` with another shape of the same element count.
    pub fn reshape(&mut self, name: &str, x: Var, shape: &[u64]) -> R<Var> {
        if numel(shape) != numel(self.shape(x)) {
            return Err(TrainError::shape(
                name,
                format!("cannot reshape {:?} to {shape:?}", self.shape(x)),
            ));
        }
        let y = self.view(name, x, shape.to_vec())?;
        self.forward(
            NewOp::new(name, OpKind::Reshape, vec![x], vec![y], 0.0),
            Rule::Reshape,
        )?;
        Ok(y)
    }

    /// `reshape` to `[N, rest]`: a view.
    pub fn flatten(&mut self, name: &str, x: Var) -> R<Var> {
        let s = self.shape(x);
        let Some((&n, rest)) = s.split_first() else {
            return Err(TrainError::shape(name, "cannot flatten a scalar"));
        };
        let shape = [n, numel(rest)];
        self.reshape(name, x, &shape)
    }

    /// `transpose`: a contiguous copy with axes permuted, `out.shape[i] = x.shape[perm[i]]`.
    pub fn transpose(&mut self, name: &str, x: Var, perm: &[usize]) -> R<Var> {
        let s = self.shape(x).to_vec();
        let mut seen = vec![false; s.len()];
        let valid = perm.len() == s.len()
            && perm
                .iter()
                .all(|&p| p < s.len() && !std::mem::replace(&mut seen[p], true));
        if !valid {
            return Err(TrainError::shape(
                name,
                format!("{perm:?} is not a permutation of the axes of {s:?}"),
            ));
        }
        let out: Vec<u64> = perm.iter().map(|&p| s[p]).collect();
        let flops = numel(&out) as f64;
        let y = self.activation(name, self.dtype(x), out)?;
        let op = NewOp::new(name, OpKind::Transpose, vec![x], vec![y], flops)
            .attrs(json!({ "perm": perm }));
        let rule = Rule::Transpose {
            perm: perm.to_vec(),
        };
        self.forward(op, rule)?;
        Ok(y)
    }

    /// `concat` along `axis`; every other axis must agree.
    pub fn concat(&mut self, name: &str, xs: &[Var], axis: usize) -> R<Var> {
        let Some(&first) = xs.first() else {
            return Err(TrainError::shape(name, "concat needs at least one operand"));
        };
        let mut out = self.shape(first).to_vec();
        if axis >= out.len() {
            return Err(TrainError::shape(
                name,
                format!("axis {axis} out of range for {out:?}"),
            ));
        }
        out[axis] = 0;
        for &x in xs {
            self.expect_float(name, x)?;
            let s = self.shape(x);
            let agrees = s.len() == out.len()
                && s.iter()
                    .zip(&out)
                    .enumerate()
                    .all(|(i, (a, b))| i == axis || a == b);
            if !agrees {
                return Err(TrainError::shape(
                    name,
                    format!(
                        "operand `{}` {s:?} does not match the others off axis {axis}",
                        self.name_of(x)
                    ),
                ));
            }
            out[axis] = out[axis].saturating_add(s[axis]);
        }
        let flops = numel(&out) as f64;
        let y = self.activation(name, self.dtype(first), out)?;
        let op = NewOp::new(name, OpKind::Concat, xs.to_vec(), vec![y], flops)
            .attrs(json!({ "axis": axis }));
        self.forward(op, Rule::Concat { axis })?;
        Ok(y)
    }

    /// `upsample_nearest2x`: `x [N, C, H, W]` -> `[N, C, 2H, 2W]`, each pixel repeated 2x2.
    pub fn upsample_nearest2x(&mut self, name: &str, x: Var) -> R<Var> {
        self.expect_float(name, x)?;
        self.expect_rank(name, x, 4)?;
        let s = self.shape(x);
        let out = vec![s[0], s[1], s[2].saturating_mul(2), s[3].saturating_mul(2)];
        let flops = numel(&out) as f64;
        let y = self.activation(name, self.dtype(x), out)?;
        let op = NewOp::new(name, OpKind::Upsample2x, vec![x], vec![y], flops);
        self.forward(op, Rule::Upsample2x)?;
        Ok(y)
    }

    /// `cross_entropy`: mean over all rows of `-log softmax(logits)[label]`, logits
    /// `[*, C]`, i64 labels `[*]`; a scalar.
    pub fn cross_entropy(&mut self, name: &str, logits: Var, labels: Var) -> R<Var> {
        self.expect_float(name, logits)?;
        self.expect_dtype(name, labels, self.dtype(labels) == DType::I64, "i64")?;
        let s = self.shape(logits);
        if s.len() < 2 || self.shape(labels) != &s[..s.len() - 1] {
            return Err(TrainError::shape(
                name,
                format!(
                    "logits [*, C] need labels [*]: got logits {s:?}, labels {:?}",
                    self.shape(labels)
                ),
            ));
        }
        let flops = 5.0 * numel(s) as f64;
        let y = self.activation(name, self.dtype(logits), vec![])?;
        let op = NewOp::new(
            name,
            OpKind::CrossEntropy,
            vec![logits, labels],
            vec![y],
            flops,
        )
        .attrs(json!({ "reduction": "mean" }));
        self.forward(op, Rule::CrossEntropy)?;
        Ok(y)
    }
}

/// Output length of a sliding window (convolution, pooling).
fn window_out(op: &str, len: u64, kernel: u64, stride: u64, padding: u64) -> R<u64> {
    let padded = len.saturating_add(padding.saturating_mul(2));
    if stride == 0 || kernel == 0 || padded < kernel {
        return Err(TrainError::shape(
            op,
            format!(
                "window {kernel} (stride {stride}, padding {padding}) does not fit length {len}"
            ),
        ));
    }
    Ok((padded - kernel) / stride + 1)
}
