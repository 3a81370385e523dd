//! The batch rules of the ops whose working axes are a list (`roll`'s `dims`) or implied by
//! another attribute (`constant_pad_nd`'s `pad`): the batch rescales where it sits off those
//! axes, and a graph that rolls or pads along the batch is refused naming the op.

use sgc_ir::rescale::{batch_axes, rescale, RescaleError};
use sgc_ir::{format, Graph};

/// `x [2, 4, 6]` (batch on axis 0) through one op of type `op` into `y` of shape `out`.
fn one_op(op: &str, out: &str, attrs: &str) -> Graph {
    let text = format!(
        r#"{{"format": "sgc-graph", "version": 1,
          "tensors": [{{"name": "x", "dtype": "f32", "shape": [2, 4, 6], "kind": "input", "batch_dim": 0}},
                      {{"name": "y", "dtype": "f32", "shape": {out}}}],
          "ops": [{{"name": "op", "op": "{op}", "inputs": ["x"], "outputs": ["y"], "attrs": {attrs}}}],
          "outputs": ["y"]}}"#
    );
    format::from_str(&text).unwrap()
}

#[test]
fn roll_and_pad_keep_the_batch_off_their_axes() {
    let fine = [
        (
            "aten.roll.default",
            "[2, 4, 6]",
            r#"{"shifts": [-3, 3], "dims": [1, -1]}"#,
        ),
        (
            "aten.constant_pad_nd.default",
            "[2, 5, 8]",
            r#"{"pad": [0, 2, 1, 0]}"#,
        ),
        (
            "aten.constant_pad_nd.default",
            "[2, 4, 6]",
            r#"{"pad": [0, 0, 0, 0, 0, 0]}"#,
        ),
    ];
    for (op, out, attrs) in fine {
        let g = rescale(&one_op(op, out, attrs), 5).unwrap();
        let y = g.tensor(g.tensor_by_name("y").unwrap());
        assert_eq!(y.shape[0], 5, "{op} {attrs}");
        assert_eq!(batch_axes(&g).unwrap()[1].map(|a| a.axis), Some(0));
    }
    let refused = [
        (
            "aten.roll.default",
            "[2, 4, 6]",
            r#"{"shifts": [1], "dims": [0]}"#,
        ),
        ("aten.roll.default", "[2, 4, 6]", r#"{"shifts": [1]}"#),
        (
            "aten.constant_pad_nd.default",
            "[3, 4, 6]",
            r#"{"pad": [0, 0, 0, 0, 1, 0]}"#,
        ),
    ];
    for (op, out, attrs) in refused {
        match rescale(&one_op(op, out, attrs), 5) {
            Err(RescaleError::Unsupported { op: name, .. }) => assert_eq!(name, "op"),
            other => panic!("{op} {attrs}: {other:?}"),
        }
    }
}
