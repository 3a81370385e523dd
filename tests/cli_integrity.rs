//! No input can lose data or lie: an output path naming an input is refused and the input
//! survives; outputs are written whole (no temporary file left behind); worker counts are
//! bounded; inputs above the size limit are refused before they are read; a JSON object
//! naming a key twice is refused with its line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sgc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(args)
        .output()
        .unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sgc-integrity-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn copy_of(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("graphs")
            .join(name),
        &to,
    )
    .unwrap();
    to
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_output_naming_an_input_is_refused_and_the_input_survives() {
    let dir = scratch("same");
    let g = copy_of(&dir, "tiny_cnn.json");
    let before = std::fs::read(&g).unwrap();
    // The same file through another spelling of its path.
    let other = dir.join(".").join("tiny_cnn.json");
    let (gs, os) = (g.to_str().unwrap(), other.to_str().unwrap());
    for args in [
        vec!["plan", gs, "-o", os],
        vec!["rescale", gs, "--batch", "3", "-o", os],
        vec!["cost", gs, "--device-profile", "a100", "-o", os],
        vec!["profile", gs, "-o", os],
        vec!["compare", gs, "--no-exec", "--write-baseline", os],
    ] {
        let out = sgc(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&out).contains("names the input file"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(
            std::fs::read(&g).unwrap(),
            before,
            "{args:?} changed the input"
        );
    }
    let plan = dir.join("plan.json");
    assert!(sgc(&["plan", gs, "-o", plan.to_str().unwrap()])
        .status
        .success());
    let plot = sgc(&["plot", plan.to_str().unwrap(), "-o", plan.to_str().unwrap()]);
    assert!(!plot.status.success() && stderr(&plot).contains("names the input file"));
    // A baseline written over the one it is checked against would pass vacuously.
    let base = dir.join("base.json");
    let bs = base.to_str().unwrap();
    assert!(sgc(&["compare", gs, "--no-exec", "--write-baseline", bs])
        .status
        .success());
    let before_base = std::fs::read(&base).unwrap();
    let both = sgc(&[
        "compare",
        gs,
        "--no-exec",
        "--check",
        bs,
        "--write-baseline",
        bs,
    ]);
    assert!(!both.status.success() && stderr(&both).contains("names the input file"));
    assert_eq!(std::fs::read(&base).unwrap(), before_base);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("sgc-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn worker_counts_are_bounded() {
    let g = Path::new(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_mlp.json");
    for bad in ["0", "1025", "100000"] {
        let out = sgc(&["plan", g.to_str().unwrap(), "--workers", bad]);
        assert!(!out.status.success(), "--workers {bad} accepted");
        let want = format!("error: --workers must be a whole number from 1 to 1024, got {bad}\n");
        assert!(stderr(&out).starts_with(&want), "{}", stderr(&out));
    }
    assert!(sgc(&["plan", g.to_str().unwrap(), "--workers", "2"])
        .status
        .success());
}

#[test]
fn inputs_above_the_limit_are_refused() {
    let g = Path::new(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_mlp.json");
    let out = sgc(&["inspect", g.to_str().unwrap(), "--max-input", "1KiB"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("above the input limit"),
        "{}",
        stderr(&out)
    );
    assert!(
        sgc(&["inspect", g.to_str().unwrap(), "--max-input", "1MiB"])
            .status
            .success()
    );
    // A device that never ends is read up to the limit, then refused.
    if Path::new("/dev/zero").exists() {
        let out = sgc(&["inspect", "/dev/zero", "--max-input", "1MiB"]);
        assert!(
            !out.status.success() && stderr(&out).contains("input limit"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn a_duplicate_key_is_refused_with_its_line() {
    let dir = scratch("dup");
    let path = dir.join("dup.json");
    std::fs::write(
        &path,
        "{\"format\": \"sgc-graph\", \"version\": 1,\n \"tensors\": [],\n \"ops\": [], \"ops\": [],\n \"outputs\": []}\n",
    )
    .unwrap();
    let out = sgc(&["inspect", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("duplicate key `ops`") && err.contains("line 3"),
        "{err}"
    );
}

/// `--check` refuses what a plan file cannot honestly say: a field the format does not
/// have, a summary figure its steps do not give, a peak above the budget it states.
#[test]
fn check_refuses_unknown_fields_edited_figures_and_broken_budgets() {
    let dir = scratch("check");
    let g = Path::new(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_mlp.json");
    let gs = g.to_str().unwrap();
    let plan = dir.join("plan.json");
    assert!(sgc(&["plan", gs, "-o", plan.to_str().unwrap()])
        .status
        .success());
    let good: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit, &str); 3] = [
        (
            "unknown field",
            |p| p["bogus"] = 1.into(),
            "unknown field `bogus`",
        ),
        (
            "edited figure",
            |p| {
                let v = p["summary"]["recompute_cost"].as_f64().unwrap();
                p["summary"]["recompute_cost"] = (v + 1.0).into();
            },
            "summary",
        ),
        (
            "broken budget",
            |p| p["options"]["budget"] = 100.into(),
            "above its budget",
        ),
    ];
    for (what, edit, expect) in cases {
        let mut p = good.clone();
        edit(&mut p);
        let path = dir.join(format!("{}.json", what.replace(' ', "_")));
        std::fs::write(&path, p.to_string()).unwrap();
        let out = sgc(&["plan", gs, "--check", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{what} accepted");
        assert!(stderr(&out).contains(expect), "{what}: {}", stderr(&out));
    }
    assert!(sgc(&["plan", gs, "--check", plan.to_str().unwrap()])
        .status
        .success());
}

/// The Checkmate importer's errors name the file, the node and the field, and a
/// non-boolean `backward` is refused rather than read as absent.
#[test]
fn checkmate_errors_name_the_file_node_and_field() {
    let dir = scratch("checkmate");
    let node = |extra: &str| {
        format!(
            r#"{{"directed": true, "multigraph": false, "graph": {{}}, "nodes": [{{"id": 0, "name": "conv1", {extra}}}], "links": []}}"#
        )
    };
    for (extra, field) in [
        (
            r#""cost_ram": 8, "cost_cpu": 1, "backward": "yes""#,
            "backward",
        ),
        (
            r#""cost_ram": -8, "cost_cpu": 1, "backward": false"#,
            "cost_ram",
        ),
    ] {
        let path = dir.join(format!("{field}.json"));
        std::fs::write(&path, node(extra)).unwrap();
        let out = sgc(&["inspect", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{extra} accepted");
        let err = stderr(&out);
        let named = err.contains(path.to_str().unwrap())
            && err.contains("`conv1`")
            && err.contains(&format!("`{field}`"));
        assert!(named, "{err}");
    }
}
