//! Reading a graph output back: an output that is a view (a slice, a transpose) is read as
//! the view reads its stored tensor, not as the stored tensor's first bytes.

mod common;

use sgc_exec::{CpuBackend, Executor, HostTensor};

const GRAPH: &str = r#"{"format": "sgc-graph", "version": 1,
  "tensors": [
    {"name": "x", "dtype": "f32", "shape": [2, 3], "kind": "input"},
    {"name": "y", "dtype": "f32", "shape": [2, 3]},
    {"name": "s", "dtype": "f32", "shape": [2, 2], "alias_of": "y"},
    {"name": "st", "dtype": "f32", "shape": [2, 2], "alias_of": "s"}],
  "ops": [
    {"name": "relu", "op": "aten.relu.default", "inputs": ["x"], "outputs": ["y"]},
    {"name": "slice", "op": "aten.slice.Tensor", "inputs": ["y"], "outputs": ["s"],
     "attrs": {"dim": 1, "start": 1, "end": 3}},
    {"name": "t", "op": "aten.t.default", "inputs": ["s"], "outputs": ["st"]}],
  "outputs": ["st", "s"]}"#;

#[test]
fn a_view_output_reads_as_the_view() {
    let g = sgc_ir::format::from_str(GRAPH).unwrap();
    let mut ex = common::unplanned(&g, CpuBackend::new()).unwrap();
    // y = relu(x) = [[0, 1, 2], [3, 0, 5]]; s = y[:, 1:3] = [[1, 2], [0, 5]]; st = s^T.
    let x = HostTensor::f32(vec![2, 3], vec![0.0, 1.0, 2.0, 3.0, -4.0, 5.0]);
    ex.bind("x", &x).unwrap();
    ex.run(1).unwrap();
    assert_eq!(
        ex.read("s").unwrap().as_f32().unwrap(),
        &[1.0, 2.0, 0.0, 5.0]
    );
    assert_eq!(
        ex.read("st").unwrap().as_f32().unwrap(),
        &[1.0, 0.0, 2.0, 5.0]
    );
}

/// Swin's paths through views and masks: every other column of a stored tensor (a strided
/// slice view, read back and read by a kernel), a bool mask from `ne` read back, and the
/// mask through `where` (`masked_fill` as the exporter decomposes it).
#[test]
fn a_strided_view_and_a_bool_mask_read_back() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [
        {"name": "x", "dtype": "f32", "shape": [2, 5], "kind": "input"},
        {"name": "y", "dtype": "f32", "shape": [2, 5]},
        {"name": "s", "dtype": "f32", "shape": [2, 2], "alias_of": "y"},
        {"name": "r", "dtype": "f32", "shape": [2, 2]},
        {"name": "m", "dtype": "bool", "shape": [2, 2]},
        {"name": "c", "dtype": "f32", "shape": []},
        {"name": "w", "dtype": "f32", "shape": [2, 2]}],
      "ops": [
        {"name": "relu", "op": "aten.relu.default", "inputs": ["x"], "outputs": ["y"]},
        {"name": "slice", "op": "aten.slice.Tensor", "inputs": ["y"], "outputs": ["s"],
         "attrs": {"dim": 1, "start": 1, "end": 9223372036854775807, "step": 2}},
        {"name": "neg", "op": "aten.mul.Scalar", "inputs": ["s"], "outputs": ["r"],
         "attrs": {"other": -1.0}},
        {"name": "ne", "op": "aten.ne.Scalar", "inputs": ["r"], "outputs": ["m"],
         "attrs": {"other": 0}},
        {"name": "c", "op": "aten.scalar_tensor.default", "inputs": [], "outputs": ["c"],
         "attrs": {"s": -100.0}},
        {"name": "fill", "op": "aten.where.self", "inputs": ["m", "c", "r"], "outputs": ["w"]}],
      "outputs": ["s", "r", "m", "w"]}"#;
    let g = sgc_ir::format::from_str(text).unwrap();
    let mut ex = common::unplanned(&g, CpuBackend::new()).unwrap();
    // y = relu(x) = [[0, 1, 2, 0, 4], [5, 0, 7, 8, 9]]; s = y[:, 1::2] = [[1, 0], [0, 8]].
    let x = vec![0.0, 1.0, 2.0, -3.0, 4.0, 5.0, -6.0, 7.0, 8.0, 9.0];
    ex.bind("x", &HostTensor::f32(vec![2, 5], x)).unwrap();
    ex.run(1).unwrap();
    let f32s = |ex: &mut Executor<CpuBackend>, name: &str| {
        ex.read(name).unwrap().as_f32().unwrap().to_vec()
    };
    assert_eq!(f32s(&mut ex, "s"), [1.0, 0.0, 0.0, 8.0]);
    assert_eq!(f32s(&mut ex, "r"), [-1.0, -0.0, -0.0, -8.0]);
    let m = ex.read("m").unwrap();
    assert_eq!(
        m.data,
        sgc_exec::HostData::Bool(vec![true, false, false, true])
    );
    assert_eq!(f32s(&mut ex, "w"), [-100.0, -0.0, -0.0, -100.0]);
}
