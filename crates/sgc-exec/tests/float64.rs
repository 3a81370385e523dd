//! f64 on the CPU backend: every kernel is written once over f32 and f64
//! (`sgc_exec::real::Real`), so a graph whose float tensors are f64 (a model PyTorch runs
//! in `.double()`, as `sgc_trace` exports it) runs with every op computing in f64.
//!
//! Checked here on the tiny zoo graphs and the small real exports, each turned into its
//! f64 twin (every f32 tensor declared f64): the twin runs from the same starting values
//! (the f32 ones, widened), its loss is the f32 run's to f32 rounding, every plan of it
//! gives the unplanned run's loss and gradients bit for bit, an f32 operand of an f64 op is
//! promoted exactly, an f64 op writing f32 is refused before the first step, and the coverage check says the CPU
//! backend runs f64 and the CUDA backend does not. Against PyTorch's own float64 step:
//! `python/tests/test_float64.py`.

mod common;

use common::device::assert_matches;
use common::{real, seeded_step, strategies, unplanned, REAL_SMALL, TINY};
use sgc_exec::coverage::{gaps, Target};
use sgc_exec::{CpuBackend, ExecError, Executor, HostTensor};
use sgc_ir::{DType, Graph};

/// `g` with every f32 tensor declared f64, and casts to float32 made casts to float64.
fn twin(g: &Graph) -> Graph {
    let mut v: serde_json::Value = serde_json::from_str(&sgc_ir::format::to_string(g)).unwrap();
    for t in v["tensors"].as_array_mut().unwrap() {
        if t["dtype"] == "f32" {
            t["dtype"] = "f64".into();
        }
    }
    for op in v["ops"].as_array_mut().unwrap() {
        if let Some(d) = op.pointer_mut("/attrs/dtype") {
            if d == "torch.float32" {
                *d = "torch.float64".into();
            }
        }
    }
    sgc_ir::format::from_str(&v.to_string()).unwrap_or_else(|e| panic!("{e}"))
}

/// The f64 values of a float tensor.
fn wide(t: &HostTensor) -> Vec<f64> {
    match &t.data {
        sgc_exec::HostData::F64(v) => v.clone(),
        _ => t.to_f32().unwrap().iter().map(|&x| f64::from(x)).collect(),
    }
}

#[test]
fn f64_twins_compute_what_their_f32_graphs_do_to_f32_rounding() {
    for name in TINY {
        let g = common::load(name);
        let g64 = twin(&g);
        assert!(
            g64.tensors().iter().any(|t| t.dtype == DType::F64),
            "{name}"
        );
        let narrow = seeded_step(&g, &mut unplanned(&g, CpuBackend::new()).unwrap());
        let double = seeded_step(&g64, &mut unplanned(&g64, CpuBackend::new()).unwrap());
        assert_eq!(narrow.len(), double.len(), "{name}");
        for ((n, a), (_, b)) in narrow.iter().zip(&double) {
            if a.dtype() != DType::F32 {
                continue;
            }
            assert_eq!(b.dtype(), DType::F64, "{name}: {n}");
            let (a, b) = (wide(a), wide(b));
            // A gradient that is zero analytically (a key bias under softmax) is rounding
            // noise in f32 and ~1e-17 in f64: each tensor is measured against its largest
            // value or 1e-2, whichever is larger.
            let scale = b.iter().fold(1e-2f64, |m, v| m.max(v.abs()));
            let diff = a
                .iter()
                .zip(&b)
                .fold(0f64, |m, (x, y)| m.max((x - y).abs()));
            // Each f32 op rounds to 6e-8; these steps are tens of ops deep.
            assert!(
                diff / scale < 1e-5,
                "{name}: {n} is {:.1e} off",
                diff / scale
            );
        }
    }
}

#[test]
fn every_plan_of_an_f64_twin_gives_the_unplanned_step_bitwise() {
    for name in TINY {
        let g = twin(&common::load(name));
        let want = seeded_step(&g, &mut unplanned(&g, CpuBackend::new()).unwrap());
        for (strategy, plan) in strategies(&g) {
            let mut ex = Executor::from_plan(&g, &plan, CpuBackend::new()).unwrap();
            let got = seeded_step(&g, &mut ex);
            assert_matches(&format!("{name} f64 {strategy}"), &want, &got, None);
        }
    }
}

#[test]
fn every_small_real_export_runs_in_f64() {
    for name in REAL_SMALL {
        let g = twin(&real(name));
        let out = seeded_step(&g, &mut unplanned(&g, CpuBackend::new()).unwrap());
        let loss = g.tensor(g.loss().unwrap()).name.clone();
        let (_, l) = out.iter().find(|(n, _)| *n == loss).unwrap();
        assert_eq!(l.dtype(), DType::F64, "{name}");
        assert!(wide(l)[0].is_finite(), "{name}: loss {:?}", wide(l));
    }
}

/// A mixed graph: `add` of an f64 and an f32 tensor (`a`, `b`), `where` picking between
/// them, `b` broadcast into a product with `a`.
fn mixed(out: &str) -> Graph {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [
        {"name": "a", "dtype": "f64", "shape": [2, 3], "kind": "input"},
        {"name": "b", "dtype": "f32", "shape": [3], "kind": "input"},
        {"name": "m", "dtype": "bool", "shape": [2, 3], "kind": "input"},
        {"name": "c", "dtype": "OUT", "shape": [2, 3]},
        {"name": "p", "dtype": "f64", "shape": [2, 3]},
        {"name": "w", "dtype": "f64", "shape": [2, 3]}],
      "ops": [{"name": "mix", "op": "aten.add.Tensor", "inputs": ["a", "b"], "outputs": ["c"]},
              {"name": "prod", "op": "aten.mul.Tensor", "inputs": ["b", "a"], "outputs": ["p"]},
              {"name": "pick", "op": "aten.where.self", "inputs": ["m", "a", "b"], "outputs": ["w"]}],
      "outputs": ["c", "p", "w"]}"#;
    sgc_ir::format::from_str(&text.replace("OUT", out)).unwrap_or_else(|e| panic!("{e}"))
}

/// An op with an f64 operand computes in f64, its f32 operands widened exactly, as
/// PyTorch promotes them: the sums, products and picks of an f64 and an f32 tensor are
/// exactly those of the f32 values widened.
#[test]
fn an_f32_operand_of_an_f64_op_is_promoted_exactly() {
    let g = mixed("f64");
    let mut ex = unplanned(&g, CpuBackend::new()).unwrap();
    let a = [0.1f64, -2.5, 1.0 / 3.0, 4.0, 1e-20, -0.0];
    let b = [0.1f32, 3.0, -1.0 / 7.0];
    let m = [true, false, true, false, true, false];
    let host = |shape: Vec<usize>, data| HostTensor { shape, data };
    ex.bind("a", &host(vec![2, 3], sgc_exec::HostData::F64(a.to_vec())))
        .unwrap();
    ex.bind("b", &HostTensor::f32(vec![3], b.to_vec())).unwrap();
    ex.bind("m", &host(vec![2, 3], sgc_exec::HostData::Bool(m.to_vec())))
        .unwrap();
    ex.run(1).unwrap();
    let bw = |i: usize| f64::from(b[i % 3]); // `b` broadcast and widened
    let want = |f: &dyn Fn(usize) -> f64| (0..6).map(f).collect::<Vec<f64>>();
    let read = |ex: &mut Executor<CpuBackend>, n: &str| {
        let t = ex.read(n).unwrap();
        assert_eq!(t.dtype(), DType::F64, "{n}");
        wide(&t)
    };
    assert_eq!(read(&mut ex, "c"), want(&|i| a[i] + bw(i)));
    assert_eq!(read(&mut ex, "p"), want(&|i| bw(i) * a[i]));
    assert_eq!(
        read(&mut ex, "w"),
        want(&|i| if m[i] { a[i] } else { bw(i) })
    );
}

/// Its float outputs must be f64, the promoted type: an `add` of an f64 and an f32
/// tensor into an f32 tensor is refused before the first step, naming the op.
#[test]
fn an_f64_op_writing_f32_is_refused_before_the_first_step() {
    let g = mixed("f32");
    let err = match unplanned(&g, CpuBackend::new()) {
        Ok(_) => panic!("a mixed f64/f32 kernel was accepted"),
        Err(e) => e,
    };
    assert!(matches!(err, ExecError::BadOperands { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("mix") && msg.contains("f64"), "{msg}");
}

/// The coverage check, which `sgc inspect` prints, agrees with what runs: the CPU backend
/// runs an f64 twin, the CUDA backend does not hold f64 and says so.
#[test]
fn coverage_says_the_cpu_backend_runs_f64_and_cuda_does_not() {
    let g = twin(&common::load("tiny_cnn"));
    assert!(
        gaps(&g, Target::Cpu).is_empty(),
        "{:?}",
        gaps(&g, Target::Cpu)
    );
    let cuda = gaps(&g, Target::Cuda);
    assert!(!cuda.is_empty());
    assert!(format!("{cuda:?}").contains("f64"), "{cuda:?}");
}
