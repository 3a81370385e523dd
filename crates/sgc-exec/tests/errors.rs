//! Refusals: unknown op types, bad bindings, bad layouts and CUDA without support all
//! give typed errors naming what is wrong, before anything runs.

mod common;

use common::load;
use sgc_exec::{CpuBackend, CudaBackend, ExecError, Executor, HostTensor, KernelError};

#[test]
fn unknown_op_type_is_refused_by_name_before_running() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "kind": "input"},
                  {"name": "y", "dtype": "f32", "shape": [4]},
                  {"name": "z", "dtype": "f32", "shape": [4]}],
      "ops": [{"name": "a", "op": "relu", "inputs": ["x"], "outputs": ["y"]},
              {"name": "b", "op": "aten.frobnicate", "inputs": ["y"], "outputs": ["z"]}],
      "outputs": ["z"]}"#;
    let g = sgc_ir::format::from_str(text).unwrap();
    let err = common::unplanned(&g, CpuBackend::new()).err().unwrap();
    match &err {
        ExecError::UnknownOpType {
            op,
            op_type,
            backend,
        } => {
            assert_eq!(
                (op.as_str(), op_type.as_str(), backend.as_str()),
                ("b", "aten.frobnicate", "cpu")
            );
        }
        e => panic!("unexpected error {e}"),
    }
    assert!(err.to_string().contains("aten.frobnicate"));
}

#[test]
fn operand_shapes_are_checked_before_running() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [{"name": "a", "dtype": "f32", "shape": [2, 3], "kind": "input"},
                  {"name": "b", "dtype": "f32", "shape": [4, 5], "kind": "param"},
                  {"name": "y", "dtype": "f32", "shape": [2, 5]}],
      "ops": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["y"]}],
      "outputs": ["y"]}"#;
    let g = sgc_ir::format::from_str(text).unwrap();
    let err = common::unplanned(&g, CpuBackend::new()).err().unwrap();
    assert!(
        matches!(&err, ExecError::BadOperands { op, detail, .. }
            if op == "mm" && matches!(**detail, KernelError::Operands(_))),
        "{err}"
    );
}

/// A class id outside the logits' classes stops the step with a typed error naming the
/// kernel, the id and its position (never an out-of-bounds read).
#[test]
fn an_index_out_of_range_is_a_typed_error_naming_it() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [{"name": "logits", "dtype": "f32", "shape": [2, 3], "kind": "input"},
                  {"name": "label", "dtype": "i64", "shape": [2], "kind": "input"},
                  {"name": "loss", "dtype": "f32", "shape": []}],
      "ops": [{"name": "ce", "op": "cross_entropy", "inputs": ["logits", "label"], "outputs": ["loss"]}],
      "outputs": ["loss"], "loss": "loss"}"#;
    let g = sgc_ir::format::from_str(text).unwrap();
    let mut ex = common::unplanned(&g, CpuBackend::new()).unwrap();
    ex.bind("logits", &HostTensor::f32(vec![2, 3], vec![0.0; 6]))
        .unwrap();
    ex.bind("label", &HostTensor::i64(vec![2], vec![1, 7]))
        .unwrap();
    let err = ex.step().unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("`ce`") && msg.contains("index 7"), "{msg}");
    let ExecError::Step { op, source, .. } = err else {
        panic!("{msg}")
    };
    assert_eq!(op, "ce");
    assert!(
        matches!(*source, ExecError::Kernel { ref error, .. }
            if **error == KernelError::Index { index: 7, position: 1, bound: 3 }),
        "{source}"
    );
}

#[test]
fn bindings_are_checked() {
    let g = load("tiny_mlp");
    let mut ex = common::unplanned(&g, CpuBackend::new()).unwrap();
    let wrong_shape = HostTensor::f32(vec![8, 4], vec![0.0; 32]);
    let err = ex.bind("x", &wrong_shape).unwrap_err();
    assert!(
        matches!(err, ExecError::BindMismatch { ref tensor, .. } if tensor == "x"),
        "{err}"
    );
    let wrong_dtype = HostTensor::f32(vec![4], vec![0.0; 4]);
    assert!(matches!(
        ex.bind("labels", &wrong_dtype),
        Err(ExecError::BindMismatch { .. })
    ));
    assert!(matches!(
        ex.bind("nope", &wrong_dtype),
        Err(ExecError::NoSuchTensor(_))
    ));
    let act = g.ops()[0].outputs[0];
    let name = g.tensor(act).name.clone();
    let shape = g
        .tensor(act)
        .shape
        .iter()
        .map(|&d| d as usize)
        .collect::<Vec<_>>();
    let n = shape.iter().product();
    let err = ex
        .bind(&name, &HostTensor::f32(shape, vec![0.0; n]))
        .unwrap_err();
    assert!(matches!(err, ExecError::NotBindable { .. }), "{err}");
    assert!(matches!(ex.step(), Err(ExecError::Unbound(..))));
}

#[test]
fn only_resident_tensors_can_be_read() {
    let g = load("tiny_mlp");
    let mut ex = common::unplanned(&g, CpuBackend::new()).unwrap();
    ex.bind_seeded(1).unwrap();
    ex.step().unwrap();
    let freed = g.tensor(g.ops()[0].outputs[0]).name.clone();
    assert!(matches!(ex.read(&freed), Err(ExecError::NotResident(_))));
    assert!(ex.read("fc1.weight").is_ok());
}

#[test]
fn overlapping_arena_offsets_are_refused_before_running() {
    let g = load("tiny_mlp");
    let mut plan = common::plan(&g, sgc_plan::Strategy::None);
    for o in &mut plan.arena.as_mut().unwrap().offsets {
        *o = 0;
    }
    let err = Executor::from_plan(&g, &plan, CpuBackend::new())
        .err()
        .unwrap();
    assert!(matches!(&err, ExecError::PlanRejected(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("overlap") || msg.contains("share"), "{msg}");
}

#[test]
fn cuda_without_support_is_a_clear_error() {
    match CudaBackend::new(0) {
        Ok(_) => println!("skipped: a CUDA device is present"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("CUDA"), "{msg}");
            println!("CUDA unavailable as expected: {msg}");
        }
    }
}

/// The three ways a hand-edited plan file goes wrong that `sgc plan --check` catches: an
/// early free, a dropped free, a false recompute flag. The executor refuses each before
/// anything runs (it used to run them), and still runs the plan as the planner wrote it.
#[test]
fn a_plan_that_fails_the_verifier_is_refused_before_running() {
    let g = load("tiny_cnn");
    let good = common::plan(&g, sgc_plan::Strategy::Sublinear);
    assert!(
        good.steps.iter().any(|s| s.recompute),
        "tiny_cnn's sublinear plan recomputes (the tampering below needs one)"
    );
    // A free at step k > 0 whose root step k read or made: freeing it one step earlier is
    // early (or frees what is not resident yet).
    let k = (1..good.steps.len())
        .find(|&k| !good.steps[k].free.is_empty())
        .expect("a step after the first frees a storage");
    let mut early = good.clone();
    let root = early.steps[k].free.remove(0);
    early.steps[k - 1].free.push(root);
    let mut dropped = good.clone();
    dropped.steps[k].free.remove(0);
    let mut false_flag = good.clone();
    let r = false_flag
        .steps
        .iter()
        .position(|s| s.recompute)
        .expect("a recompute step");
    false_flag.steps[r].recompute = false;
    for (what, bad) in [
        ("early free", early),
        ("dropped free", dropped),
        ("false recompute flag", false_flag),
    ] {
        let check = sgc_plan::check(&g, &bad);
        assert!(check.is_err(), "{what}: sgc_plan::check accepts it");
        let err = Executor::from_plan(&g, &bad, CpuBackend::new())
            .err()
            .unwrap_or_else(|| panic!("{what}: the executor accepts a plan the verifier refuses"));
        assert!(
            matches!(err, ExecError::PlanRejected(_)),
            "{what}: refused for another reason: {err}"
        );
        assert!(
            err.to_string().contains("plan again with `sgc plan`"),
            "{what}: {err}"
        );
    }
    let mut ex =
        Executor::from_plan(&g, &good, CpuBackend::new()).expect("the plan as written runs");
    ex.bind_seeded(0).expect("seeded init");
    ex.step().expect("one step");
}

#[test]
fn an_op_left_out_on_purpose_says_why() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "kind": "input"},
                  {"name": "n", "dtype": "i64", "shape": [4, 1]}],
      "ops": [{"name": "nz", "op": "aten.nonzero.default", "inputs": ["x"], "outputs": ["n"]}],
      "outputs": ["n"]}"#;
    let g = sgc_ir::format::from_str(text).unwrap();
    let err = common::unplanned(&g, CpuBackend::new()).err().unwrap();
    assert_eq!(
        err.to_string(),
        "op `nz` has type `aten.nonzero.default`, which the cpu backend does not implement: left out \
         on purpose: its output's shape depends on the values (a static graph fixes every shape \
         before the step)"
    );
}

/// Attribute values PyTorch refuses, or that do not fit the operands, are typed errors
/// naming the op before anything runs (a slice step below 1, an odd pad list or one that
/// crops an axis below length 0, shifts and dims that do not pair up), never a panic.
#[test]
fn bad_slice_pad_and_roll_attributes_are_refused_by_name() {
    let one_op = |op: &str, out: &str, attrs: &str| {
        format!(
            r#"{{"format": "sgc-graph", "version": 1,
              "tensors": [{{"name": "x", "dtype": "f32", "shape": [2, 3], "kind": "input"}},
                          {{"name": "y", "dtype": "f32", "shape": {out}}}],
              "ops": [{{"name": "bad", "op": "{op}", "inputs": ["x"], "outputs": ["y"],
                        "attrs": {attrs}}}],
              "outputs": ["y"]}}"#
        )
    };
    let cases = [
        (
            "aten.slice.Tensor",
            "[2, 0]",
            r#"{"dim": 1, "step": 0}"#,
            "step",
        ),
        (
            "aten.slice.Tensor",
            "[2, 3]",
            r#"{"dim": 1, "step": -1}"#,
            "step",
        ),
        ("aten.slice.Tensor", "[2, 3]", r#"{"dim": 2}"#, "dim"),
        (
            "aten.constant_pad_nd.default",
            "[2, 4]",
            r#"{"pad": [1]}"#,
            "pad",
        ),
        (
            "aten.constant_pad_nd.default",
            "[2, 3]",
            r#"{"pad": [0, 0, 0, 0, 1, 1]}"#,
            "pad",
        ),
        (
            "aten.constant_pad_nd.default",
            "[2, 0]",
            r#"{"pad": [-2, -2]}"#,
            "below length 0",
        ),
        (
            "aten.constant_pad_nd.default",
            "[2, 4]",
            r#"{"pad": [1, 1]}"#,
            "output",
        ),
        (
            "aten.roll.default",
            "[2, 3]",
            r#"{"shifts": [1, 2], "dims": [0]}"#,
            "one shift per axis",
        ),
        (
            "aten.roll.default",
            "[2, 3]",
            r#"{"shifts": [1, 2]}"#,
            "flattened",
        ),
        (
            "aten.roll.default",
            "[2, 3]",
            r#"{"shifts": [1], "dims": [2]}"#,
            "not an axis",
        ),
        ("aten.eq.Scalar", "[2, 3]", r#"{"other": 0}"#, "bool"),
    ];
    for (op, out, attrs, says) in cases {
        let g = sgc_ir::format::from_str(&one_op(op, out, attrs)).unwrap();
        let err = common::unplanned(&g, CpuBackend::new()).err().unwrap();
        let named = matches!(&err, ExecError::BadAttr { op, .. } | ExecError::BadOperands { op, .. } if op == "bad");
        assert!(named, "{op} {attrs}: {err}");
        assert!(err.to_string().contains(says), "{op} {attrs}: {err}");
    }
}
