//! `.json.gz` graph files: a zoo graph survives a round trip through gzip (and is told by
//! its bytes, not its name), a truncated gzip is an error naming the file, and a gzip whose
//! content is not valid JSON still reports the line and column.

use sgc_ir::{format, load_any, GraphError, LoadError};
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sgc-ir-gzip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// Gzip bytes of `text` (through the saver, which compresses by the `.gz` name); `tag`
/// keeps the scratch files of tests running in parallel apart.
fn gzip_bytes(text: &str, tag: &str) -> Vec<u8> {
    let tmp = scratch(&format!("{tag}.tmp.gz"));
    sgc_ir::file::write_text(&tmp, text).expect("writes");
    std::fs::read(&tmp).expect("reads")
}

#[test]
fn zoo_graphs_round_trip_through_json_gz() {
    for model in sgc_ir::zoo::models()
        .into_iter()
        .filter(|m| ["tiny_cnn", "tiny_transformer", "resnet50"].contains(&m.name))
    {
        let graph = (model.build)();
        let gz = scratch(&format!("{}.json.gz", model.name));
        format::save(&graph, &gz).expect("saves");
        let raw = std::fs::read(&gz).expect("reads");
        assert_eq!(&raw[..2], &[0x1f, 0x8b], "{}: written as gzip", model.name);
        let plain_len = format::to_string(&graph).len();
        assert!(raw.len() * 3 < plain_len, "{}: compresses", model.name);
        assert_eq!(load_any(&gz).expect("loads"), graph, "{}", model.name);
        assert_eq!(format::load(&gz).expect("loads"), graph, "{}", model.name);
        // Told by content: the same bytes under a `.json` name load too.
        let misnamed = scratch(&format!("{}_gz_content.json", model.name));
        std::fs::write(&misnamed, &raw).expect("writes");
        assert_eq!(load_any(&misnamed).expect("loads"), graph, "{}", model.name);
    }
}

#[test]
fn a_truncated_gzip_is_an_error_naming_the_file() {
    let graph = (sgc_ir::zoo::models()[0].build)();
    let raw = gzip_bytes(&format::to_string(&graph), "truncated");
    for cut in [raw.len() / 2, raw.len() - 1, 10] {
        let path = scratch(&format!("truncated_at_{cut}.json.gz"));
        std::fs::write(&path, &raw[..cut]).expect("writes");
        for e in [
            load_any(&path).unwrap_err(),
            format::load(&path).unwrap_err(),
        ] {
            assert!(matches!(e, LoadError::Gzip { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains("truncated or corrupt"), "{msg}");
        }
    }
}

#[test]
fn invalid_json_inside_gzip_reports_line_and_column() {
    let path = scratch("bad_json.json.gz");
    std::fs::write(
        &path,
        gzip_bytes(
            "{\n  \"format\": \"sgc-graph\",\n  \"version\": 1,,\n}",
            "bad_json",
        ),
    )
    .expect("writes");
    for e in [
        load_any(&path).unwrap_err(),
        format::load(&path).unwrap_err(),
    ] {
        assert!(
            matches!(
                e.graph_error(),
                Some(GraphError::Json {
                    line: 3,
                    column: 16,
                    ..
                })
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains("bad_json.json.gz"), "{msg}");
        assert!(msg.contains("line 3, column 16"), "{msg}");
    }
}

#[test]
fn a_checkmate_graph_loads_from_gzip() {
    let text = r#"{"directed": true, "multigraph": false, "graph": {},
        "nodes": [{"id": 0, "cost_ram": 8, "cost_cpu": 1.0},
                  {"id": 1, "cost_ram": 4, "cost_cpu": 2.0}],
        "links": [{"source": 0, "target": 1}]}"#;
    let plain = scratch("node_link.json");
    std::fs::write(&plain, text).expect("writes");
    let gz = scratch("node_link.json.gz");
    std::fs::write(&gz, gzip_bytes(text, "node_link")).expect("writes");
    let expected = load_any(&plain).expect("the plain file loads");
    assert_eq!(load_any(&gz).expect("the gzip loads"), expected);
}
