//! Reading a graph output back: an output that is a view (a slice, a transpose) is read as
//! the view reads its stored tensor, not as the stored tensor's first bytes.

mod common;

use sgc_exec::{CpuBackend, HostTensor};

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
