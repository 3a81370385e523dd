//! Finite-difference checks of every backward kernel, through small training graphs.
//!
//! Each case builds a graph with the training builder: parameters (the tensors whose
//! gradient is checked, data included) go through the forward op under test and then a
//! `cross_entropy` loss. The step is run with `lr = 0` so that parameters do not move;
//! parameters are drawn uniformly from [-1, 1) (spread out, so that no max-pool or ReLU
//! kink lies within `h`); every parameter gradient the step outputs is compared with central differences of the
//! loss, `(L(p + h) - L(p - h)) / 2h` with `h = 1e-3` (the
//! f32 step actually taken), element by element. Tolerance:
//! `|fd - analytic| <= 1e-3 + 2e-2 * |fd|` (f32 loss, reductions in f64).

mod common;

use sgc_exec::{CpuBackend, Executor, HostTensor};
use sgc_ir::train::{TrainBuilder, TrainError, Var};
use sgc_ir::{DType, Graph, TensorKind};

const H: f32 = 1e-3;

type Build = fn(&mut TrainBuilder) -> Result<(Var, Var), TrainError>;

/// Builds the graph of one case: `build` returns (logits, labels).
fn graph(name: &str, build: Build) -> Graph {
    let mut b = TrainBuilder::new(name).with_lr(0.0);
    let (logits, labels) = build(&mut b).unwrap();
    let loss = b.cross_entropy("loss", logits, labels).unwrap();
    b.finish(loss, Default::default()).unwrap()
}

fn loss_with(ex: &mut Executor<CpuBackend>, name: &str, value: &HostTensor) -> f32 {
    ex.bind(name, value).unwrap();
    ex.step().unwrap();
    ex.loss().unwrap()
}

/// Checks every parameter gradient of `g` against central differences.
fn check(name: &str, build: Build) {
    let g = graph(name, build);
    let mut ex = common::unplanned(&g, CpuBackend::new()).unwrap();
    ex.bind_seeded(3).unwrap();
    let mut rng = sgc_exec::init::SplitMix64::new(11);
    for t in g
        .tensor_ids()
        .filter(|&t| g.tensor(t).kind == TensorKind::Param)
    {
        let d = g.tensor(t);
        let shape: Vec<usize> = d.shape.iter().map(|&x| x as usize).collect();
        let n = shape.iter().product();
        let v = (0..n).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
        ex.bind(&d.name, &HostTensor::f32(shape, v)).unwrap();
    }
    ex.step().unwrap();
    let params: Vec<_> = g
        .tensor_ids()
        .filter(|&t| g.tensor(t).kind == TensorKind::Param)
        .collect();
    let mut checked = 0;
    for p in params {
        let pname = g.tensor(p).name.clone();
        let grad_name = g
            .ops()
            .iter()
            .find(|o| o.op_type == "sgd_update" && o.inputs[0] == p)
            .map(|o| g.tensor(o.inputs[1]).name.clone())
            .unwrap();
        let analytic = ex.read(&grad_name).unwrap().as_f32().unwrap().to_vec();
        let value = ex.read(&pname).unwrap();
        let base = value.as_f32().unwrap().to_vec();
        for i in 0..base.len() {
            let mut v = base.clone();
            v[i] = base[i] + H;
            let (hi, lo) = (v[i], base[i] - H);
            let up = loss_with(
                &mut ex,
                &pname,
                &HostTensor::f32(value.shape.clone(), v.clone()),
            );
            v[i] = lo;
            let down = loss_with(&mut ex, &pname, &HostTensor::f32(value.shape.clone(), v));
            let fd = (up as f64 - down as f64) / (hi as f64 - lo as f64);
            let an = analytic[i] as f64;
            assert!(
                (fd - an).abs() <= 1e-3 + 2e-2 * fd.abs(),
                "{name}: d loss / d {pname}[{i}]: finite difference {fd}, kernel {an}"
            );
            checked += 1;
        }
        ex.bind(&pname, &value).unwrap();
    }
    assert!(checked > 0, "{name}: no parameter checked");
}

fn labels(b: &mut TrainBuilder, shape: &[u64]) -> Result<Var, TrainError> {
    b.input("labels", DType::I64, shape, Some(0))
}

#[test]
fn matmul_and_matmul_tn() {
    check("matmul", |b| {
        let x = b.param("x", &[3, 4])?;
        let w = b.param("w", &[4, 5])?;
        Ok((b.matmul("mm", x, w, false)?, labels(b, &[3])?))
    });
    check("matmul_transpose_b", |b| {
        let x = b.param("x", &[2, 3, 4])?;
        let w = b.param("w", &[5, 4])?;
        Ok((b.matmul("mm", x, w, true)?, labels(b, &[2, 3])?))
    });
}

#[test]
fn bias_add_grad() {
    check("linear", |b| {
        let x = b.param("x", &[3, 4])?;
        let w = b.param("w", &[4, 5])?;
        let bias = b.param("bias", &[5])?;
        Ok((b.linear("fc", x, w, Some(bias))?, labels(b, &[3])?))
    });
}

#[test]
fn batched_matmul_all_transposes() {
    fn case(b: &mut TrainBuilder, ta: bool, tb: bool) -> Result<(Var, Var), TrainError> {
        let a = b.param("a", if ta { &[2, 4, 3] } else { &[2, 3, 4] })?;
        let bb = b.param("b", if tb { &[2, 5, 4] } else { &[2, 4, 5] })?;
        Ok((b.batched_matmul("bmm", a, bb, ta, tb)?, labels(b, &[2, 3])?))
    }
    check("bmm_nn", |b| case(b, false, false));
    check("bmm_tn", |b| case(b, true, false));
    check("bmm_nt", |b| case(b, false, true));
    check("bmm_tt", |b| case(b, true, true));
}

#[test]
fn elementwise_grads_and_accumulation() {
    check("relu_gelu_mul_add", |b| {
        let x = b.param("x", &[3, 5])?;
        let y = b.param("y", &[3, 5])?;
        let r = b.relu("relu", x)?;
        let gl = b.gelu("gelu", y)?;
        let m = b.mul("mul", r, gl)?;
        // `x` read twice more: its gradient is accumulated with `add` ops.
        Ok((b.add("add", m, x)?, labels(b, &[3])?))
    });
}

#[test]
fn conv2d_grads_and_global_avg_pool() {
    check("conv", |b| {
        let x = b.param("x", &[2, 2, 5, 5])?;
        let w = b.param("w", &[3, 2, 3, 3])?;
        let y = b.conv2d("conv", x, w, 2, 1)?;
        Ok((b.global_avg_pool("gap", y)?, labels(b, &[2])?))
    });
}

#[test]
fn max_pool2d_grad() {
    check("pool", |b| {
        let x = b.param("x", &[1, 2, 5, 5])?;
        let p = b.max_pool2d("pool", x, 3, 2, 1)?;
        let f = b.reshape("flat", p, &[2, 9])?;
        Ok((f, labels(b, &[2])?))
    });
}

#[test]
fn batch_norm_grad() {
    check("bn", |b| {
        let x = b.param("x", &[4, 3, 2, 2])?;
        let g = b.param("gamma", &[3])?;
        let be = b.param("beta", &[3])?;
        let y = b.batch_norm("bn", x, g, be)?;
        Ok((b.global_avg_pool("gap", y)?, labels(b, &[4])?))
    });
}

#[test]
fn layer_norm_grad() {
    check("ln", |b| {
        let x = b.param("x", &[3, 6])?;
        let g = b.param("gamma", &[6])?;
        let be = b.param("beta", &[6])?;
        let y = b.layer_norm("ln", x, g, be)?;
        // Scale up so the loss depends on the normalised values markedly.
        let w = b.param("w", &[6, 6])?;
        Ok((b.matmul("mm", y, w, false)?, labels(b, &[3])?))
    });
}

#[test]
fn softmax_grad_causal() {
    check("softmax", |b| {
        let x = b.param("x", &[2, 4, 4])?;
        let y = b.softmax("sm", x, 0.5, true)?;
        let w = b.param("w", &[2, 4, 4])?;
        let z = b.mul("scale", y, w)?;
        Ok((b.reshape("flat", z, &[8, 4])?, labels(b, &[8])?))
    });
}

#[test]
fn embedding_grad() {
    check("embedding", |b| {
        let ids = b.input("ids", DType::I64, &[6], Some(0))?;
        let w = b.param("wte", &[4, 5])?;
        let e = b.embedding("emb", ids, w)?;
        Ok((e, labels(b, &[6])?))
    });
}

#[test]
fn transpose_concat_slice_upsample() {
    check("shapes", |b| {
        let x = b.param("x", &[1, 2, 2, 3])?;
        let t = b.transpose("t", x, &[0, 1, 3, 2])?;
        let u = b.upsample_nearest2x("up", t)?;
        let y = b.param("y", &[1, 1, 6, 4])?;
        let c = b.concat("cat", &[u, y], 1)?;
        let f = b.reshape("flat", c, &[3, 24])?;
        Ok((f, labels(b, &[3])?))
    });
}
