//! Properties of the loader and of generated graphs (proptest; a few seconds in all).
//!
//! - `parse_any` returns `Ok` or `Err` on any input, never panics: arbitrary bytes, JSON-ish
//!   strings, and byte-level and structural mutations of valid graph texts (generated
//!   graphs, the format doc's example, a Checkmate graph).
//! - Every error says where: a line and column within the text, a blank text, or a context
//!   and an op, tensor, node or field name that occurs in the document (never a name the
//!   file does not have).
//! - Whatever it accepts is a graph that every downstream function handles: it round-trips
//!   through the saver (and through files, plain and gzip) and obeys the memory-model
//!   invariants below.
//! - Generated graphs always validate and obey the same invariants: the per-op lower bound
//!   is at most the peak, every op's inputs and outputs are resident while it runs, the
//!   resident bytes are exactly the sum of the live storage instances, and `simulate` of the
//!   traced order is `memory_profile()`.

use proptest::prelude::*;
use sgc_ir::testgen::{
    check_error_locates, mutate_bytes, mutate_json, random_graph, GenConfig, DOC_EXAMPLE,
};
use sgc_ir::{format, load_any, parse_any, simulate, Graph, OpId};

/// Memory-model invariants of a valid graph, checked without trusting the profile's peak.
fn check_memory(g: &Graph) {
    let profile = g.memory_profile();
    let order: Vec<OpId> = g.op_ids().collect();
    assert_eq!(simulate(g, &order).unwrap(), profile);
    assert_eq!(profile.resident.len(), g.num_ops());
    assert_eq!(profile.persistent_bytes, g.persistent_bytes());
    let lb = g.lower_bound();
    assert!(
        lb.bytes <= profile.peak,
        "bound {} > peak {}",
        lb.bytes,
        profile.peak
    );
    let max = profile.resident.iter().copied().max().unwrap_or(0);
    assert_eq!(profile.peak, profile.persistent_bytes.saturating_add(max));
    for (s, &resident) in profile.resident.iter().enumerate() {
        let live: u128 = profile
            .instances
            .iter()
            .filter(|i| i.start <= s && s <= i.end)
            .map(|i| i.bytes as u128)
            .sum();
        assert_eq!(u128::from(resident), live.min(u64::MAX as u128), "step {s}");
        assert!(
            resident >= g.op_footprint(OpId::new(s)),
            "step {s}: op's storage not resident"
        );
    }
    for i in &profile.instances {
        assert!(i.start <= i.end && i.end < g.num_ops().max(1), "{i:?}");
        assert_eq!(i.bytes, g.tensor(i.root).size);
    }
}

/// Everything downstream of a successful parse must work on the result.
fn check_accepted(g: &Graph) {
    check_memory(g);
    let text = format::to_string(g);
    let back = format::from_str(&text).expect("a saved graph reloads");
    assert_eq!(&back, g);
    assert_eq!(format::to_string(&back), text);
    for o in g.op_ids() {
        let (cost, _) = g.op_cost(o);
        assert!(cost.is_finite() && cost >= 0.0);
        let _ = g.phase(o);
    }
}

/// Feeds text to the loader; an accepted graph goes through every check, an error must say
/// where.
fn exercise(text: &str) {
    match parse_any(text) {
        Ok(g) => check_accepted(&g),
        Err(e) => check_error_locates(&e, text),
    }
}

/// A graph saved to a file (plain or gzip) loads back equal.
fn check_file_round_trip(g: &Graph, tag: &str) {
    let dir = std::env::temp_dir().join(format!("sgc-ir-props-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in [format!("{tag}.json"), format!("{tag}.json.gz")] {
        let path = dir.join(name);
        format::save(g, &path).unwrap();
        assert_eq!(&load_any(&path).unwrap(), g, "{}", path.display());
        std::fs::remove_file(&path).unwrap();
    }
}

fn checkmate_text(file: &str) -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../benches/data/checkmate")
        .join(file);
    std::fs::read_to_string(path).unwrap()
}

/// Valid graph texts to damage: the doc example, both kinds of Checkmate graph, generated
/// graphs.
fn seed_text(which: u64) -> String {
    match which % 8 {
        0 => DOC_EXAMPLE.to_string(),
        1 => checkmate_text("vgg16_b256_train.json"),
        2 => checkmate_text("random_layered_n100.json"),
        _ => format::to_string(&random_graph(which, &GenConfig::small())),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        exercise(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn json_ish_strings_never_panic(text in r#"[\[\]{}",:0-9a-z .eE+\-\n]{0,200}"#) {
        exercise(&text);
    }

    #[test]
    fn json_ish_graph_fragments_never_panic(
        parts in proptest::collection::vec(prop_oneof![
            Just(r#"{"format": "sgc-graph", "version": 1, "#.to_string()),
            Just(r#""tensors": ["#.to_string()),
            Just(r#""ops": ["#.to_string()),
            Just(r#""outputs": ["#.to_string()),
            Just(r#"{"name": "a", "dtype": "f32", "shape": [2]}"#.to_string()),
            Just(r#"{"name": "b", "dtype": "f32", "shape": [2], "alias_of": "a"}"#.to_string()),
            Just(r#"{"name": "a", "dtype": "u8", "shape": [1], "kind": "input"}"#.to_string()),
            Just(r#"{"name": "f", "op": "id", "inputs": ["a"], "outputs": ["b"]}"#.to_string()),
            Just(r#"{"name": "g", "op": "id", "inputs": ["b"], "outputs": ["a"]}"#.to_string()),
            Just(r#""a""#.to_string()),
            Just(r#""b""#.to_string()),
            Just("]".to_string()),
            Just("}".to_string()),
            Just(", ".to_string()),
        ], 0..24)
    ) {
        exercise(&parts.concat());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn byte_mutations_of_valid_graphs_never_panic(which in 0u64..64, seed in any::<u64>()) {
        let text = seed_text(which);
        let damaged = mutate_bytes(seed, text.as_bytes());
        exercise(&String::from_utf8_lossy(&damaged));
    }

    #[test]
    fn structural_mutations_of_valid_graphs_never_panic(which in 0u64..64, seed in any::<u64>()) {
        let value: serde_json::Value = serde_json::from_str(&seed_text(which)).unwrap();
        let damaged = mutate_json(seed, &value);
        exercise(&serde_json::to_string(&damaged).unwrap());
    }

    #[test]
    fn generated_graphs_validate_and_obey_the_memory_model(seed in any::<u64>()) {
        let def = sgc_ir::testgen::random_graph_def(seed, &GenConfig::default());
        let g = Graph::from_def(def).unwrap();
        check_accepted(&g);
    }

    #[test]
    fn small_generated_graphs_obey_the_memory_model(seed in any::<u64>()) {
        check_accepted(&random_graph(seed, &GenConfig::small()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Save -> load through real files, plain and gzip, gives the same graph.
    #[test]
    fn generated_graphs_round_trip_through_files(seed in any::<u64>()) {
        check_file_round_trip(&random_graph(seed, &GenConfig::default()), &format!("g{seed}"));
    }
}

/// The two view-ordering mistakes a structural mutation produces most easily, spelled out:
/// they are errors, not panics in the memory model.
#[test]
fn views_of_storage_that_does_not_exist_yet_are_errors() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "kind": "input"},
                  {"name": "v", "dtype": "f32", "shape": [4], "alias_of": "y"},
                  {"name": "y", "dtype": "f32", "shape": [4]}],
      "ops": [{"name": "make_v", "op": "view", "inputs": ["x"], "outputs": ["v"]},
              {"name": "make_y", "op": "relu", "inputs": ["x"], "outputs": ["y"]}],
      "outputs": []}"#;
    assert!(matches!(
        parse_any(text),
        Err(sgc_ir::GraphError::ViewBeforeBase { .. })
    ));
    // Same op, base listed first: allowed; base listed second: rejected.
    let same_op = |outs: &str| {
        text.replace(
            r#"{"name": "make_v", "op": "view", "inputs": ["x"], "outputs": ["v"]},
              {"name": "make_y", "op": "relu", "inputs": ["x"], "outputs": ["y"]}"#,
            &format!(r#"{{"name": "both", "op": "split", "inputs": ["x"], "outputs": {outs}}}"#),
        )
    };
    check_accepted(&parse_any(&same_op(r#"["y", "v"]"#)).unwrap());
    assert!(parse_any(&same_op(r#"["v", "y"]"#)).is_err());
}

/// A Checkmate `graph.order` naming a node that does not exist is an error.
#[test]
fn checkmate_order_naming_an_unknown_node_is_an_error() {
    let text = r#"{"directed": true, "graph": {"order": [0, 7]},
      "nodes": [{"name": 0, "out_cost": 4, "duration": 1}, {"name": 1, "out_cost": 4, "duration": 1}],
      "links": [{"0": 0, "1": 1}]}"#;
    let e = parse_any(text).unwrap_err();
    assert!(e.to_string().contains('7'), "{e}");
}
