//! f16 and bf16 on the CPU backend: each kernel computes in f32 on exactly widened operands
//! and rounds its result once to the output's dtype (to nearest, ties to even); casts
//! (`_to_copy`) between floats, integers and bool; mixed operands promote; views and the
//! in-place SGD update keep their meaning. The same on the CUDA backend (on a GPU, or on
//! the emulated device in CI), which widens and rounds with its own kernels: the same bits.

mod common;

use common::device::{self, every_device, Device};
use sgc_exec::coverage::{gaps, Target};
use sgc_exec::{Executor, HostData, HostTensor};
use sgc_ir::DType;

fn main() {
    let mut tests = every_device!(
        half_precision_kernels_compute_in_f32_and_round_once,
        a_bf16_parameter_is_updated_in_place,
        casts_to_half_precision_round_as_the_half_crate_does,
        integer_comparisons_and_arithmetic,
    );
    tests.extend(device::plain(&[(
        "both_backends_cover_half_precision",
        both_backends_cover_half_precision,
    )]));
    device::run(tests)
}

const GRAPH: &str = r#"{"format": "sgc-graph", "version": 1,
  "tensors": [
    {"name": "x", "dtype": "bf16", "shape": [2, 3], "kind": "input"},
    {"name": "w", "dtype": "bf16", "shape": [3, 2], "kind": "input"},
    {"name": "y", "dtype": "f32", "shape": [2, 2], "kind": "input"},
    {"name": "m", "dtype": "bf16", "shape": [2, 2]},
    {"name": "mf", "dtype": "f32", "shape": [2, 2]},
    {"name": "a", "dtype": "f32", "shape": [2, 2]},
    {"name": "h", "dtype": "f16", "shape": [2, 2]},
    {"name": "r", "dtype": "f16", "shape": [2, 2]},
    {"name": "rt", "dtype": "f16", "shape": [2, 2], "alias_of": "r"},
    {"name": "e", "dtype": "f16", "shape": [2, 2]},
    {"name": "xi", "dtype": "i64", "shape": [2, 3]},
    {"name": "rb", "dtype": "bool", "shape": [2, 2]},
    {"name": "s", "dtype": "f32", "shape": [2, 2]}],
  "ops": [
    {"name": "mm", "op": "aten.mm.default", "inputs": ["x", "w"], "outputs": ["m"]},
    {"name": "up", "op": "aten._to_copy.default", "inputs": ["m"], "outputs": ["mf"],
     "attrs": {"dtype": "torch.float32"}},
    {"name": "add", "op": "aten.add.Tensor", "inputs": ["mf", "y"], "outputs": ["a"]},
    {"name": "down", "op": "aten._to_copy.default", "inputs": ["a"], "outputs": ["h"],
     "attrs": {"dtype": "torch.float16"}},
    {"name": "relu", "op": "aten.relu.default", "inputs": ["h"], "outputs": ["r"]},
    {"name": "t", "op": "aten.t.default", "inputs": ["r"], "outputs": ["rt"]},
    {"name": "exp", "op": "aten.exp.default", "inputs": ["rt"], "outputs": ["e"]},
    {"name": "ids", "op": "aten._to_copy.default", "inputs": ["x"], "outputs": ["xi"],
     "attrs": {"dtype": "torch.int64"}},
    {"name": "mask", "op": "aten._to_copy.default", "inputs": ["r"], "outputs": ["rb"],
     "attrs": {"dtype": "torch.bool"}},
    {"name": "mixed", "op": "aten.add.Tensor", "inputs": ["m", "y"], "outputs": ["s"]}],
  "outputs": ["m", "mf", "a", "h", "r", "e", "xi", "rb", "s"]}"#;

/// `values` rounded to `dtype` and widened back.
fn round(dtype: DType, values: &[f32]) -> Vec<f32> {
    let t = HostTensor::floats(dtype, vec![values.len()], values).unwrap();
    t.to_f32().unwrap()
}

fn floats<D: Device>(ex: &mut Executor<D>, name: &str, dtype: DType) -> Vec<f32> {
    let t = ex.read(name).unwrap();
    assert_eq!(t.dtype(), dtype, "{name}");
    t.to_f32().unwrap()
}

fn half_precision_kernels_compute_in_f32_and_round_once<D: Device>() {
    let g = sgc_ir::format::from_str(GRAPH).unwrap();
    let mut ex = common::unplanned(&g, D::open()).unwrap();
    // Values that bf16 holds exactly, so the product is the only rounding.
    let x = [1.5, -2.0, 0.25, 3.0, 1.0, -0.75];
    let w = [1.0 / 3.0, 2.0, -1.25, 0.5, 7.0, 0.1];
    let (x, w) = (round(DType::Bf16, &x), round(DType::Bf16, &w));
    let y = [0.001f32, -0.5, 100.0, 2.0];
    ex.bind(
        "x",
        &HostTensor::floats(DType::Bf16, vec![2, 3], &x).unwrap(),
    )
    .unwrap();
    ex.bind(
        "w",
        &HostTensor::floats(DType::Bf16, vec![3, 2], &w).unwrap(),
    )
    .unwrap();
    ex.bind("y", &HostTensor::f32(vec![2, 2], y.to_vec()))
        .unwrap();
    ex.run(1).unwrap();

    let mut product = [0f32; 4];
    for (i, out) in product.iter_mut().enumerate() {
        let (r, c) = (i / 2, i % 2);
        *out = (0..3).map(|k| x[r * 3 + k] * w[k * 2 + c]).sum();
    }
    let m = round(DType::Bf16, &product);
    assert_eq!(floats(&mut ex, "m", DType::Bf16), m);
    assert_eq!(floats(&mut ex, "mf", DType::F32), m);
    let a: Vec<f32> = m.iter().zip(&y).map(|(m, y)| m + y).collect();
    assert_eq!(floats(&mut ex, "a", DType::F32), a);
    // Promotion: bf16 + f32 is the f32 sum of the widened bf16 value.
    assert_eq!(floats(&mut ex, "s", DType::F32), a);
    let h = round(DType::F16, &a);
    assert_eq!(floats(&mut ex, "h", DType::F16), h);
    let r: Vec<f32> = h.iter().map(|&v| v.max(0.0)).collect();
    assert_eq!(floats(&mut ex, "r", DType::F16), r);
    // `exp` of the transposed view of an f16 tensor, rounded to f16.
    let e: Vec<f32> = [0, 2, 1, 3].iter().map(|&i| r[i].exp()).collect();
    assert_eq!(floats(&mut ex, "e", DType::F16), round(DType::F16, &e));
    // Floats to integers truncate toward zero; anything to bool is `!= 0`.
    let xi = ex.read("xi").unwrap();
    assert_eq!(xi.data, HostData::I64(vec![1, -2, 0, 3, 1, 0]));
    let rb = ex.read("rb").unwrap();
    let want: Vec<bool> = r.iter().map(|&v| v != 0.0).collect();
    assert_eq!(rb.data, HostData::Bool(want));
}

/// `param += alpha * grad` on a bf16 parameter: computed in f32, rounded once, in place.
fn a_bf16_parameter_is_updated_in_place<D: Device>() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [
        {"name": "p", "dtype": "bf16", "shape": [4], "kind": "param"},
        {"name": "g", "dtype": "bf16", "shape": [4], "kind": "input"}],
      "ops": [
        {"name": "sgd", "op": "aten.add_.Tensor", "inputs": ["p", "g"], "outputs": [],
         "recomputable": false,
         "attrs": {"alpha": -0.1}}],
      "outputs": []}"#;
    let g = sgc_ir::format::from_str(text).unwrap();
    let mut ex = common::unplanned(&g, D::open()).unwrap();
    let p = round(DType::Bf16, &[1.0, -3.0, 0.5, 250.0]);
    let grad = round(DType::Bf16, &[0.3, 1.0, -2.0, 4.0]);
    ex.bind("p", &HostTensor::floats(DType::Bf16, vec![4], &p).unwrap())
        .unwrap();
    ex.bind(
        "g",
        &HostTensor::floats(DType::Bf16, vec![4], &grad).unwrap(),
    )
    .unwrap();
    ex.run(1).unwrap();
    // The kernel subtracts `lr * grad` with lr = 0.1 (`alpha` negated exactly).
    let want: Vec<f32> = p.iter().zip(&grad).map(|(p, g)| p - 0.1 * g).collect();
    assert_eq!(floats(&mut ex, "p", DType::Bf16), round(DType::Bf16, &want));
}

/// `_to_copy` from f32 to f16 and to bf16 on the edge cases of rounding (ties to even,
/// subnormals, the largest finite values and overflow, signed zero, infinities, NaN): the
/// bits of the `half` crate's conversions (what the CPU backend uses).
fn casts_to_half_precision_round_as_the_half_crate_does<D: Device>() {
    let values: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        1.0 + 2f32.powi(-11),       // f16 tie: to even (1)
        1.0 + 3.0 * 2f32.powi(-11), // f16 tie: to even (up)
        1.0 + 2f32.powi(-8),        // bf16 tie
        65504.0,
        65519.0,
        65520.0,              // rounds to f16 infinity
        2f32.powi(-25),       // half the smallest f16 subnormal: to 0
        3.0 * 2f32.powi(-25), // between subnormals
        6.0e-8,
        2f32.powi(-14) * 0.999, // just below the smallest normal f16
        -1.5e-5,
        1.0e30,
        3.0e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let n = values.len();
    let text = format!(
        r#"{{"format": "sgc-graph", "version": 1,
      "tensors": [
        {{"name": "x", "dtype": "f32", "shape": [{n}], "kind": "input"}},
        {{"name": "h", "dtype": "f16", "shape": [{n}]}},
        {{"name": "b", "dtype": "bf16", "shape": [{n}]}}],
      "ops": [
        {{"name": "h", "op": "aten._to_copy.default", "inputs": ["x"], "outputs": ["h"],
         "attrs": {{"dtype": "torch.float16"}}}},
        {{"name": "b", "op": "aten._to_copy.default", "inputs": ["x"], "outputs": ["b"],
         "attrs": {{"dtype": "torch.bfloat16"}}}}],
      "outputs": ["h", "b"]}}"#
    );
    let g = sgc_ir::format::from_str(&text).unwrap();
    let mut ex = common::unplanned(&g, D::open()).unwrap();
    ex.bind("x", &HostTensor::f32(vec![n], values.clone()))
        .unwrap();
    ex.run(1).unwrap();
    for (name, dtype) in [("h", DType::F16), ("b", DType::Bf16)] {
        let want = HostTensor::floats(dtype, vec![n], &values).unwrap();
        let got = ex.read(name).unwrap();
        assert!(
            got.bits_eq(&want),
            "{name}: {:?} != {:?}",
            got.data,
            want.data
        );
    }
}

/// Both backends hold f16 and bf16 and run every op of the half-precision graph (casts
/// included); the coverage check says so without a device.
fn both_backends_cover_half_precision() {
    let g = sgc_ir::format::from_str(GRAPH).unwrap();
    for target in [Target::Cpu, Target::Cuda] {
        let missing = gaps(&g, target);
        assert!(missing.is_empty(), "{target:?}: {missing:?}");
    }
}

/// Integer tensors as operands: comparisons (exact between integers, in f64 against a
/// fractional number), wrapping `add`/`sub`/`mul` with broadcasting, and `gather` of f32
/// data by an i64 index (a causal mask from positions, position ids from a mask), on
/// every device; the coverage check says both backends run them.
fn integer_comparisons_and_arithmetic<D: Device>() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [
        {"name": "p", "dtype": "i64", "shape": [3], "kind": "input"},
        {"name": "q", "dtype": "i64", "shape": [3, 1], "kind": "input"},
        {"name": "m", "dtype": "i32", "shape": [3], "kind": "input"},
        {"name": "d", "dtype": "f32", "shape": [2, 3], "kind": "input"},
        {"name": "le", "dtype": "bool", "shape": [3, 3]},
        {"name": "ne", "dtype": "bool", "shape": [3]},
        {"name": "lt", "dtype": "bool", "shape": [3]},
        {"name": "sub", "dtype": "i64", "shape": [3, 3]},
        {"name": "mul", "dtype": "i32", "shape": [3]},
        {"name": "add", "dtype": "i64", "shape": [3]},
        {"name": "idx", "dtype": "i64", "shape": [2, 3], "kind": "input"},
        {"name": "g", "dtype": "f32", "shape": [2, 3]}],
      "ops": [
        {"name": "le", "op": "aten.le.Tensor", "inputs": ["p", "q"], "outputs": ["le"]},
        {"name": "ne", "op": "aten.ne.Scalar", "inputs": ["p"], "outputs": ["ne"],
         "attrs": {"other": 1}},
        {"name": "lt", "op": "aten.lt.Scalar", "inputs": ["p"], "outputs": ["lt"],
         "attrs": {"other": 1.5}},
        {"name": "sub", "op": "aten.sub.Tensor", "inputs": ["q", "p"], "outputs": ["sub"]},
        {"name": "mul", "op": "aten.mul.Tensor", "inputs": ["m", "m"], "outputs": ["mul"]},
        {"name": "add", "op": "aten.add.Tensor", "inputs": ["p", "p"], "outputs": ["add"]},
        {"name": "gather", "op": "aten.gather.default", "inputs": ["d", "idx"], "outputs": ["g"],
         "attrs": {"dim": 1}}],
      "outputs": ["le", "ne", "lt", "sub", "mul", "add", "g"]}"#;
    let g = sgc_ir::format::from_str(text).unwrap();
    for target in [Target::Cpu, Target::Cuda] {
        let missing = gaps(&g, target);
        assert!(missing.is_empty(), "{target:?}: {missing:?}");
    }
    let mut ex = common::unplanned(&g, D::open()).unwrap();
    let big = i64::MAX - 1;
    ex.bind("p", &HostTensor::i64(vec![3], vec![0, 1, big]))
        .unwrap();
    ex.bind("q", &HostTensor::i64(vec![3, 1], vec![0, 1, 2]))
        .unwrap();
    let m = HostTensor {
        shape: vec![3],
        data: HostData::I32(vec![3, -4, 65536]),
    };
    ex.bind("m", &m).unwrap();
    let d = HostTensor::f32(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    ex.bind("d", &d).unwrap();
    ex.bind("idx", &HostTensor::i64(vec![2, 3], vec![2, 0, 1, 1, 1, 0]))
        .unwrap();
    ex.run(1).unwrap();
    let bools = |v: &[u8]| HostData::Bool(v.iter().map(|&b| b != 0).collect());
    // le[i][j] = p[j] <= q[i]: i64::MAX - 1 is not <= 2 (in f32 or f64 it would round).
    assert_eq!(
        ex.read("le").unwrap().data,
        bools(&[1, 0, 0, 1, 1, 0, 1, 1, 0])
    );
    assert_eq!(ex.read("ne").unwrap().data, bools(&[1, 0, 1]));
    assert_eq!(ex.read("lt").unwrap().data, bools(&[1, 1, 0]));
    let sub = ex.read("sub").unwrap();
    let row = |q: i64| [q, q - 1, q.wrapping_sub(big)];
    assert_eq!(sub.data, HostData::I64([row(0), row(1), row(2)].concat()));
    // i32 products wrap as ATen's do: 65536^2 = 2^32 is 0 in i32.
    assert_eq!(ex.read("mul").unwrap().data, HostData::I32(vec![9, 16, 0]));
    let add = ex.read("add").unwrap();
    assert_eq!(add.data, HostData::I64(vec![0, 2, big.wrapping_add(big)]));
    let gathered = ex.read("g").unwrap();
    assert_eq!(gathered.as_f32().unwrap(), &[3.0, 1.0, 2.0, 5.0, 5.0, 4.0]);
}
