//! `sgc alloc`: writes a validated offset column, reports the bound, and rejects malformed
//! rows naming the line.

use sgc::plan::alloc::{csv, validate, Placement, SearchSummary};
use std::path::PathBuf;
use std::process::Command;

fn sgc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sgc"))
}

fn dsa(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("benches/data/dsa")
        .join(file)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sgc-alloc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn writes_offsets_that_validate() {
    let out = scratch("input12.out.csv");
    let run = sgc()
        .args(["alloc", "--json", "--effort", "fast", "--align", "2", "-o"])
        .arg(&out)
        .arg(dsa("input.12.csv"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["lower_bound"], 12);
    assert_eq!(report["arena"], 12);
    let rows = csv::read(&out).unwrap();
    let input = csv::read(dsa("input.12.csv")).unwrap();
    assert_eq!(rows.len(), input.len());
    let placement = Placement {
        offsets: rows.iter().map(|r| r.offset.unwrap()).collect(),
        arena: 12,
        lower_bound: 12,
        algorithm: String::new(),
        trials: Vec::new(),
        search: SearchSummary::off(12),
        skipped: Vec::new(),
    };
    validate(&csv::buffers(&rows), &placement, 2).unwrap();
    assert_eq!(rows[0].id, input[0].id);
}

#[test]
fn reports_what_the_search_did() {
    let run = sgc()
        .arg("alloc")
        .arg(dsa("C.1048576.csv"))
        .output()
        .unwrap();
    assert!(run.status.success());
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        text.contains("search       proved the arena optimal"),
        "{text}"
    );
    let run = sgc()
        .args(["alloc", "--json", "--effort", "fast"])
        .arg(dsa("C.1048576.csv"))
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["search"]["stop"], "off");
    assert_eq!(report["skipped"], serde_json::json!([]));
}

#[test]
fn malformed_rows_fail_naming_the_line() {
    let bad = scratch("bad.csv");
    std::fs::write(&bad, "id,lower,upper,size\na,0,3,4\nb,4,2,8\n").unwrap();
    let run = sgc().arg("alloc").arg(&bad).output().unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("line 3"), "{err}");
}
