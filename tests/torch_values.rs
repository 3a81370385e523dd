//! sgc's CPU backend against PyTorch on the same step: the committed fixtures
//! (`tests/fixtures/torch_values_*.json`, made by `python3 python/tests/values_fixture.py`)
//! hold a small ResNet-style CNN, a one-block transformer language model, a GPT-style model
//! written as the corpus's transformers are (`arange`, `gather`, a `tril` mask through
//! `where`, `select`, attention through `scaled_dot_product_attention`) and a small U-Net
//! (per-axis padding, a transposed convolution, `nll_loss2d`) as the exporter traces them, the inputs, weights and state PyTorch ran them on, and PyTorch's float32
//! loss and parameter gradients. The graph runs here with the same values, unplanned and under
//! every strategy's plan: the loss and every gradient agree with PyTorch within 1e-5 of
//! the tensor's largest magnitude, and all runs agree with each other bit for bit.

use serde_json::Value;
use sgc::exec::{CpuBackend, Executor, HostTensor};
use sgc::ir::{format, DType, Graph};
use sgc::plan::{plan, PlanOptions, Strategy};
use std::path::PathBuf;

const TOLERANCE: f64 = 1e-5;

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/torch_values_{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn tensor(g: &Graph, name: &str, v: &Value) -> HostTensor {
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let data = v["data"].as_array().unwrap();
    let t = g.tensor(
        g.tensor_by_name(name)
            .unwrap_or_else(|| panic!("no tensor `{name}`")),
    );
    match t.dtype {
        DType::F32 => HostTensor::f32(
            shape,
            data.iter().map(|x| x.as_f64().unwrap() as f32).collect(),
        ),
        _ => HostTensor::i64(shape, data.iter().map(|x| x.as_i64().unwrap()).collect()),
    }
}

/// Every graph output after one step on the fixture's values.
fn run(g: &Graph, fx: &Value, mut ex: Executor<CpuBackend>) -> Vec<(String, Vec<f32>)> {
    for (name, v) in fx["values"].as_object().unwrap() {
        ex.bind(name, &tensor(g, name, v)).unwrap();
    }
    ex.run(1).unwrap();
    g.outputs()
        .iter()
        .map(|&t| g.tensor(t).name.clone())
        .map(|n| {
            let v = ex.read(&n).unwrap().as_f32().unwrap().to_vec();
            (n, v)
        })
        .collect()
}

#[test]
fn the_cpu_backend_matches_pytorch_on_a_cnn() {
    matches_pytorch("tiny_resnet");
}

#[test]
fn the_cpu_backend_matches_pytorch_on_a_transformer() {
    matches_pytorch("tiny_lm");
}

#[test]
fn the_cpu_backend_matches_pytorch_on_a_gpt_style_transformer() {
    matches_pytorch("tiny_gpt");
}

#[test]
fn the_cpu_backend_matches_pytorch_on_a_unet() {
    matches_pytorch("tiny_unet");
}

fn matches_pytorch(name: &str) {
    let fx = fixture(name);
    let g: Graph = format::from_str(&fx["graph"].to_string()).unwrap();
    let ours = run(
        &g,
        &fx,
        sgc::runner::unplanned(&g, CpuBackend::new()).unwrap(),
    );
    let expected = fx["expected"].as_object().unwrap();
    assert_eq!(
        ours.len(),
        expected.len(),
        "the loss and one gradient per parameter"
    );
    let mut worst = 0.0f64;
    for (tensor, got) in &ours {
        let name = tensor.as_str();
        let want: Vec<f64> = expected[name]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(got.len(), want.len(), "{name}");
        let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0.0f64, |m, (a, b)| m.max((f64::from(*a) - b).abs()));
        let rel = err / scale.max(f64::MIN_POSITIVE);
        worst = worst.max(rel);
        assert!(
            rel <= TOLERANCE,
            "`{name}`: max error {err:e} is {rel:e} of its largest value {scale:e}"
        );
    }
    eprintln!("{name}: largest error against PyTorch: {worst:e} of the tensor's largest value");
    for strategy in [Strategy::Sublinear, Strategy::ChenSqrt, Strategy::Dtr] {
        let opts = PlanOptions {
            strategy,
            ..PlanOptions::default()
        };
        let p = plan(&g, &opts, &Default::default()).unwrap();
        let planned = run(
            &g,
            &fx,
            Executor::from_plan(&g, &p, CpuBackend::new()).unwrap(),
        );
        for ((n, a), (_, b)) in ours.iter().zip(&planned) {
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{name} / {strategy}: `{n}` differs from the unplanned run"
            );
        }
    }
}
