//! `sgc_ir::rescale`: the same batch gives the same graph, another batch gives what the
//! builder makes at that batch, element counts scale exactly, rescaled graphs plan and
//! verify, and graphs that cannot be rescaled are refused naming the op or tensor.

use sgc::ir::rescale::{batch_axes, batch_size, rescale, RescaleError};
use sgc::ir::{format, zoo, Graph, GraphDef};
use sgc::plan::{PlanOptions, Strategy};
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn zoo_file(name: &str) -> Graph {
    format::load(root().join("graphs").join(format!("{name}.json"))).unwrap()
}

fn zoo_files() -> Vec<(String, Graph)> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("graphs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".json").map(str::to_string))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| (n.clone(), zoo_file(&n)))
        .collect()
}

#[test]
fn rescaling_to_the_own_batch_gives_an_identical_graph() {
    for (name, g) in zoo_files() {
        let b = batch_size(&g).unwrap();
        let same = rescale(&g, b).unwrap();
        assert!(same == g, "{name}: rescale to its own batch {b} changed it");
        assert_eq!(format::to_string(&same), format::to_string(&g), "{name}");
    }
}

#[test]
fn rescaled_zoo_graphs_equal_the_builder_at_the_new_batch() {
    for model in zoo::models() {
        let g = (model.build)();
        assert_eq!(batch_size(&g).unwrap(), model.batch, "{}", model.name);
        for batch in [1, 3, model.batch + 5] {
            let scaled = rescale(&g, batch).unwrap();
            let built = (model.build_at)(batch);
            assert_eq!(
                format::to_string(&scaled),
                format::to_string(&built),
                "{} at batch {batch}",
                model.name
            );
        }
    }
}

/// Every batch-dependent tensor's element count scales by new/old, bytes overrides too;
/// every other tensor keeps its shape; flops of batch-touching ops scale, others do not.
#[test]
fn batch_dependent_element_counts_scale_exactly() {
    for name in ["tiny_mlp", "tiny_cnn", "tiny_transformer", "mlp", "unet"] {
        let g = zoo_file(name);
        let old = batch_size(&g).unwrap();
        let axes = batch_axes(&g).unwrap();
        let new = old * 3 + 1;
        let s = rescale(&g, new).unwrap();
        let mut dependent = 0;
        for t in g.tensor_ids() {
            let (n0, n1) = (u128::from(g.numel(t)), u128::from(s.numel(t)));
            if axes[t.index()].is_some() {
                dependent += 1;
                assert_eq!(n1 * u128::from(old), n0 * u128::from(new), "{name}");
            } else {
                assert_eq!(g.tensor(t).shape, s.tensor(t).shape, "{name}");
            }
        }
        assert!(dependent > g.num_tensors() / 3, "{name}: too few scaled");
        for o in g.op_ids() {
            let (f0, f1) = (g.op(o).flops.unwrap(), s.op(o).flops.unwrap());
            let touches = g
                .op(o)
                .inputs
                .iter()
                .chain(&g.op(o).outputs)
                .any(|t| axes[t.index()].is_some());
            let expected = if touches {
                f0 * new as f64 / old as f64
            } else {
                f0
            };
            assert!((f1 - expected).abs() <= 1e-9 * expected.max(1.0), "{name}");
        }
        assert_eq!(s.persistent_bytes(), g.persistent_bytes(), "{name}");
        let meta = s.meta().unwrap();
        assert_eq!(meta["batch_size"].as_u64(), Some(new));
    }
}

#[test]
fn rescaled_graphs_plan_and_verify() {
    for name in ["tiny_cnn", "tiny_transformer", "tiny_mlp"] {
        let g = rescale(&zoo_file(name), 7).unwrap();
        for strategy in [Strategy::None, Strategy::ChenSqrt, Strategy::Sublinear] {
            let opts = PlanOptions {
                strategy,
                genetic_iters: 2,
                ..PlanOptions::default()
            };
            let plan = sgc::plan::plan(&g, &opts, &Default::default()).unwrap();
            let verified = sgc::plan::verify(&g, &plan).unwrap();
            assert_eq!(verified.peak_bytes, plan.summary.planned_peak, "{name}");
        }
    }
}

fn def_of(name: &str) -> GraphDef {
    zoo_file(name).to_def()
}

#[test]
fn a_graph_without_batch_dim_is_refused() {
    let mut def = def_of("tiny_mlp");
    for t in &mut def.tensors {
        t.batch_dim = None;
    }
    let g = Graph::from_def(def).unwrap();
    assert_eq!(rescale(&g, 2).unwrap_err(), RescaleError::NoBatchDim);
    assert_eq!(
        rescale(&zoo_file("tiny_mlp"), 0).unwrap_err(),
        RescaleError::ZeroBatch
    );
}

#[test]
fn an_unknown_op_type_on_the_batch_path_is_named() {
    let mut def = def_of("tiny_mlp");
    let op = def.ops.iter_mut().find(|o| o.op == "relu").unwrap();
    op.op = "my_relu".into();
    let name = op.name.clone();
    let g = Graph::from_def(def).unwrap();
    let err = rescale(&g, 2).unwrap_err();
    assert_eq!(
        err,
        RescaleError::UnknownOp {
            op: name,
            op_type: "my_relu".into()
        }
    );
    let torch = sgc::ir::load_any(root().join("tests/fixtures/torch_tiny_resnet.json")).unwrap();
    let mut def = torch.to_def();
    let conv = def
        .ops
        .iter_mut()
        .find(|o| o.op == "aten.convolution.default")
        .unwrap();
    conv.op = "mylib.conv".into();
    let name = conv.name.clone();
    let msg = rescale(&Graph::from_def(def).unwrap(), 4)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("mylib.conv") && msg.contains(&name), "{msg}");
}

#[test]
fn an_unknown_op_off_the_batch_path_is_fine() {
    // An op that reads only parameters may have any type: the rescaler never looks at it.
    let mut def = def_of("tiny_mlp");
    let upd = def.ops.iter_mut().find(|o| o.op == "sgd_update").unwrap();
    upd.op = "adam_update".into();
    let g = Graph::from_def(def).unwrap();
    let s = rescale(&g, 9).unwrap();
    assert_eq!(batch_size(&s).unwrap(), 9);
}

#[test]
fn the_batch_on_a_channel_axis_is_refused_naming_the_op() {
    let mut def = def_of("tiny_cnn");
    let images = def.tensors.iter_mut().find(|t| t.name == "images").unwrap();
    images.batch_dim = Some(1); // shape [2, 3, 8, 8]: "batch" 3 on the channel axis
    let labels = def.tensors.iter_mut().find(|t| t.name == "labels").unwrap();
    labels.batch_dim = None;
    def.meta = None;
    let g = Graph::from_def(def).unwrap();
    match rescale(&g, 4).unwrap_err() {
        RescaleError::Unsupported { op, op_type, .. } => {
            assert_eq!((op.as_str(), op_type.as_str()), ("conv1", "conv2d"))
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn bytes_overrides_scale_only_when_exact() {
    let mut def = def_of("tiny_mlp"); // batch 4
    let x = def.tensors.iter_mut().find(|t| t.name == "x").unwrap();
    x.bytes = Some(130);
    let g = Graph::from_def(def).unwrap();
    let s = rescale(&g, 8).unwrap();
    let x = s.tensor_by_name("x").unwrap();
    assert_eq!(s.tensor(x).bytes_override, Some(260));
    assert!(matches!(
        rescale(&g, 3).unwrap_err(),
        RescaleError::BytesOverride { ref tensor, bytes: 130, from: 4, to: 3 } if tensor == "x"
    ));
}

/// A batch whose storage passes 64 bits (in one tensor or summed over the graph) is an
/// `Overflow`, which `fit` reads as "too large", never an invalid graph or a peak reported
/// saturated at `u64::MAX`.
#[test]
fn batches_whose_storage_passes_64_bits_overflow() {
    let g = zoo_file("tiny_mlp");
    let mut first_overflow = None;
    for k in 0..64 {
        match rescale(&g, 1 << k) {
            Ok(s) => {
                assert!(
                    first_overflow.is_none(),
                    "batch 2^{k} fits after a smaller one overflowed"
                );
                assert!(s.memory_profile().peak < u64::MAX, "batch 2^{k}");
            }
            Err(RescaleError::Overflow { .. }) => {
                first_overflow.get_or_insert(k);
            }
            Err(e) => panic!("batch 2^{k}: {e}"),
        }
    }
    // Each tensor of tiny_mlp still fits at 2^k for some k that overflows in the sum.
    let k = first_overflow.expect("some batch overflows");
    let per_tensor_max = g
        .tensors()
        .iter()
        .map(|t| t.size / batch_size(&g).unwrap())
        .max()
        .unwrap();
    assert!(u128::from(per_tensor_max) << k <= u128::from(u64::MAX));
}

#[test]
fn inputs_that_disagree_on_the_batch_are_refused() {
    let mut def = def_of("tiny_mlp");
    let labels = def.tensors.iter_mut().find(|t| t.name == "labels").unwrap();
    labels.shape = vec![5];
    // Keep the graph valid for the loader; the batch mismatch is the rescaler's to find.
    let g = Graph::from_def(def).unwrap();
    assert!(matches!(
        batch_size(&g).unwrap_err(),
        RescaleError::InconsistentBatch { ref tensor, found: 5, expected: 4, .. } if tensor == "labels"
    ));
}

#[test]
fn cli_writes_a_graph_at_the_new_batch() {
    let dir = std::env::temp_dir().join(format!("sgc-rescale-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("tiny_cnn_b5.json");
    let run = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(["rescale", "--batch", "5", "-o"])
        .arg(&out)
        .arg(root().join("graphs/tiny_cnn.json"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let g = format::load(&out).unwrap();
    assert_eq!(batch_size(&g).unwrap(), 5);
    let mut def = def_of("tiny_cnn");
    let conv = def.ops.iter_mut().find(|o| o.op == "conv2d").unwrap();
    conv.op = "mylib.conv".into();
    let conv_name = conv.name.clone();
    let custom = dir.join("custom.json");
    format::save(&Graph::from_def(def).unwrap(), &custom).unwrap();
    let bad = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(["rescale", "--batch", "5", "-o"])
        .arg(dir.join("never.json"))
        .arg(&custom)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains(&conv_name) && err.contains("mylib.conv"),
        "{err}"
    );
    assert!(!dir.join("never.json").exists());
}

fn real_graphs() -> Vec<(String, Graph)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("graphs/real"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".json.gz"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "the real corpus is in graphs/real");
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, sgc::ir::load_any(&p).unwrap())
        })
        .collect()
}

/// The exporter traces every real model twice (batch B and B+1) and writes `batch_dim` on
/// every tensor whose shape changed: the typed rules must find exactly those tensors, on
/// exactly those axes.
#[test]
fn the_typed_rules_find_the_batch_pytorch_shows_on_every_real_graph() {
    for (name, g) in real_graphs() {
        let axes = batch_axes(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
        for t in g.tensor_ids() {
            let tensor = g.tensor(t);
            assert_eq!(
                axes[t.index()].map(|a| a.axis),
                tensor.batch_dim,
                "{name}: tensor `{}` {:?}",
                tensor.name,
                tensor.shape
            );
        }
    }
}

/// Every real graph rescales down and up; rescaling back gives the graph it came from
/// (costs within float rounding), and every batch-dependent tensor scales exactly.
#[test]
fn every_real_graph_rescales_and_comes_back() {
    for (name, g) in real_graphs() {
        let b = batch_size(&g).unwrap();
        let axes = batch_axes(&g).unwrap();
        for to in [1, b / 2 + 1, 2 * b] {
            let s = rescale(&g, to).unwrap_or_else(|e| panic!("{name} at {to}: {e}"));
            assert_eq!(batch_size(&s).unwrap(), to, "{name}");
            for t in g.tensor_ids() {
                let (old, new) = (g.tensor(t), s.tensor(t));
                let (n0, n1): (u64, u64) = (old.shape.iter().product(), new.shape.iter().product());
                match axes[t.index()] {
                    Some(_) => assert_eq!(n0 * to, n1 * b, "{name}: {}", old.name),
                    None => assert_eq!(old.shape, new.shape, "{name}: {}", old.name),
                }
            }
            let back = rescale(&s, b).unwrap();
            let (d0, d1) = (g.to_def(), back.to_def());
            assert_eq!(d0.tensors, d1.tensors, "{name} via {to}");
            for (o0, o1) in d0.ops.iter().zip(&d1.ops) {
                assert_eq!(o0.attrs, o1.attrs, "{name} via {to}: op {}", o0.name);
                let close = |a: Option<f64>, c: Option<f64>| match (a, c) {
                    (Some(a), Some(c)) => (a - c).abs() <= 1e-9 * a.abs().max(1.0),
                    (a, c) => a == c,
                };
                assert!(
                    close(o0.time_us, o1.time_us) && close(o0.flops, o1.flops),
                    "{name}: {}",
                    o0.name
                );
            }
        }
    }
}

/// The op vocabulary's cost rule reproduces the flops every producer wrote: the builder's
/// formulas on every zoo graph, PyTorch's flop counter for matrix products and
/// convolutions on every real graph.
#[test]
fn the_vocabulary_flop_formulas_match_the_recorded_counts() {
    let mut checked = 0;
    let mut graphs = zoo_files();
    graphs.extend(real_graphs());
    for (name, g) in graphs {
        for op in g.op_ids() {
            let (Some(recorded), Some(estimate)) =
                (g.op(op).flops, sgc::ir::cost::estimated_flops(&g, op))
            else {
                continue;
            };
            // PyTorch's counter prices a grouped convolution's backward as if ungrouped
            // (576x too much on EfficientNet's depthwise layers); the formula does not.
            let grouped = g
                .op(op)
                .attrs
                .as_ref()
                .and_then(|a| a.get("groups"))
                .and_then(|v| v.as_u64())
                .is_some_and(|v| v > 1);
            if grouped && g.op(op).op_type == "aten.convolution_backward.default" {
                continue;
            }
            let close = (recorded - estimate).abs() <= 1e-9 * recorded.abs().max(1.0);
            assert!(
                close,
                "{name}: op `{}` ({}) recorded {recorded}, formula {estimate}",
                g.op(op).name,
                g.op(op).op_type
            );
            checked += 1;
        }
    }
    assert!(checked > 10_000, "{checked} ops checked");
}

/// The vocabulary covers every op type the builder and the exporter wrote: every op of the
/// zoo and of the real corpus parses to a kind when its graph loads.
#[test]
fn every_op_of_the_zoo_and_the_real_corpus_has_a_kind() {
    let mut graphs = zoo_files();
    graphs.extend(real_graphs());
    for (name, g) in graphs {
        for op in g.ops() {
            assert!(
                op.kind.is_some(),
                "{name}: op `{}` has type `{}`, not in sgc_ir::ops",
                op.name,
                op.op_type
            );
        }
    }
}
