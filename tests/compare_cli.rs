//! `sgc compare --check`: passes against the committed baseline's figures, and fails on a
//! doctored baseline that makes today's plan look worse (the guard bites).

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn compare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sgc"))
        .arg("compare")
        .arg(repo("graphs/tiny_cnn.json"))
        .arg(repo("benches/data/checkmate/vgg16_b256_train.json"))
        .args(args)
        .output()
        .unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sgc-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn the_check_passes_on_fresh_figures_and_bites_on_a_worse_plan() {
    let base = scratch("base.json");
    let out = compare(&["--write-baseline", base.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("| tiny_cnn |") && table.contains("| vgg16_b256_train |"),
        "{table}"
    );
    assert!(
        table.contains("loss bitwise equal"),
        "tiny graphs are executed: {table}"
    );

    let ok = compare(&["--check", base.to_str().unwrap()]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    // Doctor the baseline: pretend main planned tiny_cnn 5% lower than today.
    let mut b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    let entry = &mut b["graphs"]["tiny_cnn"];
    let peak = entry["planned_peak"].as_u64().unwrap();
    entry["planned_peak"] = (peak * 95 / 100).into();
    let doctored = scratch("doctored.json");
    std::fs::write(&doctored, serde_json::to_string(&b).unwrap()).unwrap();
    let bad = compare(&["--check", doctored.to_str().unwrap()]);
    assert!(!bad.status.success(), "a worse plan must fail the check");
    let err = String::from_utf8(bad.stderr).unwrap();
    assert!(err.contains("tiny_cnn: planned peak grew"), "{err}");

    // And an improvement passes with a hint to refresh the baseline.
    b["graphs"]["tiny_cnn"]["planned_peak"] = (peak * 2).into();
    std::fs::write(&doctored, serde_json::to_string(&b).unwrap()).unwrap();
    let better = compare(&["--check", doctored.to_str().unwrap()]);
    assert!(better.status.success());
    assert!(String::from_utf8(better.stderr)
        .unwrap()
        .contains("just baseline"));

    // A graph named twice (the last would win) or a misspelt figure (it would go unchecked)
    // is refused, not read.
    let text = std::fs::read_to_string(&base).unwrap();
    let twice = text.replacen(
        "\"tiny_cnn\": {",
        "\"tiny_cnn\": {\"unplanned_peak\": 1, \"planned_peak\": 1, \"arena\": 1},\n    \"tiny_cnn\": {",
        1,
    );
    let misspelt = text.replacen("\"planned_peak\"", "\"planed_peak\"", 1);
    for (doctored_text, says) in [
        (twice, "duplicate key `tiny_cnn`"),
        (misspelt, "unknown field `planed_peak`"),
    ] {
        assert_ne!(doctored_text, text);
        std::fs::write(&doctored, doctored_text).unwrap();
        let out = compare(&["--check", doctored.to_str().unwrap()]);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success() && err.contains(says), "{err}");
    }
}

#[test]
fn the_committed_baseline_covers_the_zoo_and_checkmate() {
    let text = std::fs::read_to_string(repo("benches/peak_memory.json")).unwrap();
    let b: serde_json::Value = serde_json::from_str(&text).unwrap();
    for g in [
        "resnet50",
        "gpt2",
        "tiny_mlp",
        "vgg16_b256_train",
        "random_layered_n250",
    ] {
        assert!(
            b["graphs"][g]["planned_peak"].is_u64(),
            "{g} missing from the baseline"
        );
    }
}
