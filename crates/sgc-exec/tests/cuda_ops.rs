//! Every kernel on small operands, driven through the `Backend` trait: the CPU backend
//! writes every output byte (outputs are poisoned with NaN first), and where a CUDA device
//! exists, the CUDA backend matches the CPU reference within a tolerance and repeats its
//! own bits exactly. Without a device (or without `--features cuda`) the CUDA half is
//! skipped with the reason and counted as ignored (harness `skip`).

mod skip;

use sgc_exec::kernel::{FamilyKernel, Kernel};
use sgc_exec::{Backend, CpuBackend, CudaBackend, ExecError, Operand, View, ViewStep};
use sgc_ir::ops::OpKind;
use sgc_ir::DType;

/// Deterministic values in `[-1, 1)` (xorshift).
struct Values(u64);

impl Values {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn f32(&mut self, shape: &[usize]) -> Input {
        let n = shape.iter().product();
        Input::F32(shape.to_vec(), (0..n).map(|_| self.next()).collect())
    }

    /// Small integers as floats: max-pool windows with ties.
    fn ties(&mut self, shape: &[usize]) -> Input {
        let n = shape.iter().product();
        let v = (0..n).map(|_| (self.next() * 3.0).round()).collect();
        Input::F32(shape.to_vec(), v)
    }

    /// Values in `[lo, lo + 1)` (positive invstd/rstd).
    fn from(&mut self, shape: &[usize], lo: f32) -> Input {
        let n = shape.iter().product();
        let v = (0..n).map(|_| lo + 0.5 * (self.next() + 1.0)).collect();
        Input::F32(shape.to_vec(), v)
    }

    fn ids(&mut self, shape: &[usize], bound: usize, i64s: bool) -> Input {
        let n: usize = shape.iter().product();
        let v: Vec<i64> = (0..n)
            .map(|_| (((self.next() + 1.0) * 0.5 * bound as f32) as i64).min(bound as i64 - 1))
            .collect();
        if i64s {
            Input::I64(shape.to_vec(), v)
        } else {
            Input::I32(shape.to_vec(), v.iter().map(|&x| x as i32).collect())
        }
    }
}

enum Input {
    F32(Vec<usize>, Vec<f32>),
    I64(Vec<usize>, Vec<i64>),
    I32(Vec<usize>, Vec<i32>),
    Bool(Vec<usize>, Vec<bool>),
}

impl Input {
    fn shape(&self) -> &[usize] {
        match self {
            Input::F32(s, _) | Input::I64(s, _) | Input::I32(s, _) | Input::Bool(s, _) => s,
        }
    }

    fn dtype(&self) -> DType {
        match self {
            Input::F32(..) => DType::F32,
            Input::I64(..) => DType::I64,
            Input::I32(..) => DType::I32,
            Input::Bool(..) => DType::Bool,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            Input::F32(_, v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Input::I64(_, v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Input::I32(_, v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Input::Bool(_, v) => v.iter().map(|&x| u8::from(x)).collect(),
        }
    }
}

struct Case {
    label: String,
    kernel: Kernel,
    inputs: Vec<Input>,
    outputs: Vec<(Vec<usize>, DType)>,
    /// Input `i` read through a view of the stored input: `(i, view)`.
    view: Option<(usize, View)>,
}

/// The op kind a case label starts with: its name, or an ATen name without its `aten.`
/// prefix or overload (`addmm` for `aten.addmm.default`) when that names one kind.
fn kind_of(label: &str) -> OpKind {
    let token = label.split(' ').next().unwrap_or_default();
    let aten = format!("aten.{token}");
    let prefix = format!("{aten}.");
    let mut found = OpKind::ALL.iter().filter(|k| k.name().starts_with(&prefix));
    let by_prefix = match (found.next(), found.next()) {
        (Some(k), None) => Some(*k),
        _ => None,
    };
    OpKind::parse(token)
        .or_else(|| OpKind::parse(&aten))
        .or(by_prefix)
        .unwrap_or_else(|| panic!("case `{label}` starts with no op kind's name"))
}

/// A case labelled by its op kind's name ([`kind_of`]), then what sets it apart.
fn case(
    label: &str,
    kernel: impl Into<FamilyKernel>,
    inputs: Vec<Input>,
    outputs: &[&[usize]],
) -> Case {
    Case {
        label: label.to_string(),
        kernel: Kernel::new(kind_of(label), kernel),
        inputs,
        outputs: outputs.iter().map(|s| (s.to_vec(), DType::F32)).collect(),
        view: None,
    }
}

impl Case {
    /// Output `i` of dtype `dtype` (indices, masks, counters).
    fn typed(mut self, i: usize, dtype: DType) -> Case {
        self.outputs[i].1 = dtype;
        self
    }

    /// Input `i` read through `steps` from its stored shape.
    fn viewed(mut self, i: usize, steps: Vec<ViewStep>) -> Case {
        let base = self.inputs[i].shape().to_vec();
        self.view = Some((i, View { base, steps }));
        self
    }
}

/// The shape a view gives.
fn view_shape(v: &View) -> Vec<usize> {
    let mut shape = v.base.clone();
    for step in &v.steps {
        shape = match step {
            ViewStep::Reshape(to) | ViewStep::Expand(to) => to.clone(),
            ViewStep::Permute(p) => p.iter().map(|&a| shape[a]).collect(),
            slice @ ViewStep::Slice { .. } => slice.sliced(&shape),
        };
    }
    shape
}

fn matmul_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Linalg::*;
    let t = |transpose_b| MatMul { transpose_b };
    out.push(case(
        "matmul",
        t(false),
        vec![v.f32(&[2, 3, 4]), v.f32(&[4, 5])],
        &[&[2, 3, 5]],
    ));
    out.push(case(
        "matmul ^T",
        t(true),
        vec![v.f32(&[6, 4]), v.f32(&[5, 4])],
        &[&[6, 5]],
    ));
    out.push(case(
        "matmul k=0",
        t(false),
        vec![v.f32(&[3, 0]), v.f32(&[0, 2])],
        &[&[3, 2]],
    ));
    out.push(case(
        "matmul_tn",
        MatMulTn,
        vec![v.f32(&[2, 3, 4]), v.f32(&[2, 3, 5])],
        &[&[4, 5]],
    ));
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let a = if ta { [2, 4, 3] } else { [2, 3, 4] };
        let b = if tb { [2, 5, 4] } else { [2, 4, 5] };
        let k = BatchedMatMul {
            transpose_a: ta,
            transpose_b: tb,
        };
        out.push(case(
            &format!("batched_matmul {ta} {tb}"),
            k,
            vec![v.f32(&a), v.f32(&b)],
            &[&[2, 3, 5]],
        ));
    }
}

fn elementwise_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Elementwise::*;
    let s: &[usize] = &[3, 5, 7];
    let big: &[usize] = &[300, 1001];
    for (k, name) in [
        (Add, "add"),
        (Mul, "mul"),
        (ReluGrad, "relu_grad"),
        (GeluGrad, "gelu_grad"),
        (GeluTanhBackward, "gelu_backward tanh"),
    ] {
        out.push(case(name, k.clone(), vec![v.f32(s), v.f32(s)], &[s]));
        out.push(case(
            &format!("{name} big"),
            k,
            vec![v.f32(big), v.f32(big)],
            &[big],
        ));
    }
    let reshape = FamilyKernel::from(sgc_exec::kernel::Shape::Reshape);
    for (k, name) in [
        (Relu.into(), "relu"),
        (Gelu.into(), "gelu"),
        (reshape, "reshape"),
    ] {
        out.push(case(name, k, vec![v.f32(s)], &[s]));
    }
    for (shape, axis) in [
        (&[2usize, 3, 4, 5][..], 1usize),
        (&[6, 7][..], 1),
        (&[70, 9, 50][..], 1),
    ] {
        let bias = v.f32(&[shape[axis]]);
        out.push(case(
            "bias_add",
            BiasAdd { axis },
            vec![v.f32(shape), bias],
            &[shape],
        ));
        out.push(case(
            "bias_add_grad",
            BiasAddGrad { axis },
            vec![v.f32(shape)],
            &[&[shape[axis]]],
        ));
    }
    let sgd = SgdUpdate { lr: 0.1 };
    out.push(case(
        "sgd_update",
        sgd,
        vec![v.f32(&[5, 6]), v.f32(&[5, 6])],
        &[],
    ));
}

/// The pooling cases' input `[2, 3, 7, 6]`, its pooled shape and the window's tag.
fn pooled(kernel: usize, stride: usize, padding: usize) -> ([usize; 4], [usize; 4], String) {
    let out = |len: usize| (len + 2 * padding - kernel) / stride + 1;
    let tag = format!("k{kernel} s{stride} p{padding}");
    ([2, 3, 7, 6], [2, 3, out(7), out(6)], tag)
}

fn conv_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Conv::*, Pool::*};
    for (stride, padding, hw, k) in [(2, 1, [7, 6], 3), (1, 0, [5, 5], 1), (1, 2, [4, 6], 3)] {
        let ho = (hw[0] + 2 * padding - k) / stride + 1;
        let wo = (hw[1] + 2 * padding - k) / stride + 1;
        let (x, w, y) = ([2, 3, hw[0], hw[1]], [4, 3, k, k], [2, 4, ho, wo]);
        let tag = format!("s{stride} p{padding} k{k}");
        // (name, kernel, input shapes, output shape)
        for (name, kernel, [a, b], result) in [
            (
                "conv2d",
                Conv2d {
                    stride,
                    padding: [padding; 2],
                },
                [x, w],
                y,
            ),
            (
                "conv2d_grad_input",
                Conv2dGradInput {
                    stride,
                    padding: [padding; 2],
                },
                [y, w],
                x,
            ),
            (
                "conv2d_grad_weight",
                Conv2dGradWeight {
                    stride,
                    padding: [padding; 2],
                },
                [x, y],
                w,
            ),
        ] {
            let ins = vec![v.f32(&a), v.f32(&b)];
            out.push(case(&format!("{name} {tag}"), kernel, ins, &[&result]));
        }
    }
    for (kernel, stride, padding) in [(3, 2, 1), (2, 2, 0), (3, 1, 1)] {
        let (x, y, tag) = pooled(kernel, stride, padding);
        let mp = MaxPool2d {
            kernel,
            stride,
            padding,
        };
        out.push(case(
            &format!("max_pool2d {tag}"),
            mp,
            vec![v.ties(&x)],
            &[&y],
        ));
        let mg = MaxPool2dGrad {
            kernel,
            stride,
            padding,
        };
        out.push(case(
            &format!("max_pool2d_grad {tag}"),
            mg,
            vec![v.ties(&x), v.f32(&y)],
            &[&x],
        ));
    }
    out.push(case(
        "global_avg_pool",
        GlobalAvgPool,
        vec![v.f32(&[2, 3, 30, 20])],
        &[&[2, 3]],
    ));
    let gg = GlobalAvgPoolGrad;
    out.push(case(
        "global_avg_pool_grad",
        gg,
        vec![v.f32(&[2, 3])],
        &[&[2, 3, 5, 4]],
    ));
    out.push(case(
        "upsample_nearest2x",
        Upsample2x,
        vec![v.f32(&[2, 3, 4, 5])],
        &[&[2, 3, 8, 10]],
    ));
    let ug = Upsample2xGrad;
    out.push(case(
        "upsample_nearest2x_grad",
        ug,
        vec![v.f32(&[2, 3, 8, 10])],
        &[&[2, 3, 4, 5]],
    ));
}

fn norm_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Loss::*, Norm::*};
    for x in [&[4usize, 3, 5, 2][..], &[8, 2, 40, 3][..]] {
        let c = x[1];
        let ins = vec![v.f32(x), v.from(&[c], 0.5), v.f32(&[c])];
        out.push(case(
            "batch_norm",
            BatchNorm { eps: 1e-5 },
            ins,
            &[x, &[c], &[c]],
        ));
        let ins = vec![
            v.f32(x),
            v.from(&[c], 0.5),
            v.f32(&[c]),
            v.from(&[c], 0.5),
            v.f32(x),
        ];
        out.push(case(
            "batch_norm_grad",
            BatchNormGrad,
            ins,
            &[x, &[c], &[c]],
        ));
    }
    for x in [&[3usize, 4, 37][..], &[5, 600][..]] {
        let (d, rows) = (x[x.len() - 1], x[..x.len() - 1].to_vec());
        let ins = vec![v.f32(x), v.from(&[d], 0.5), v.f32(&[d])];
        out.push(case(
            "layer_norm",
            LayerNorm { eps: 1e-5, axes: 1 },
            ins,
            &[x, &rows, &rows],
        ));
        let ins = vec![
            v.f32(x),
            v.from(&[d], 0.5),
            v.f32(&rows),
            v.from(&rows, 0.5),
            v.f32(x),
        ];
        out.push(case(
            "layer_norm_grad",
            LayerNormGrad,
            ins,
            &[x, &[d], &[d]],
        ));
    }
    for (x, causal) in [
        (&[2usize, 3, 5, 5][..], true),
        (&[4, 300][..], false),
        (&[2, 300, 300][..], true),
    ] {
        let k = Softmax { scale: 0.5, causal };
        out.push(case(
            &format!("softmax causal={causal}"),
            k,
            vec![v.f32(x)],
            &[x],
        ));
        let g = SoftmaxGrad { scale: 0.5 };
        out.push(case(
            "softmax_grad",
            g,
            vec![v.from(x, 0.0), v.f32(x)],
            &[x],
        ));
    }
    for (logits, labels, i64s) in [
        (&[6usize, 10][..], &[6usize][..], true),
        (&[2, 3, 700][..], &[2, 3][..], false),
    ] {
        let c = logits[logits.len() - 1];
        let ins = vec![v.f32(logits), v.ids(labels, c, i64s)];
        out.push(case("cross_entropy", CrossEntropy, ins, &[&[]]));
        let ins = vec![v.f32(logits), v.ids(labels, c, i64s)];
        out.push(case("cross_entropy_grad", CrossEntropyGrad, ins, &[logits]));
    }
}

fn shape_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Embedding as E, Shape::*};
    for i64s in [true, false] {
        let ins = vec![v.ids(&[4, 6], 7, i64s), v.f32(&[7, 5])];
        out.push(case("embedding", E::Embedding, ins, &[&[4, 6, 5]]));
        let ins = vec![v.ids(&[4, 6], 7, i64s), v.f32(&[4, 6, 5])];
        out.push(case("embedding_grad", E::EmbeddingGrad, ins, &[&[7, 5]]));
    }
    for (x, perm) in [
        (vec![2usize, 3, 4, 5], vec![0usize, 2, 3, 1]),
        (vec![4, 6], vec![1, 0]),
    ] {
        let y: Vec<usize> = perm.iter().map(|&p| x[p]).collect();
        out.push(case(
            "transpose",
            Transpose { perm },
            vec![v.f32(&x)],
            &[&y],
        ));
    }
    let ins = vec![v.f32(&[2, 3, 4]), v.f32(&[2, 5, 4]), v.f32(&[2, 1, 4])];
    out.push(case("concat", Concat { axis: 1 }, ins, &[&[2, 9, 4]]));
    let sl = Slice {
        axis: 1,
        start: 3,
        end: 8,
        step: 1,
    };
    out.push(case("slice", sl, vec![v.f32(&[2, 9, 4])], &[&[2, 5, 4]]));
    // Swin's patch merging, `x[:, 1::2]`: a strided read.
    let sl = Slice {
        axis: 1,
        start: 1,
        end: 9,
        step: 2,
    };
    out.push(case(
        "slice by 2",
        sl,
        vec![v.f32(&[2, 9, 4])],
        &[&[2, 4, 4]],
    ));
}

/// The exporter's element-wise ops: scalar arithmetic (an i64 counter too), broadcasting,
/// fills, every pointwise function and its gradient.
fn exporter_elementwise_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{BinOp, Elementwise::*, Unary};
    let s: &[usize] = &[3, 5, 7];
    for (name, k) in [
        ("add.Scalar", AddScalar { value: 0.25 }),
        ("mul.Scalar", MulScalar { value: -1.5 }),
        ("div.Scalar", DivScalar { value: 3.0 }),
        ("fill", Fill { value: 1.0 }),
        ("zeros", Zeros { inputs: 1 }),
        ("leaky_relu", LeakyRelu { slope: 0.1 }),
    ] {
        out.push(case(name, k, vec![v.f32(s)], &[s]));
    }
    let counter = Input::I64(vec![1], vec![41]);
    out.push(
        case(
            "add.Scalar i64",
            AddScalar { value: 1.0 },
            vec![counter],
            &[&[1]],
        )
        .typed(0, DType::I64),
    );
    for (name, k) in [
        ("threshold_backward", ThresholdBackward { threshold: 0.0 }),
        ("leaky_relu_backward", LeakyReluBackward { slope: 0.1 }),
    ] {
        out.push(case(name, k, vec![v.f32(s), v.f32(s)], &[s]));
    }
    for &u in Unary::ALL {
        let x = Input::F32(
            s.to_vec(),
            (0..105).map(|i| (i as f32 - 52.0) * 0.5 + 0.01).collect(),
        );
        out.push(case(u.kinds().0.name(), Pointwise(u), vec![x], &[s]));
        let val = if u.grad_reads_output() {
            v.from(s, 0.0)
        } else {
            v.f32(s)
        };
        out.push(case(
            u.kinds().1.name(),
            PointwiseBackward(u),
            vec![v.f32(s), val],
            &[s],
        ));
    }
    for op in [BinOp::Add, BinOp::Sub, BinOp::Mul] {
        let ins = vec![v.f32(&[4, 1, 6]), v.f32(&[3, 1])];
        out.push(case(
            &format!("{}.Tensor", format!("{op:?}").to_lowercase()),
            Broadcast { op },
            ins,
            &[&[4, 3, 6]],
        ));
    }
}

/// addmm, reductions, norms' backward, log-softmax, nll loss.
fn exporter_norm_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Linalg::AddMm, Loss::*, Norm::*, Reduce};
    out.push(case(
        "addmm",
        AddMm { transpose_b: false },
        vec![v.f32(&[5]), v.f32(&[3, 4]), v.f32(&[4, 5])],
        &[&[3, 5]],
    ));
    out.push(case(
        "addmm ^T",
        AddMm { transpose_b: true },
        vec![v.f32(&[5]), v.f32(&[3, 4]), v.f32(&[5, 4])],
        &[&[3, 5]],
    ));
    for (start, end, mean, y) in [
        (0, 1, false, vec![5, 6]),
        (1, 3, true, vec![4]),
        (0, 3, false, vec![]),
    ] {
        let axes = (start..end).collect();
        let k = Reduce {
            start,
            end,
            axes,
            mean,
            rank: 3,
        };
        out.push(case(
            &format!("{} {start}..{end}", if mean { "mean" } else { "sum" }),
            k,
            vec![v.f32(&[4, 5, 6])],
            &[&y],
        ));
    }
    let (x, c) = ([4usize, 3, 5, 2], 3usize);
    for mask in [[true; 3], [true, false, true], [false, true, false]] {
        let ins = vec![
            v.f32(&x),
            v.f32(&x),
            v.from(&[c], 0.5),
            v.f32(&[c]),
            v.from(&[c], 0.5),
        ];
        let shapes: [&[usize]; 3] = [&x, &[c], &[c]];
        let outs: Vec<&[usize]> = (0..3).filter(|&i| mask[i]).map(|i| shapes[i]).collect();
        out.push(case(
            &format!("native_batch_norm_backward {mask:?}"),
            BatchNormBackward { mask },
            ins,
            &outs,
        ));
    }
    let (x, d, rows) = ([3usize, 4, 37], 37usize, [3usize, 4]);
    let ins = vec![
        v.f32(&x),
        v.f32(&x),
        v.f32(&rows),
        v.from(&rows, 0.5),
        v.from(&[d], 0.5),
        v.f32(&[d]),
    ];
    out.push(case(
        "native_layer_norm_backward",
        LayerNormBackward {
            mask: [true; 3],
            axes: 1,
        },
        ins,
        &[&x, &[d], &[d]],
    ));
    let ins = vec![
        v.f32(&[c]),
        v.from(&[c], 0.5),
        v.f32(&[c]),
        v.from(&[c], 0.5),
    ];
    let k = BatchNormUpdateStats {
        momentum: 0.1,
        eps: 1e-5,
        count: 40,
    };
    out.push(case("sgc.batch_norm_update_stats", k, ins, &[&[c], &[c]]));
    let x: &[usize] = &[6, 300];
    out.push(case(
        "_softmax_backward_data",
        SoftmaxBackward,
        vec![v.f32(x), v.from(x, 0.0)],
        &[x],
    ));
    let last = x.len() - 1;
    out.push(case(
        "_log_softmax",
        LogSoftmax { axis: last },
        vec![v.f32(x)],
        &[x],
    ));
    out.push(case(
        "_log_softmax_backward_data",
        LogSoftmaxBackward { axis: last },
        vec![v.f32(x), v.f32(x)],
        &[x],
    ));
    let planes: &[usize] = &[2, 3, 4, 5];
    let k = LogSoftmax { axis: 1 };
    out.push(case(
        "_log_softmax over axis 1",
        k,
        vec![v.f32(planes)],
        &[planes],
    ));
    let k = LogSoftmaxBackward { axis: 1 };
    let ins = vec![v.f32(planes), v.f32(planes)];
    out.push(case(
        "_log_softmax_backward_data over axis 1",
        k,
        ins,
        &[planes],
    ));
    let ins = vec![v.f32(planes), v.ids(&[2, 4, 5], 3, true)];
    let k = NllLoss { ignore_index: 1 };
    out.push(case("nll_loss2d_forward", k, ins, &[&[], &[]]));
    let ins = vec![
        v.f32(&[]),
        v.f32(planes),
        v.ids(&[2, 4, 5], 3, false),
        v.from(&[], 4.0),
    ];
    let k = NllLossBackward { ignore_index: -100 };
    out.push(case("nll_loss2d_backward", k, ins, &[planes]));
    for (ignore_index, i64s) in [(-100, true), (2, false)] {
        let ins = vec![v.f32(&[8, 5]), v.ids(&[8], 5, i64s)];
        out.push(case(
            &format!("nll_loss_forward ignore {ignore_index}"),
            NllLoss { ignore_index },
            ins,
            &[&[], &[]],
        ));
        let ins = vec![
            v.f32(&[]),
            v.f32(&[8, 5]),
            v.ids(&[8], 5, i64s),
            v.from(&[], 4.0),
        ];
        out.push(case(
            "nll_loss_backward",
            NllLossBackward { ignore_index },
            ins,
            &[&[8, 5]],
        ));
    }
}

/// Transposed convolutions (forward with and without bias, backward) and a 1x3 window
/// padded on the columns only.
fn transposed_and_padded_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Conv::*;
    let padding = [0, 1];
    for (stride, x, w, y) in [
        (2, [2, 4, 3, 3], [4, 3, 2, 2], [2, 3, 6, 6]),
        (1, [2, 4, 5, 4], [4, 3, 3, 1], [2, 3, 7, 4]),
    ] {
        for bias in [true, false] {
            let mut ins = vec![v.f32(&x), v.f32(&w)];
            if bias {
                ins.push(v.f32(&[3]));
            }
            let k = ConvTransposed {
                stride,
                padding: [0; 2],
                bias,
            };
            out.push(case(
                &format!("convolution transposed s{stride} bias {bias}"),
                k,
                ins,
                &[&y],
            ));
        }
        let ins = vec![v.f32(&y), v.f32(&x), v.f32(&w)];
        let k = ConvTransposedBackward {
            stride,
            padding: [0; 2],
            mask: [true; 3],
        };
        let label = format!("convolution_backward transposed s{stride}");
        out.push(case(&label, k, ins, &[&x, &w, &[3]]));
    }
    let (x, w, y) = ([2, 3, 5, 6], [4, 3, 1, 3], [2, 4, 5, 6]);
    let k = Conv2d { stride: 1, padding };
    out.push(case(
        "convolution padded [0, 1]",
        k,
        vec![v.f32(&x), v.f32(&w)],
        &[&y],
    ));
    let ins = vec![v.f32(&y), v.f32(&x), v.f32(&w)];
    let k = ConvBackward {
        stride: 1,
        padding,
        groups: 1,
        mask: [true, true, false],
    };
    out.push(case(
        "convolution_backward padded [0, 1]",
        k,
        ins,
        &[&x, &w],
    ));
}

/// Max-pooling indices inside each window of `x [.., h, w]` pooled to `y`: a tap of the
/// window drawn from `v` (as the forward's argmax would be).
fn window_indices(
    v: &mut Values,
    y: &[usize],
    (h, w): (usize, usize),
    (k, stride, pad): (usize, usize, usize),
) -> Input {
    let (ho, wo) = (y[2], y[3]);
    let mut pick = |o: usize, len: usize| {
        let lo = (o * stride).saturating_sub(pad);
        let hi = (o * stride + k - pad).min(len);
        lo + (((v.next() + 1.0) * 0.5 * (hi - lo) as f32) as usize).min(hi - lo - 1)
    };
    let n = y.iter().product::<usize>() / (ho * wo);
    let idx = (0..n * ho * wo)
        .map(|e| (pick((e / wo) % ho, h) * w + pick(e % wo, w)) as i64)
        .collect();
    Input::I64(y.to_vec(), idx)
}

/// Grouped convolutions and their backward, pooling with indices and average pooling.
fn exporter_conv_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Conv::*, Pool::*};
    transposed_and_padded_cases(v, out);
    // Groups of one channel (depthwise, also with two outputs per channel and a 5x5
    // window) and of two run the direct kernels; 32 channels per group with a 3x3 window
    // (288 taps) the im2col path per group.
    for (groups, bias, x, w, y, stride, padding) in [
        (1, true, [2, 6, 7, 6], [6, 6, 3, 3], [2, 6, 4, 3], 2, [1, 1]),
        (
            3,
            false,
            [2, 6, 7, 6],
            [6, 2, 3, 3],
            [2, 6, 4, 3],
            2,
            [1, 1],
        ),
        (6, true, [2, 6, 7, 6], [6, 1, 3, 3], [2, 6, 4, 3], 2, [1, 1]),
        (4, true, [2, 4, 7, 6], [8, 1, 3, 3], [2, 8, 4, 3], 2, [1, 1]),
        (
            3,
            false,
            [2, 3, 6, 5],
            [3, 1, 5, 5],
            [2, 3, 6, 5],
            1,
            [2, 2],
        ),
        (
            2,
            true,
            [1, 64, 4, 4],
            [4, 32, 3, 3],
            [1, 4, 4, 4],
            1,
            [1, 1],
        ),
    ] {
        let o = w[0];
        let mut ins = vec![v.f32(&x), v.f32(&w)];
        if bias {
            ins.push(v.f32(&[o]));
        }
        let k = ConvGrouped {
            stride,
            padding,
            groups,
            bias,
        };
        let shape = format!("{x:?} by {w:?}");
        out.push(case(
            &format!("convolution groups {groups} bias {bias} {shape}"),
            k,
            ins,
            &[&y],
        ));
        for mask in [[true; 3], [false, true, false]] {
            let ins = vec![v.f32(&y), v.f32(&x), v.f32(&w)];
            let shapes: [&[usize]; 3] = [&x, &w, &[o]];
            let outs: Vec<&[usize]> = (0..3).filter(|&i| mask[i]).map(|i| shapes[i]).collect();
            let k = ConvBackward {
                stride,
                padding,
                groups,
                mask,
            };
            out.push(case(
                &format!("convolution_backward groups {groups} {mask:?} {shape}"),
                k,
                ins,
                &outs,
            ));
        }
    }
    for (kernel, stride, padding) in [(3, 2, 1), (2, 2, 0)] {
        let (x, y, tag) = pooled(kernel, stride, padding);
        let idx = window_indices(v, &y, (7, 6), (kernel, stride, padding));
        let (mi, mb) = (
            MaxPool2dIndices {
                kernel,
                stride,
                padding,
                ceil: false,
            },
            MaxPool2dIndicesBackward {
                kernel,
                stride,
                padding,
                ceil: false,
            },
        );
        let (ap, ab) = (
            AvgPool2d {
                kernel,
                stride,
                padding,
                ceil: false,
                divisor: Default::default(),
            },
            AvgPool2dBackward {
                kernel,
                stride,
                padding,
                ceil: false,
                divisor: Default::default(),
            },
        );
        let with_indices = case(
            &format!("max_pool2d_with_indices {tag}"),
            mi,
            vec![v.ties(&x)],
            &[&y, &y],
        );
        out.push(with_indices.typed(1, DType::I64));
        // (name, kernel, inputs, output)
        for (name, k, ins, result) in [
            (
                "max_pool2d_with_indices_backward",
                mb,
                vec![v.f32(&y), v.f32(&x), idx],
                x,
            ),
            ("avg_pool2d", ap, vec![v.f32(&x)], y),
            ("avg_pool2d_backward", ab, vec![v.f32(&y), v.f32(&x)], x),
        ] {
            out.push(case(&format!("{name} {tag}"), k, ins, &[&result]));
        }
    }
}

/// ATen embedding, split/unbind/stack/expand/copy and an i64 reshape.
fn exporter_shape_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Embedding as E, Shape::*};
    out.push(case(
        "aten.embedding.default",
        E::EmbeddingRows,
        vec![v.f32(&[7, 5]), v.ids(&[4, 6], 7, true)],
        &[&[4, 6, 5]],
    ));
    for padding_idx in [None, Some(2)] {
        let ins = vec![v.f32(&[4, 6, 5]), v.ids(&[4, 6], 7, false)];
        out.push(case(
            &format!("embedding_dense_backward {padding_idx:?}"),
            E::EmbeddingDenseBackward { padding_idx },
            ins,
            &[&[7, 5]],
        ));
    }
    let x: &[usize] = &[2, 7, 3];
    out.push(case(
        "split",
        Split { axis: 1, size: 3 },
        vec![v.f32(x)],
        &[&[2, 3, 3], &[2, 3, 3], &[2, 1, 3]],
    ));
    out.push(case(
        "unbind",
        Unbind { axis: 2 },
        vec![v.f32(x)],
        &[&[2, 7], &[2, 7], &[2, 7]],
    ));
    out.push(case(
        "stack",
        Stack { axis: 1 },
        vec![v.f32(&[2, 3]), v.f32(&[2, 3])],
        &[&[2, 2, 3]],
    ));
    out.push(case("expand", Expand, vec![v.f32(&[3, 1])], &[&[2, 3, 4]]));
    out.push(case(
        "copy",
        Assign,
        vec![v.f32(&[2, 3, 4]), v.f32(&[4])],
        &[&[2, 3, 4]],
    ));
    out.push(case(
        "copy_",
        CopyInto,
        vec![v.f32(&[2, 3]), v.f32(&[2, 3])],
        &[],
    ));
    let ids = v.ids(&[3, 4], 9, true);
    out.push(case("reshape i64", Reshape, vec![ids], &[&[12]]).typed(0, DType::I64));
}

/// Random draws (a second run draws the stream's next values) and view operands.
fn exporter_random_and_view_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Linalg::MatMul, Random};
    let s: &[usize] = &[40, 50];
    out.push(case(
        "bernoulli",
        Random::Bernoulli { p: 0.3, seed: 7 },
        vec![v.f32(s)],
        &[s],
    ));
    out.push(
        case(
            "native_dropout",
            Random::Dropout { p: 0.2, seed: 9 },
            vec![v.f32(s)],
            &[s, s],
        )
        .typed(1, DType::Bool),
    );
    let mask = Input::Bool(s.to_vec(), (0..2000).map(|i| (i * 7) % 3 != 0).collect());
    out.push(case(
        "native_dropout_backward",
        Random::DropoutBackward { scale: 1.25 },
        vec![v.f32(s), mask],
        &[s],
    ));
    let mask = Input::Bool(s.to_vec(), (0..2000).map(|i| i % 4 != 1).collect());
    out.push(case(
        "mul.Tensor by mask",
        Random::MaskMul,
        vec![v.f32(s), mask],
        &[s],
    ));
    // Views: a transposed weight (read transposed), a broadcast, a slice of a permute.
    let mm = case(
        "mm of t(w)",
        MatMul { transpose_b: false },
        vec![v.f32(&[3, 4]), v.f32(&[5, 4])],
        &[&[3, 5]],
    );
    out.push(mm.viewed(1, vec![ViewStep::Permute(vec![1, 0])]));
    let steps = vec![ViewStep::Reshape(vec![3, 1]), ViewStep::Expand(vec![3, 5])];
    out.push(
        case(
            "relu of expand",
            sgc_exec::kernel::Elementwise::Relu,
            vec![v.f32(&[3])],
            &[&[3, 5]],
        )
        .viewed(0, steps),
    );
    let steps = vec![
        ViewStep::Permute(vec![0, 2, 1]),
        ViewStep::Slice {
            axis: 1,
            start: 1,
            end: 4,
            step: 1,
        },
        ViewStep::Reshape(vec![2, 12]),
    ];
    out.push(
        case(
            "relu of a sliced permute",
            sgc_exec::kernel::Elementwise::Relu,
            vec![v.f32(&[2, 4, 5])],
            &[&[2, 12]],
        )
        .viewed(0, steps),
    );
    // Swin's patch merging: every other row and column from 1, as two strided slice views.
    let every_other = |axis| ViewStep::Slice {
        axis,
        start: 1,
        end: 6,
        step: 2,
    };
    out.push(
        case(
            "relu of a strided slice",
            sgc_exec::kernel::Elementwise::Relu,
            vec![v.f32(&[2, 6, 6, 3])],
            &[&[2, 3, 3, 3]],
        )
        .viewed(0, vec![every_other(1), every_other(2)]),
    );
}

/// The transformer exports' ops: select and its gradient, gather and views of i64
/// positions, a `cat` beside a legacy empty operand, the sources, `pow`, `tril`, `where`,
/// and attention forward and backward (causal too).
fn exporter_transformer_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Attention, Elementwise as E, Shape::*};
    let sel = Select { axis: 1, index: 2 };
    out.push(case(
        "select",
        sel.clone(),
        vec![v.f32(&[2, 4, 5])],
        &[&[2, 5]],
    ));
    let ids = v.ids(&[3, 4, 5], 9, true);
    out.push(case("select i64", sel, vec![ids], &[&[3, 5]]).typed(0, DType::I64));
    let back = SelectBackward { axis: 0, index: 1 };
    out.push(case(
        "select_backward",
        back,
        vec![v.f32(&[4, 5])],
        &[&[3, 4, 5]],
    ));
    let (x, ids) = (v.ids(&[2, 7], 50, true), v.ids(&[2, 4], 7, true));
    let g = Gather { axis: 1 };
    out.push(case("gather i64", g, vec![x, ids], &[&[2, 4]]).typed(0, DType::I64));
    let ids = v.ids(&[1, 5], 9, true);
    out.push(case("expand i64", Expand, vec![ids], &[&[3, 5]]).typed(0, DType::I64));
    let empty = Input::F32(vec![0], vec![]);
    let ins = vec![empty, v.f32(&[2, 3, 4]), v.f32(&[2, 2, 4])];
    out.push(case(
        "cat beside a legacy empty",
        Concat { axis: 1 },
        ins,
        &[&[2, 5, 4]],
    ));
    let s: &[usize] = &[6, 7];
    out.push(case(
        "pow.Tensor_Scalar 3",
        E::PowScalar { exponent: 3.0 },
        vec![v.f32(s)],
        &[s],
    ));
    let pos = v.from(s, 0.1);
    out.push(case(
        "pow.Tensor_Scalar 0.7",
        E::PowScalar { exponent: 0.7 },
        vec![pos],
        &[s],
    ));
    let ones = E::Constant {
        value: 1.0,
        dtype: DType::Bool,
    };
    out.push(case("ones bool", ones, vec![], &[s]).typed(0, DType::Bool));
    let inf = E::Constant {
        value: -3.5,
        dtype: DType::F32,
    };
    out.push(case("scalar_tensor", inf, vec![], &[&[]]));
    let seven = E::Constant {
        value: 7.0,
        dtype: DType::I64,
    };
    out.push(case("scalar_tensor i64", seven, vec![], &[&[]]).typed(0, DType::I64));
    for dtype in [DType::I64, DType::F32] {
        let k = E::Arange {
            start: 2.0,
            step: 1.5,
            len: 9,
            dtype,
        };
        out.push(case(&format!("arange {}", dtype.as_str()), k, vec![], &[&[9]]).typed(0, dtype));
    }
    let mask = Input::Bool(vec![2, 5, 6], (0..60).map(|i| i % 7 != 3).collect());
    let tril = E::Tril {
        diagonal: 1,
        dtype: DType::Bool,
    };
    out.push(case("tril bool", tril, vec![mask], &[&[2, 5, 6]]).typed(0, DType::Bool));
    let tril = E::Tril {
        diagonal: -1,
        dtype: DType::F32,
    };
    out.push(case("tril f32", tril, vec![v.f32(&[3, 4])], &[&[3, 4]]));
    let cond = Input::Bool(vec![5, 1], (0..5).map(|i| i % 2 == 0).collect());
    let ins = vec![cond, v.f32(&[4, 5, 6]), v.f32(&[])];
    out.push(case("where", E::Where, ins, &[&[4, 5, 6]]));
    for causal in [false, true] {
        let (q, k, val) = (
            v.f32(&[2, 3, 5, 8]),
            v.f32(&[2, 3, 7, 8]),
            v.f32(&[2, 3, 7, 4]),
        );
        let fwd = Attention {
            backward: false,
            scale: None,
            causal,
            grouped: false,
        };
        let tag = format!("causal {causal}");
        let label = format!("_scaled_dot_product_flash_attention_for_cpu.default {tag}");
        out.push(case(
            &label,
            fwd,
            vec![q, k, val],
            &[&[2, 3, 5, 4], &[2, 3, 5]],
        ));
        let ins = vec![
            v.f32(&[2, 3, 5, 4]),
            v.f32(&[2, 3, 5, 8]),
            v.f32(&[2, 3, 7, 8]),
            v.f32(&[2, 3, 7, 4]),
            v.f32(&[2, 3, 5, 4]),
            v.from(&[2, 3, 5], 1.0),
        ];
        let bwd = Attention {
            backward: true,
            scale: Some(0.3),
            causal,
            grouped: false,
        };
        let label = format!("_scaled_dot_product_flash_attention_for_cpu_backward {tag}");
        out.push(case(
            &label,
            bwd,
            ins,
            &[&[2, 3, 5, 8], &[2, 3, 7, 8], &[2, 3, 7, 4]],
        ));
    }
}

fn cases() -> Vec<Case> {
    let mut v = Values(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    matmul_cases(&mut v, &mut out);
    elementwise_cases(&mut v, &mut out);
    conv_cases(&mut v, &mut out);
    norm_cases(&mut v, &mut out);
    shape_cases(&mut v, &mut out);
    exporter_elementwise_cases(&mut v, &mut out);
    exporter_norm_cases(&mut v, &mut out);
    exporter_conv_cases(&mut v, &mut out);
    exporter_shape_cases(&mut v, &mut out);
    exporter_random_and_view_cases(&mut v, &mut out);
    exporter_transformer_cases(&mut v, &mut out);
    math_cases(&mut v, &mut out);
    hardtanh_and_compare_cases(&mut v, &mut out);
    adaptive_pool_cases(&mut v, &mut out);
    layer_norm_over_axes_cases(&mut v, &mut out);
    strided_reduce_cases(&mut v, &mut out);
    scatter_pad_roll_cases(&mut v, &mut out);
    avg_pool_variant_cases(&mut v, &mut out);
    grouped_attention_cases(&mut v, &mut out);
    index_cases(&mut v, &mut out);
    integer_cases(&mut v, &mut out);
    out
}

/// Small integers of `dtype` (i64, i32 or bool): `-5..=5` (bools: odd ones true).
fn ints(v: &mut Values, shape: &[usize], dtype: DType) -> Input {
    let n: usize = shape.iter().product();
    let k: Vec<i64> = (0..n).map(|_| (v.next() * 5.0).round() as i64).collect();
    let shape = shape.to_vec();
    match dtype {
        DType::I64 => Input::I64(shape, k),
        DType::I32 => Input::I32(shape, k.iter().map(|&x| x as i32).collect()),
        _ => Input::Bool(shape, k.iter().map(|&x| x % 2 != 0).collect()),
    }
}

/// Integer and bool data as GPT-J's causal mask and rotary positions use them: integer
/// arithmetic (broadcast, wrapping), comparisons of integers with integers, floats and
/// numbers (whole and fractional), and data movement of i64, i32 and bool tensors
/// (permute, expand, slice by a step, select, views), gathers of f32 rows by i64 and i32
/// positions.
fn integer_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{BinOp, Cmp, Elementwise as E, Shape};
    let (a, b): (&[usize], &[usize]) = (&[4, 1, 6], &[3, 1]);
    let y: &[usize] = &[4, 3, 6];
    for dtype in [DType::I64, DType::I32] {
        for (name, op) in [
            ("add", BinOp::Add),
            ("sub", BinOp::Sub),
            ("mul", BinOp::Mul),
        ] {
            let ins = vec![ints(v, a, dtype), ints(v, b, dtype)];
            let label = format!("{name}.Tensor {}", dtype.as_str());
            out.push(case(&label, E::Broadcast { op }, ins, &[y]).typed(0, dtype));
        }
        let ins = vec![ints(v, y, dtype), ints(v, y, dtype)];
        out.push(case("add", E::Add, ins, &[y]).typed(0, dtype));
    }
    for (name, op) in [("eq", Cmp::Eq), ("le", Cmp::Le), ("gt", Cmp::Gt)] {
        for (da, db) in [(DType::I64, DType::I64), (DType::I32, DType::Bool)] {
            let ins = vec![ints(v, a, da), ints(v, b, db)];
            let label = format!("{name}.Tensor {} {}", da.as_str(), db.as_str());
            let k = E::CompareTensor { op };
            out.push(case(&label, k, ins, &[y]).typed(0, DType::Bool));
        }
        // An integer against floats: compared in f64 (`2 <= 2.4`, `-3 > -3.5`).
        let ins = vec![ints(v, a, DType::I64), v.ties(b)];
        let label = format!("{name}.Tensor i64 f32");
        out.push(case(&label, E::CompareTensor { op }, ins, &[y]).typed(0, DType::Bool));
        for other in [2.0, -2.5] {
            let k = E::CompareScalar { op, other };
            let label = format!("{name}.Scalar i64 {other}");
            let ins = vec![ints(v, y, DType::I64)];
            out.push(case(&label, k, ins, &[y]).typed(0, DType::Bool));
        }
    }
    // Data movement of the integer dtypes the kernels' contract names (`Family::ints`).
    let perm = Shape::Transpose {
        perm: vec![2, 0, 1],
    };
    let ins = vec![ints(v, &[2, 3, 4], DType::I64)];
    out.push(case("permute i64", perm, ins, &[&[4, 2, 3]]).typed(0, DType::I64));
    let ins = vec![ints(v, &[1, 3, 1], DType::Bool)];
    let label = "expand bool";
    out.push(case(label, Shape::Expand, ins, &[&[2, 3, 4]]).typed(0, DType::Bool));
    let sl = Shape::Slice {
        axis: 1,
        start: 1,
        end: 7,
        step: 2,
    };
    let ins = vec![ints(v, &[2, 7, 3], DType::I64)];
    out.push(case("slice i64 by 2", sl, ins, &[&[2, 3, 3]]).typed(0, DType::I64));
    // Views read by a kernel: a mask or positions permuted and broadcast, then compared.
    for dtype in [DType::I64, DType::I32, DType::Bool] {
        let k = E::CompareScalar {
            op: Cmp::Ne,
            other: 0.0,
        };
        let steps = vec![
            ViewStep::Permute(vec![1, 0]),
            ViewStep::Expand(vec![2, 4, 3]),
        ];
        let ins = vec![ints(v, &[3, 4], dtype)];
        let label = format!("ne.Scalar of a view {}", dtype.as_str());
        out.push(
            case(&label, k, ins, &[&[2, 4, 3]])
                .typed(0, DType::Bool)
                .viewed(0, steps),
        );
    }
    for i64s in [true, false] {
        let ins = vec![v.f32(&[2, 7, 3]), v.ids(&[2, 4, 3], 7, i64s)];
        let label = format!("gather f32 by {}", if i64s { "i64" } else { "i32" });
        out.push(case(&label, Shape::Gather { axis: 1 }, ins, &[&[2, 4, 3]]));
    }
}

/// ATen's `index` and `index_put` on axis 0 (Swin's relative position bias and its
/// gradient): rows of more than one axis, ids of both widths, repeated ids set and
/// accumulated.
fn index_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Embedding as E;
    for i64s in [true, false] {
        let ins = vec![v.f32(&[7, 3, 5]), v.ids(&[4, 6], 7, i64s)];
        out.push(case("index", E::IndexRows, ins, &[&[4, 6, 3, 5]]));
        for accumulate in [false, true] {
            let ins = vec![
                v.f32(&[7, 3, 5]),
                v.ids(&[4, 6], 7, i64s),
                v.f32(&[4, 6, 3, 5]),
            ];
            let k = E::IndexPutRows { accumulate };
            let label = format!("index_put accumulate={accumulate}");
            out.push(case(&label, k, ins, &[&[7, 3, 5]]));
        }
    }
    // Swin's bias table gradient: the values a permuted view, `[heads, 7, 7]` read as
    // `[49, heads]`.
    let ins = vec![v.f32(&[13, 6]), v.ids(&[49], 13, true), v.f32(&[6, 7, 7])];
    let k = E::IndexPutRows { accumulate: true };
    let steps = vec![
        ViewStep::Permute(vec![1, 2, 0]),
        ViewStep::Reshape(vec![49, 6]),
    ];
    out.push(case("index_put of a view", k, ins, &[&[13, 6]]).viewed(2, steps));
}

/// Grouped-query attention: six query heads over two key/value heads (groups of three),
/// causal, forward and backward (`dK`, `dV` summed over each group).
fn grouped_attention_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Attention;
    let (q, k, val): (&[usize], &[usize], &[usize]) = (&[2, 6, 5, 8], &[2, 2, 7, 8], &[2, 2, 7, 4]);
    let (o, lse): (&[usize], &[usize]) = (&[2, 6, 5, 4], &[2, 6, 5]);
    let at = |backward| Attention {
        backward,
        scale: None,
        causal: true,
        grouped: true,
    };
    let label = "_scaled_dot_product_flash_attention_for_cpu.default grouped";
    let ins = vec![v.f32(q), v.f32(k), v.f32(val)];
    out.push(case(label, at(false), ins, &[o, lse]));
    let ins = vec![
        v.f32(o),
        v.f32(q),
        v.f32(k),
        v.f32(val),
        v.f32(o),
        v.from(lse, 1.0),
    ];
    let label = "_scaled_dot_product_flash_attention_for_cpu_backward grouped";
    out.push(case(label, at(true), ins, &[q, k, val]));
}

/// Average pooling with `ceil_mode` (a last column window that ends past the padded
/// image), without counting the padding, and with a divisor override; and backwards.
fn avg_pool_variant_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{AvgDivisor, Pool};
    let (x, y): (&[usize], &[usize]) = (&[2, 3, 7, 6], &[2, 3, 4, 4]);
    for (tag, count_pad, value) in [
        ("ceil", true, None),
        ("ceil, padding not counted", false, None),
        ("ceil, divisor 5", true, Some(5)),
    ] {
        let divisor = AvgDivisor { count_pad, value };
        let (kernel, stride, padding, ceil) = (3, 2, 1, true);
        let k = Pool::AvgPool2d {
            kernel,
            stride,
            padding,
            ceil,
            divisor,
        };
        out.push(case(&format!("avg_pool2d {tag}"), k, vec![v.f32(x)], &[y]));
        let k = Pool::AvgPool2dBackward {
            kernel,
            stride,
            padding,
            ceil,
            divisor,
        };
        let ins = vec![v.f32(y), v.f32(x)];
        out.push(case(&format!("avg_pool2d_backward {tag}"), k, ins, &[x]));
    }
}

/// `slice_scatter` with a step, `constant_pad_nd` padding and cropping, `roll` per axis
/// (shifts of both signs, beyond the length) and flat.
fn scatter_pad_roll_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Shape;
    let k = Shape::SliceScatter {
        axis: 1,
        start: 1,
        end: 5,
        step: 2,
    };
    let ins = vec![v.f32(&[4, 6, 5]), v.f32(&[4, 2, 5])];
    out.push(case("slice_scatter", k, ins, &[&[4, 6, 5]]));
    let k = Shape::Pad {
        before: vec![0, 1, -1],
        after: vec![0, 2, 2],
        value: 0.5,
    };
    out.push(case(
        "constant_pad_nd",
        k,
        vec![v.f32(&[2, 3, 4])],
        &[&[2, 6, 5]],
    ));
    let k = Shape::Roll {
        shifts: vec![1, -2, 7],
        flat: false,
    };
    out.push(case("roll", k, vec![v.f32(&[3, 4, 5])], &[&[3, 4, 5]]));
    let k = Shape::Roll {
        shifts: vec![-3],
        flat: true,
    };
    out.push(case("roll flat", k, vec![v.f32(&[3, 4, 5])], &[&[3, 4, 5]]));
}

/// Sums and means over axes that are not adjacent (ConvNeXt's `sum.dim_IntList` over
/// `[0, 2, 3]`), with the kept axes inside and around them.
fn strided_reduce_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Reduce;
    let x: &[usize] = &[3, 4, 5, 6];
    for (axes, mean, y) in [
        (vec![0usize, 2, 3], false, vec![4usize]),
        (vec![0, 2], true, vec![4, 6]),
        (vec![1, 3], false, vec![3, 5]),
    ] {
        let (start, end) = (axes[0], axes[axes.len() - 1] + 1);
        let label = format!("{} {axes:?}", if mean { "mean" } else { "sum" });
        let k = Reduce {
            start,
            end,
            axes,
            mean,
            rank: 4,
        };
        out.push(case(&label, k, vec![v.f32(x)], &[&y]));
    }
}

/// Layer norm over the last two axes (ATen's `normalized_shape` of two), and its backward.
fn layer_norm_over_axes_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Norm::{LayerNorm, LayerNormBackward};
    let (x, feat, stat): (&[usize], &[usize], &[usize]) = (&[3, 4, 37], &[4, 37], &[3, 1, 1]);
    let ins = vec![v.f32(x), v.from(feat, 0.5), v.f32(feat)];
    let k = LayerNorm { eps: 1e-5, axes: 2 };
    out.push(case("native_layer_norm 2 axes", k, ins, &[x, stat, stat]));
    let ins = vec![
        v.f32(x),
        v.f32(x),
        v.f32(stat),
        v.from(stat, 0.5),
        v.from(feat, 0.5),
        v.f32(feat),
    ];
    let k = LayerNormBackward {
        mask: [true; 3],
        axes: 2,
    };
    out.push(case(
        "native_layer_norm_backward 2 axes",
        k,
        ins,
        &[x, feat, feat],
    ));
}

/// Adaptive average pooling down (windows that overlap: 7 rows into 3) and up (5 columns
/// into 7: windows of one repeated), and its backward.
fn adaptive_pool_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::Pool;
    for (x, o) in [([2usize, 3, 7, 5], [3usize, 2]), ([1, 2, 3, 5], [4, 7])] {
        let y = [x[0], x[1], o[0], o[1]];
        let label = format!("_adaptive_avg_pool2d {x:?} -> {o:?}");
        out.push(case(
            &label,
            Pool::AdaptiveAvgPool2d { out: o },
            vec![v.f32(&x)],
            &[&y],
        ));
        let label = format!("_adaptive_avg_pool2d_backward {x:?} -> {o:?}");
        let k = Pool::AdaptiveAvgPool2dBackward;
        out.push(case(&label, k, vec![v.f32(&y), v.f32(&x)], &[&x]));
    }
}

/// ReLU6 and its gradient (on small integers: values on the bounds, where the gradient is
/// 0), and the comparisons with a number and with a broadcast tensor (bool outputs).
fn hardtanh_and_compare_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Cmp, Elementwise as E};
    let s: &[usize] = &[3, 5, 7];
    let (min, max) = (0.0, 1.0);
    out.push(case(
        "hardtanh",
        E::Hardtanh { min, max },
        vec![v.ties(s)],
        &[s],
    ));
    out.push(case(
        "hardtanh_backward",
        E::HardtanhBackward { min, max },
        vec![v.f32(s), v.ties(s)],
        &[s],
    ));
    for (name, op) in [
        ("eq", Cmp::Eq),
        ("ne", Cmp::Ne),
        ("lt", Cmp::Lt),
        ("le", Cmp::Le),
        ("gt", Cmp::Gt),
        ("ge", Cmp::Ge),
    ] {
        let scalar = E::CompareScalar { op, other: 1.0 };
        out.push(
            case(&format!("{name}.Scalar"), scalar, vec![v.ties(s)], &[s]).typed(0, DType::Bool),
        );
        let tensor = E::CompareTensor { op };
        let (a, b) = (v.ties(&[4, 1, 6]), v.ties(&[3, 1]));
        out.push(
            case(&format!("{name}.Tensor"), tensor, vec![a, b], &[&[4, 3, 6]])
                .typed(0, DType::Bool),
        );
    }
}

/// Every math function (each on inputs inside its domain, so that both backends give
/// finite values), `round` on ties, the clamps, and the broadcasting binary ones.
fn math_cases(v: &mut Values, out: &mut Vec<Case>) {
    use sgc_exec::kernel::{Math, MathBin, MathFn};
    let s: &[usize] = &[3, 5, 7];
    for &(f, kind) in MathFn::ALL {
        let x = match f {
            MathFn::Log | MathFn::Log2 | MathFn::Log10 | MathFn::Sqrt | MathFn::Rsqrt => {
                v.from(s, 0.1)
            }
            MathFn::Reciprocal => v.from(s, 0.5),
            MathFn::Acosh => v.from(s, 1.0),
            MathFn::Log1p | MathFn::Atanh => v.from(s, -0.5),
            _ => v.f32(s),
        };
        let name = kind.name().trim_start_matches("aten.");
        out.push(case(name, Math::Of(f), vec![x], &[s]));
    }
    let halves = Input::F32(vec![6], vec![0.5, 1.5, 2.5, -0.5, -2.5, 3.25]);
    out.push(case(
        "round.default ties",
        Math::Of(MathFn::Round),
        vec![halves],
        &[&[6]],
    ));
    for (name, min, max) in [
        ("clamp.default", Some(-0.25), Some(0.5)),
        ("clamp.default min > max", Some(0.5), Some(-0.25)),
        ("clamp_min.default", Some(0.0), None),
        ("clamp_max.default", None, Some(0.1)),
    ] {
        out.push(case(name, Math::Clamp { min, max }, vec![v.f32(s)], &[s]));
    }
    for (name, op) in [
        ("maximum.default", MathBin::Maximum),
        ("minimum.default", MathBin::Minimum),
        ("pow.Tensor_Tensor", MathBin::Pow),
    ] {
        let a = if op == MathBin::Pow {
            v.from(&[4, 1, 6], 0.2)
        } else {
            v.f32(&[4, 1, 6])
        };
        out.push(case(
            name,
            Math::Binary(op),
            vec![a, v.f32(&[3, 1])],
            &[&[4, 3, 6]],
        ));
    }
}

/// Runs `c` on `b`: operands packed in one allocation at 8-byte aligned offsets (as the
/// executor's arena), outputs poisoned with NaN; returns the outputs (for `sgd_update`,
/// the updated parameter).
fn run_case<B: Backend>(b: &mut B, c: &Case) -> Result<Vec<Vec<f32>>, ExecError> {
    let mut at = 0u64;
    let mut place = |shape: &[usize], dtype: DType| {
        let bytes = shape.iter().product::<usize>() as u64 * dtype.size();
        let offset = at;
        at += bytes.next_multiple_of(8) + 8;
        (offset, shape.to_vec(), dtype)
    };
    let ins: Vec<_> = c
        .inputs
        .iter()
        .map(|i| place(i.shape(), i.dtype()))
        .collect();
    let outs: Vec<_> = c.outputs.iter().map(|(s, d)| place(s, *d)).collect();
    let buffer = b.alloc(at)?;
    let operand = |(offset, shape, dtype): &(u64, Vec<usize>, DType)| Operand {
        view: None,
        buffer,
        offset: *offset,
        dtype: *dtype,
        shape: shape.clone(),
    };
    let (mut ins, outs): (Vec<Operand>, Vec<Operand>) = (
        ins.iter().map(operand).collect(),
        outs.iter().map(operand).collect(),
    );
    let stored: Vec<Operand> = ins.clone();
    if let Some((i, view)) = &c.view {
        ins[*i].shape = view_shape(view);
        ins[*i].view = Some(Box::new(view.clone()));
    }
    sgc_exec::shapes::check(&c.kernel, &ins, &outs)
        .map_err(|e| ExecError::Layout(format!("{}: {e}", c.label)))?;
    for (op, input) in stored.iter().zip(&c.inputs) {
        b.write(buffer, op.offset, &input.bytes())?;
    }
    for op in &outs {
        // NaN in f32 outputs; 0xff bytes (-1, or an invalid bool) in the others.
        let nan: Vec<u8> = match op.dtype {
            DType::F32 => (0..op.numel())
                .flat_map(|_| f32::NAN.to_le_bytes())
                .collect(),
            _ => vec![0xff; op.bytes() as usize],
        };
        b.write(buffer, op.offset, &nan)?;
    }
    b.launch(&c.kernel, &ins, &outs)?;
    b.synchronize()?;
    let read = if outs.is_empty() {
        &stored[..1]
    } else {
        &outs[..]
    };
    read.iter()
        .map(|op| {
            let mut bytes = vec![0u8; op.bytes() as usize];
            b.read(buffer, op.offset, &mut bytes)?;
            Ok(as_f32(op.dtype, &bytes))
        })
        .collect()
}

/// Values of any dtype as f32 (indices and counters are small; a bool is 0 or 1).
fn as_f32(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::I64 => bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        DType::I32 => bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        DType::Bool => bytes.iter().map(|&b| f32::from(b)).collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    }
}

fn cpu_kernels_write_every_output_byte_of_every_case() {
    let all = cases();
    let covered: std::collections::BTreeSet<&str> = all.iter().map(|c| c.kernel.name()).collect();
    // Every builder op type and every op type an exporter kernel reports has a case (an
    // exporter kind that lowers onto another kernel is that kernel's case).
    for (k, _) in sgc_exec::kernel::kernels().filter(|(k, _)| !k.name().starts_with("aten.")) {
        assert!(
            covered.contains(k.name()),
            "op type `{}` has no case",
            k.name()
        );
    }
    for c in &all {
        let out =
            run_case(&mut CpuBackend::new(), c).unwrap_or_else(|e| panic!("{}: {e}", c.label));
        for (i, o) in out.iter().enumerate() {
            assert!(
                o.iter().all(|v| v.is_finite()),
                "{}: output {i} not fully written: {o:?}",
                c.label
            );
        }
    }
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-5 + 2e-4 * a.abs().max(b.abs())
}

fn cuda_kernels_match_the_cpu_reference() {
    let mut gpu = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    };
    println!("running on {}", gpu.name());
    // One CPU backend for every case, as one GPU backend: a random op's second run draws
    // its stream's next values on both.
    let mut cpu = CpuBackend::new();
    for c in &cases() {
        let mut runs = Vec::new();
        for _ in 0..2 {
            let want = run_case(&mut cpu, c).unwrap_or_else(|e| panic!("{}: cpu: {e}", c.label));
            let got = run_case(&mut gpu, c).unwrap_or_else(|e| panic!("{}: cuda: {e}", c.label));
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                let bad = w.iter().zip(g).position(|(a, b)| !close(*a, *b));
                assert!(
                    bad.is_none(),
                    "{}: output {i} at {bad:?}: cpu {w:?} cuda {g:?}",
                    c.label
                );
            }
            runs.push(got);
        }
        let bits = |o: &Vec<Vec<f32>>| o.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>();
        if !matches!(c.kernel.op(), FamilyKernel::Random(_)) {
            assert_eq!(
                bits(&runs[0]),
                bits(&runs[1]),
                "{}: CUDA not deterministic",
                c.label
            );
        }
    }
}

fn cuda_backend_without_a_driver_is_an_error_naming_the_cause() {
    match CudaBackend::new(0) {
        Ok(b) => panic!("a CUDA device is present ({})", b.name()),
        Err(e) => {
            assert!(matches!(e, ExecError::CudaUnavailable(_)), "{e}");
            let msg = e.to_string();
            let known = [
                "libcuda.so.1",
                "no CUDA device",
                "NVRTC",
                "cuBLAS",
                "without CUDA support",
            ];
            assert!(
                known.iter().any(|k| msg.contains(k)),
                "unhelpful message: {msg}"
            );
            println!("CUDA unavailable: {msg}");
        }
    }
}

fn main() {
    let no_device = CudaBackend::new(0)
        .err()
        .map(|e| format!("no CUDA device here: {e}"));
    let device = CudaBackend::new(0)
        .ok()
        .map(|b| format!("a CUDA device is present ({})", b.name()));
    skip::run(vec![
        skip::test(
            "cpu_kernels_write_every_output_byte_of_every_case",
            cpu_kernels_write_every_output_byte_of_every_case,
        ),
        skip::unless(
            skip::test(
                "cuda_kernels_match_the_cpu_reference",
                cuda_kernels_match_the_cpu_reference,
            ),
            &no_device,
        ),
        skip::unless(
            skip::test(
                "cuda_backend_without_a_driver_is_an_error_naming_the_cause",
                cuda_backend_without_a_driver_is_an_error_naming_the_cause,
            ),
            &device,
        ),
    ])
}
