//! The training builder: what each backward op keeps, gradient accumulation, updates,
//! views, errors. Small hand-built models plus the zoo's tiny models.

use serde_json::Map;
use sgc_ir::train::{TrainBuilder, TrainError, Var};
use sgc_ir::{format, zoo, DType, Graph, Phase, TensorKind};

type R<T> = Result<T, TrainError>;

fn zoo_graph(name: &str) -> Graph {
    let m = zoo::models()
        .into_iter()
        .find(|m| m.name == name)
        .expect("zoo model");
    (m.build)()
}

/// The names of an op's inputs.
fn reads(g: &Graph, op: &str) -> Vec<String> {
    let id = g.op_by_name(op).unwrap_or_else(|| panic!("no op `{op}`"));
    g.op(id)
        .inputs
        .iter()
        .map(|&t| g.tensor(t).name.clone())
        .collect()
}

fn op_type(g: &Graph, op: &str) -> String {
    g.op(g.op_by_name(op).unwrap_or_else(|| panic!("no op `{op}`")))
        .op_type
        .clone()
}

/// Backward ops that read tensor `t`.
fn backward_readers(g: &Graph, t: &str) -> Vec<String> {
    let id = g.tensor_by_name(t).expect("tensor");
    g.consumers(id)
        .iter()
        .filter(|&&o| g.phase(o) == Some(Phase::Backward))
        .map(|&o| g.op(o).name.clone())
        .collect()
}

/// x [4, 8] -> linear -> relu -> (two linears on the same activation, summed) -> loss.
fn branchy() -> R<Graph> {
    let mut b = TrainBuilder::new("branchy");
    let x = b.input("x", DType::F32, &[4, 8], Some(0))?;
    let labels = b.input("labels", DType::I64, &[4], Some(0))?;
    let w0 = b.param("w0", &[8, 8])?;
    let h = b.matmul("fc0", x, w0, false)?;
    let h = b.relu("act", h)?;
    let wa = b.param("wa", &[8, 3])?;
    let wb = b.param("wb", &[8, 3])?;
    let a = b.matmul("left", h, wa, false)?;
    let c = b.matmul("right", h, wb, false)?;
    let s = b.add("sum", a, c)?;
    let loss = b.cross_entropy("loss", s, labels)?;
    b.finish(loss, Map::new())
}

#[test]
fn relu_grad_reads_the_relu_output_not_its_input() {
    let g = branchy().unwrap();
    assert_eq!(op_type(&g, "act.grad_input"), "relu_grad");
    let inputs = reads(&g, "act.grad_input");
    assert_eq!(inputs[0], "act");
    assert!(!inputs.contains(&"fc0".to_string()));
    assert!(
        backward_readers(&g, "fc0").is_empty(),
        "relu's input is not kept"
    );
}

#[test]
fn a_tensor_read_twice_gets_its_gradients_summed() {
    let g = branchy().unwrap();
    let acc = "act.grad_acc1";
    assert_eq!(op_type(&g, acc), "add");
    assert_eq!(reads(&g, acc), ["right.grad_input", "left.grad_input"]);
    assert_eq!(g.phase(g.op_by_name(acc).unwrap()), Some(Phase::Backward));
    assert_eq!(reads(&g, "act.grad_input")[1], acc);
    assert!(g.op_by_name("act.grad_acc2").is_none(), "two uses, one sum");
}

#[test]
fn add_backward_reads_nothing_of_its_operands() {
    let g = branchy().unwrap();
    for operand in ["left", "right"] {
        assert!(
            backward_readers(&g, operand).is_empty(),
            "`{operand}` is read in backward"
        );
    }
    // Both operands' gradient is the sum's gradient itself.
    assert_eq!(reads(&g, "left.grad_input")[0], "loss.grad_input");
    assert_eq!(reads(&g, "right.grad_input")[0], "loss.grad_input");
}

#[test]
fn matmul_backward_keeps_its_inputs() {
    let g = branchy().unwrap();
    assert_eq!(reads(&g, "left.grad_weight"), ["act", "loss.grad_input"]);
    assert_eq!(op_type(&g, "left.grad_weight"), "matmul_tn");
    assert_eq!(reads(&g, "left.grad_input"), ["loss.grad_input", "wa"]);
    // x is data: no gradient for it, only for w0.
    assert!(g.op_by_name("fc0.grad_input").is_none());
    assert_eq!(reads(&g, "fc0.grad_weight"), ["x", "act.grad_input"]);
    assert_eq!(reads(&g, "loss.grad_input"), ["sum", "labels"]);
}

#[test]
fn every_param_has_one_sgd_update_and_outputs_hold_the_gradients() {
    let g = branchy().unwrap();
    for (param, grad) in [
        ("w0", "fc0.grad_weight"),
        ("wa", "left.grad_weight"),
        ("wb", "right.grad_weight"),
    ] {
        let op = g.op(g.op_by_name(&format!("{param}.sgd")).expect("update op"));
        assert_eq!(op.op_type, "sgd_update");
        assert_eq!(reads(&g, &op.name), [param, grad]);
        assert!(op.outputs.is_empty());
        assert!(!op.recomputable);
        assert_eq!(op.phase, Some(Phase::Update));
        assert_eq!(op.attrs.as_ref().and_then(|a| a["lr"].as_f64()), Some(0.01));
        assert!(g.outputs().contains(&g.tensor_by_name(grad).unwrap()));
    }
    assert_eq!(g.outputs()[0], g.loss().unwrap());
    assert_eq!(g.outputs().len(), 4);
}

#[test]
fn every_op_has_a_phase_and_flops_and_the_graph_round_trips() {
    let g = branchy().unwrap();
    for o in g.ops() {
        assert!(o.phase.is_some() && o.flops.is_some(), "op `{}`", o.name);
    }
    let fc0 = g.op(g.op_by_name("fc0").unwrap());
    assert_eq!(fc0.flops, Some(2.0 * 4.0 * 8.0 * 8.0));
    assert_eq!(format::from_str(&format::to_string(&g)).unwrap(), g);
}

#[test]
fn conv_batch_norm_pool_backward_keep_what_a_framework_saves() {
    let g = zoo_graph("tiny_cnn");
    assert_eq!(op_type(&g, "conv2.grad_weight"), "conv2d_grad_weight");
    assert_eq!(reads(&g, "conv2.grad_weight")[0], "pool1");
    assert_eq!(
        reads(&g, "conv2.grad_input"),
        ["bn2.grad_input", "conv2.weight"]
    );
    // The first conv reads the data: a weight gradient, no input gradient.
    assert!(g.op_by_name("conv1.grad_input").is_none());
    assert_eq!(reads(&g, "conv1.grad_weight")[0], "images");
    assert_eq!(
        reads(&g, "bn1.grad"),
        [
            "conv1",
            "bn1.weight",
            "bn1.mean",
            "bn1.invstd",
            "relu1.grad_input"
        ]
    );
    assert!(backward_readers(&g, "bn1")
        .iter()
        .all(|o| o == "relu1.grad_input"));
    assert_eq!(reads(&g, "pool1.grad_input")[0], "relu1");
    assert_eq!(reads(&g, "avgpool.grad_input"), ["fc.matmul.grad_input"]);
    let gap = g.op(g.op_by_name("avgpool.grad_input").unwrap());
    let attrs = gap.attrs.as_ref().unwrap();
    assert_eq!(
        (attrs["height"].as_u64(), attrs["width"].as_u64()),
        (Some(4), Some(4))
    );
}

#[test]
fn transformer_backward_keeps_softmax_output_gelu_input_and_ids() {
    let g = zoo_graph("tiny_transformer");
    assert_eq!(
        reads(&g, "h.0.attn.softmax.grad_input")[0],
        "h.0.attn.softmax"
    );
    assert_eq!(reads(&g, "h.0.mlp.gelu.grad_input")[0], "h.0.mlp.c_fc");
    assert_eq!(reads(&g, "wpe.grad_weight")[0], "positions");
    assert_eq!(
        reads(&g, "h.0.ln_1.grad")[..4],
        ["embed", "h.0.ln_1.weight", "h.0.ln_1.mean", "h.0.ln_1.rstd"]
    );
    let sm = g.op(g.op_by_name("h.0.attn.softmax").unwrap());
    assert_eq!(sm.attrs.as_ref().unwrap()["causal"].as_bool(), Some(true));
}

#[test]
fn tied_weights_get_two_gradient_contributions_summed() {
    let g = zoo_graph("tiny_transformer");
    let acc = "wte.weight.grad_acc1";
    let parts = reads(&g, acc);
    assert_eq!(parts, ["lm_head.grad_weight", "wte.grad_weight"]);
    assert_eq!(op_type(&g, &parts[0]), "matmul_tn");
    assert_eq!(op_type(&g, &parts[1]), "embedding_grad");
    assert_eq!(reads(&g, "wte.weight.sgd"), ["wte.weight", acc]);
    let wte = g.tensor_by_name("wte.weight").unwrap();
    assert_eq!(
        g.consumers(wte).len(),
        4,
        "embedding, lm head, lm head grad_input, update"
    );
}

#[test]
fn views_alias_their_input_and_own_no_bytes() {
    let g = zoo_graph("tiny_transformer");
    for (view, base) in [
        ("h.0.attn.q.split", "h.0.attn.q"),
        ("h.0.attn.merged", "h.0.attn.merge"),
        (
            "h.0.attn.merged.grad_input",
            "h.0.attn.c_proj.matmul.grad_input",
        ),
    ] {
        let t = g.tensor_by_name(view).unwrap();
        let b = g.tensor_by_name(base).unwrap();
        assert_eq!(g.tensor(t).alias_of, Some(b), "`{view}`");
        assert_eq!(g.own_bytes(t), 0);
        assert_eq!(g.storage_bytes(t), g.tensor(b).size);
        assert_eq!(g.op(g.producer(t).unwrap()).flops, Some(0.0));
    }
    // transpose is a real copy with its own storage.
    let heads = g.tensor_by_name("h.0.attn.q.heads").unwrap();
    assert!(g.tensor(heads).alias_of.is_none() && g.own_bytes(heads) > 0);
}

#[test]
fn concat_backward_slices_each_operand() {
    let mut b = TrainBuilder::new("cat");
    let x = b.input("x", DType::F32, &[2, 3, 4, 4], Some(0)).unwrap();
    let labels = b.input("labels", DType::I64, &[2, 4, 4], Some(0)).unwrap();
    let w1 = b.param("w1", &[2, 3, 1, 1]).unwrap();
    let w2 = b.param("w2", &[5, 3, 1, 1]).unwrap();
    let p = b.conv2d("p", x, w1, 1, 0).unwrap();
    let q = b.conv2d("q", x, w2, 1, 0).unwrap();
    let cat = b.concat("cat", &[p, q], 1).unwrap();
    let up = b.upsample_nearest2x("up", cat).unwrap();
    let down = b.max_pool2d("down", up, 2, 2, 0).unwrap();
    let nhwc = b.transpose("nhwc", down, &[0, 2, 3, 1]).unwrap();
    let loss = b.cross_entropy("loss", nhwc, labels).unwrap();
    let g = b.finish(loss, Map::new()).unwrap();
    for (slot, range, like) in [(0, (0, 2), "p"), (1, (2, 7), "q")] {
        let op = g.op(g.op_by_name(&format!("cat.grad_input{slot}")).unwrap());
        assert_eq!(op.op_type, "slice");
        let a = op.attrs.as_ref().unwrap();
        assert_eq!(
            (a["start"].as_u64().unwrap(), a["end"].as_u64().unwrap()),
            range
        );
        assert_eq!(
            g.tensor(op.outputs[0]).shape,
            g.tensor(g.tensor_by_name(like).unwrap()).shape
        );
    }
    assert_eq!(reads(&g, "up.grad_input"), ["down.grad_input"]);
    let inverse = g.op(g.op_by_name("nhwc.grad_input").unwrap());
    assert_eq!(
        inverse.attrs.as_ref().unwrap()["perm"],
        serde_json::json!([0, 3, 1, 2])
    );
}

#[test]
fn shape_errors_name_the_op() {
    let mut b = TrainBuilder::new("bad");
    let x = b.input("x", DType::F32, &[4, 8], Some(0)).unwrap();
    let w = b.param("w", &[7, 3]).unwrap();
    match b.matmul("fc", x, w, false) {
        Err(TrainError::Shape { op, .. }) => assert_eq!(op, "fc"),
        other => panic!("expected a shape error, got {other:?}"),
    }
    let err = b.conv2d("conv", x, w, 1, 0).unwrap_err();
    assert!(err.to_string().starts_with("op `conv`"), "{err}");
    let ids = b.input("ids", DType::F32, &[4], None).unwrap();
    assert!(matches!(
        b.embedding("emb", ids, w),
        Err(TrainError::DType { .. })
    ));
    assert!(matches!(
        b.reshape("r", x, &[5, 5]),
        Err(TrainError::Shape { .. })
    ));
    assert!(matches!(
        b.dropout("drop", x, 1.0),
        Err(TrainError::Shape { .. })
    ));
}

#[test]
fn bad_losses_duplicates_and_unused_params_are_errors() {
    let start = || -> R<(TrainBuilder, Var, Var)> {
        let mut b = TrainBuilder::new("bad");
        let x = b.input("x", DType::F32, &[4, 8], Some(0))?;
        let w = b.param("w", &[8, 8])?;
        let h = b.matmul("h", x, w, false)?;
        Ok((b, x, h))
    };
    let (mut b, _, h) = start().unwrap();
    assert_eq!(
        b.param("x", &[1]).unwrap_err(),
        TrainError::DuplicateTensor("x".into())
    );
    assert_eq!(
        b.relu("h", h).unwrap_err(),
        TrainError::DuplicateTensor("h".into())
    );
    let y = b.relu("y", h).unwrap();
    let err = b.finish(y, Map::new()).unwrap_err();
    assert_eq!(err, TrainError::LossNotCrossEntropy("y".into()));

    let (mut b, _, h) = start().unwrap();
    b.param("unused", &[3]).unwrap();
    let labels = b.input("labels", DType::I64, &[4], Some(0)).unwrap();
    let loss = b.cross_entropy("loss", h, labels).unwrap();
    let err = b.finish(loss, Map::new()).unwrap_err();
    assert_eq!(err, TrainError::UnusedParam("unused".into()));

    let (b, _, h) = start().unwrap();
    let mut b = b.with_lr(f64::NAN);
    let labels = b.input("labels", DType::I64, &[4], Some(0)).unwrap();
    let loss = b.cross_entropy("loss", h, labels).unwrap();
    assert!(matches!(
        b.finish(loss, Map::new()),
        Err(TrainError::BadLearningRate(_))
    ));
}

#[test]
fn inputs_carry_batch_dim_and_params_are_f32_params() {
    let g = branchy().unwrap();
    let x = g.tensor(g.tensor_by_name("x").unwrap());
    assert_eq!((x.kind, x.batch_dim), (TensorKind::Input, Some(0)));
    let w = g.tensor(g.tensor_by_name("w0").unwrap());
    assert_eq!((w.kind, w.dtype), (TensorKind::Param, DType::F32));
}
