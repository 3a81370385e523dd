//! Load -> save -> load gives an equal graph and identical text: for the format doc's
//! example, every Checkmate graph and many generated graphs. `meta` and `attrs` keep their
//! key order, and costs survive exactly.

use sgc_ir::testgen::{
    doc_example_room_for, random_graph, random_graph_def, GenConfig, DOC_EXAMPLE,
};
use sgc_ir::{format, load_any, Graph, TensorKind};
use std::path::PathBuf;

/// A file of the repository, by its path from the root.
fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Saves, reloads and saves again: the graphs are equal and the two texts identical.
fn assert_round_trip(g: &Graph, what: &str) -> String {
    let text = format::to_string(g);
    let back = format::from_str(&text).unwrap_or_else(|e| panic!("{what}: reload failed: {e}"));
    assert_eq!(&back, g, "{what}: reloaded graph differs");
    assert_eq!(
        format::to_string(&back),
        text,
        "{what}: second save differs"
    );
    assert_eq!(back.to_def(), g.to_def(), "{what}: definitions differ");
    text
}

#[test]
fn doc_example_is_the_format_docs_example_verbatim() {
    let doc = std::fs::read_to_string(repo("docs/graph-format.md")).unwrap();
    let start = doc.find("```json\n").expect("the doc has a json block") + "```json\n".len();
    let len = doc[start..].find("\n```").unwrap();
    assert_eq!(&doc[start..start + len], DOC_EXAMPLE);
}

#[test]
fn doc_example_round_trips() {
    let g = format::from_str(DOC_EXAMPLE).unwrap();
    assert_eq!(g.num_ops(), 6);
    assert_eq!(g.num_tensors(), 8);
    assert_round_trip(&g, "doc example");
}

#[test]
fn save_and_load_through_a_file() {
    let g = format::from_str(DOC_EXAMPLE).unwrap();
    let path = std::env::temp_dir().join(format!("sgc-roundtrip-{}.json", std::process::id()));
    format::save(&g, &path).unwrap();
    let back = format::load(&path);
    let back_any = load_any(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(back.unwrap(), g);
    assert_eq!(back_any.unwrap(), g);
}

#[test]
fn every_checkmate_graph_round_trips() {
    let dir = repo("benches/data/checkmate");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let g = load_any(&path).unwrap();
            assert_round_trip(&g, &path.display().to_string());
            seen += 1;
        }
    }
    assert!(
        seen >= 4,
        "expected the Checkmate graphs in {}",
        dir.display()
    );
}

#[test]
fn generated_graphs_round_trip() {
    for seed in 0..300 {
        let cfg = if seed % 3 == 0 {
            GenConfig::default()
        } else {
            GenConfig::small()
        };
        let g = random_graph(seed, &cfg);
        assert_round_trip(&g, &format!("seed {seed}"));
    }
}

#[test]
fn generated_definitions_survive_saving_unchanged() {
    // A definition written by the generator is saved and parsed back field for field:
    // nothing is normalised away (costs, attrs, meta, phases, views, inplace pairs).
    for seed in 0..200 {
        let def = random_graph_def(seed, &GenConfig::small());
        let text = format::def_to_string(&def);
        assert_eq!(format::def_from_str(&text).unwrap(), def, "seed {seed}");
    }
}

#[test]
fn meta_and_attrs_keep_their_key_order() {
    let text = DOC_EXAMPLE
        .replace(
            r#""loss": "loss""#,
            r#""loss": "loss", "meta": {"zeta": 1, "alpha": {"z": 0, "a": 1}, "mid": "m"}"#,
        )
        .replace(
            r#""outputs": ["y"]}"#,
            r#""outputs": ["y"], "attrs": {"stride": 2, "axis": -1, "b": [3, 1]}}"#,
        );
    let g = format::from_str(&text).unwrap();
    let text2 = assert_round_trip(&g, "meta/attrs");
    let order = |hay: &str, keys: &[&str]| {
        let pos: Vec<usize> = keys.iter().map(|k| hay.find(k).unwrap()).collect();
        pos.windows(2).all(|w| w[0] < w[1])
    };
    assert!(order(
        &text2,
        &["\"zeta\"", "\"alpha\"", "\"z\"", "\"a\"", "\"mid\""]
    ));
    assert!(order(&text2, &["\"stride\"", "\"axis\"", "\"b\""]));
    let meta: Vec<&str> = g.meta().unwrap().keys().map(String::as_str).collect();
    assert_eq!(meta, ["zeta", "alpha", "mid"]);
    let act = g.op(g.op_by_name("act").unwrap());
    let attrs: Vec<&str> = act
        .attrs
        .as_ref()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(attrs, ["stride", "axis", "b"]);
}

#[test]
fn costs_survive_exactly() {
    for (time_us, flops) in [
        (0.1, 1e-7),
        (1e-7, 0.1),
        (123456.789, 3e20),
        (0.0, 5e-324),
        (f64::MAX, 1.7976931348623157e308),
    ] {
        let text = DOC_EXAMPLE.replacen(
            r#""flops": 256}"#,
            &format!(r#""time_us": {time_us:e}, "flops": {flops:e}}}"#),
            1,
        );
        let g = format::from_str(&text).unwrap();
        let fc = g.op(g.op_by_name("fc").unwrap());
        assert_eq!(fc.time_us, Some(time_us), "time_us as written");
        assert_eq!(fc.flops, Some(flops), "flops as written");
        let back = format::from_str(&format::to_string(&g)).unwrap();
        let fc2 = back.op(back.op_by_name("fc").unwrap());
        assert_eq!(fc2.time_us.map(f64::to_bits), Some(time_us.to_bits()));
        assert_eq!(fc2.flops.map(f64::to_bits), Some(flops.to_bits()));
    }
}

#[test]
fn big_integers_in_sizes_and_attrs_survive() {
    // The largest `bytes` that fits beside the other storages (their sum must fit in 64 bits).
    let biggest = doc_example_room_for("dw");
    let text = DOC_EXAMPLE
        .replace(
            r#"{"name": "dw", "dtype": "f32", "shape": [4, 4]}"#,
            &format!(r#"{{"name": "dw", "dtype": "u8", "shape": [1], "bytes": {biggest}}}"#),
        )
        .replace(
            r#""outputs": ["y"]}"#,
            r#""outputs": ["y"], "attrs": {"seed": 123456789012345678901234567890, "eps": 1e-300}}"#,
        );
    let g = format::from_str(&text).unwrap();
    let dw = g.tensor(g.tensor_by_name("dw").unwrap());
    assert_eq!(dw.size, biggest);
    let text2 = assert_round_trip(&g, "big integers");
    assert!(text2.contains("123456789012345678901234567890"));
    assert!(text2.contains("1e-300"));
}

#[test]
fn generator_is_deterministic_and_varied() {
    let cfg = GenConfig::default();
    assert_eq!(random_graph_def(7, &cfg), random_graph_def(7, &cfg));
    assert_ne!(random_graph_def(7, &cfg), random_graph_def(8, &cfg));
    let sizes: std::collections::BTreeSet<usize> =
        (0..50).map(|s| random_graph(s, &cfg).num_ops()).collect();
    assert!(sizes.len() > 10, "op counts vary: {sizes:?}");
}

/// Counts, over many seeds, the structures the planner's property tests rely on.
#[test]
fn generator_covers_every_structure() {
    #[derive(Default, Debug)]
    struct Seen {
        views_of_activations: usize,
        views_of_inputs: usize,
        views_of_params: usize,
        multi_output: usize,
        non_recomputable: usize,
        unused_activations: usize,
        repeated_inputs: usize,
        long_skips: usize,
        with_loss: usize,
        without_loss: usize,
        update_phase: usize,
        costs: [usize; 3],
        kinds: [usize; 5],
        empty_outputs: usize,
        inplace: usize,
    }
    let mut s = Seen::default();
    for seed in 0..300 {
        let g = random_graph(seed, &GenConfig::default());
        for t in g.tensor_ids() {
            let tensor = g.tensor(t);
            s.kinds[TensorKind::ALL
                .iter()
                .position(|&k| k == tensor.kind)
                .unwrap()] += 1;
            if let Some(base) = tensor.alias_of {
                match g.tensor(base).kind {
                    TensorKind::Input => s.views_of_inputs += 1,
                    TensorKind::Param => s.views_of_params += 1,
                    _ => s.views_of_activations += 1,
                }
            }
            let unread = g.consumers(t).is_empty() && !g.outputs().contains(&t);
            if tensor.kind == TensorKind::Activation && unread {
                s.unused_activations += 1;
            }
        }
        for o in g.op_ids() {
            let op = g.op(o);
            s.multi_output += usize::from(op.outputs.len() > 1);
            s.non_recomputable += usize::from(!op.recomputable);
            s.inplace += usize::from(!op.inplace.is_empty());
            let mut ins = op.inputs.clone();
            ins.sort();
            ins.dedup();
            s.repeated_inputs += usize::from(ins.len() < op.inputs.len());
            s.long_skips += ins
                .iter()
                .filter_map(|&t| g.producer(t))
                .filter(|p| o.index() - p.index() > 5)
                .count();
            s.costs[g.op_cost(o).1 as usize] += 1;
        }
        if g.loss().is_some() {
            s.with_loss += 1;
        } else {
            s.without_loss += 1;
        }
        s.update_phase += usize::from(
            g.op_ids()
                .any(|o| g.phase(o) == Some(sgc_ir::Phase::Update)),
        );
        s.empty_outputs += usize::from(g.outputs().is_empty());
    }
    let all = [
        s.views_of_activations,
        s.views_of_inputs,
        s.views_of_params,
        s.multi_output,
        s.non_recomputable,
        s.unused_activations,
        s.repeated_inputs,
        s.long_skips,
        s.with_loss,
        s.without_loss,
        s.update_phase,
        s.empty_outputs,
        s.inplace,
    ];
    assert!(all.iter().all(|&n| n > 0), "{s:?}");
    assert!(s.costs.iter().all(|&n| n > 0), "{s:?}");
    assert!(s.kinds.iter().all(|&n| n > 0), "{s:?}");
}
