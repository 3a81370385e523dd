//! `sgc inspect`: the figures it prints for the Checkmate graphs equal the README of
//! `benches/data/checkmate`, and a bad file is one readable error with a non-zero exit.

use std::path::PathBuf;
use std::process::{Command, Output};

fn inspect(args: &[&str], file: &PathBuf) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sgc"))
        .arg("inspect")
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn checkmate(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("benches/data/checkmate")
        .join(file)
}

/// Rounds to 4 significant digits, the precision of the README's table.
fn sig4(x: f64) -> f64 {
    let e = x.log10().floor() as i32 - 3;
    (x / 10f64.powi(e)).round() * 10f64.powi(e)
}

#[test]
fn checkmate_peaks_and_bounds_equal_the_readme() {
    // (file, ops, peak in given order, per-op lower bound, peak / bound) from the README.
    let table = [
        ("vgg16_b256_train.json", 45, 1.583e10, 1.315e10, 1.20),
        ("mobilenet_b512_train.json", 185, 3.470e10, 6.636e9, 5.23),
        ("random_layered_n100.json", 100, 46320.0, 20020.0, 2.31),
        ("random_layered_n250.json", 250, 146800.0, 87600.0, 1.68),
    ];
    for (file, ops, peak, bound, ratio) in table {
        let out = inspect(&["--json"], &checkmate(file));
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["ops"], ops, "{file}");
        let p = r["unplanned_peak_bytes"].as_f64().unwrap();
        let lb = r["lower_bound_bytes"].as_f64().unwrap();
        assert_eq!(sig4(p), peak, "{file}: peak {p}");
        assert_eq!(sig4(lb), bound, "{file}: bound {lb}");
        let got = r["peak_over_lower_bound"].as_f64().unwrap();
        assert!((got - ratio).abs() < 0.005, "{file}: ratio {got}");
    }
}

/// The least-peak bound `inspect` prints is the one the planner holds budgets against: at
/// least the per-op bound, at most the unplanned peak, a peak budget one byte below it is
/// refused before planning and one at it is not refused by a bound (n100: 25,050 B against
/// the per-op 20,020 B; n250: equal to the per-op bound).
#[test]
fn the_least_peak_bound_is_the_one_budgets_are_refused_by() {
    for (file, least) in [
        ("random_layered_n100.json", 25_050u64),
        ("random_layered_n250.json", 87_600),
    ] {
        let out = inspect(&["--json"], &checkmate(file));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let got = r["least_peak_bytes"].as_u64().unwrap();
        assert_eq!(got, least, "{file}");
        assert!(r["lower_bound_bytes"].as_u64().unwrap() <= got, "{file}");
        assert!(got <= r["unplanned_peak_bytes"].as_u64().unwrap(), "{file}");
        assert!(r["least_peak_op"].is_string(), "{file}");
        let plan = |budget: u64| {
            let out = Command::new(env!("CARGO_BIN_EXE_sgc"))
                .args(["plan", "-q", "--budget-of", "peak", "--budget"])
                .arg(budget.to_string())
                .arg(checkmate(file))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        let below = plan(got - 1);
        assert!(
            below.contains(&format!("lower bound {got} B")),
            "{file}: {below}"
        );
        let at = plan(got);
        assert!(!at.contains("is below the"), "{file}: {at}");
    }
}

/// Where the graph outputs made before an op (gradients done so far) raise it, `inspect`
/// prints the kept-outputs bound, and the default strategy, whose plans keep those outputs,
/// refuses a peak budget one byte below it before planning and plans (or misses) at it.
/// tiny_transformer: 61,316 B against the least-peak bound's 41,216 B.
#[test]
fn the_kept_outputs_bound_is_printed_and_refuses_budgets() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_transformer.json");
    let out = inspect(&["--json"], &file);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (least, kept) = (
        r["least_peak_bytes"].as_u64().unwrap(),
        r["kept_outputs_bytes"].as_u64().unwrap(),
    );
    assert_eq!((least, kept), (41_216, 61_316));
    assert!(kept <= r["unplanned_peak_bytes"].as_u64().unwrap());
    let text = String::from_utf8(inspect(&[], &file).stdout).unwrap();
    assert!(
        text.contains("kept-outputs bound    59.88 KiB (61316 B)"),
        "{text}"
    );
    let plan = |budget: u64| {
        let out = Command::new(env!("CARGO_BIN_EXE_sgc"))
            .args(["plan", "-q", "--budget-of", "peak", "--budget"])
            .arg(budget.to_string())
            .arg(&file)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let below = plan(kept - 1);
    assert!(
        below.contains("is below the kept-outputs lower bound 61316 B"),
        "{below}"
    );
    let at = plan(kept);
    assert!(!at.contains("is below the"), "{at}");
}

#[test]
fn text_report_shows_exact_bytes_and_the_bound() {
    let out = inspect(&[], &checkmate("vgg16_b256_train.json"));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("(15825108992 B)"), "{text}");
    assert!(text.contains("per-op lower bound"), "{text}");
    assert!(text.contains("least-peak bound"), "{text}");
    assert!(text.contains("GiB"), "{text}");
    assert!(text.contains("largest tensors"), "{text}");
}

#[test]
fn a_bad_file_is_one_message_naming_file_and_tensor() {
    let dir = std::env::temp_dir().join(format!("sgc-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"format": "sgc-graph", "version": 1,
            "tensors": [{"name": "x", "dtype": "f33", "shape": [1]}],
            "ops": [], "outputs": []}"#,
    )
    .unwrap();
    let out = inspect(&[], &bad);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.json") && err.contains("tensor `x`") && err.contains("f33"),
        "{err}"
    );

    std::fs::write(&bad, "{\n  \"format\": \"sgc-graph\",,\n}").unwrap();
    let err = String::from_utf8(inspect(&[], &bad).stderr).unwrap();
    assert!(err.contains("line 2, column 25"), "{err}");
}

#[test]
fn device_coverage_lists_the_ops_a_backend_cannot_run() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let json = |args: &[&str], file: &str| {
        let out = inspect(args, &repo.join(file));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let r = json(&["--json", "--device", "cuda"], "graphs/tiny_cnn.json");
    assert_eq!(r["coverage"]["device"], "cuda");
    assert_eq!(r["coverage"]["ops"], r["ops"]);
    assert_eq!(r["coverage"]["missing"].as_array().unwrap().len(), 0);
    let text = inspect(&["--device", "cuda"], &repo.join("graphs/tiny_cnn.json"));
    let ops = r["ops"].as_u64().unwrap();
    let line = format!("all {ops} ops run on cuda");
    assert!(String::from_utf8_lossy(&text.stdout).contains(&line));
    // A cumulative sum, which neither backend runs (every corpus graph runs everywhere).
    let dir = std::env::temp_dir().join(format!("sgc-coverage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let strided = dir.join("cumsum.json");
    let graph = serde_json::json!({
        "format": "sgc-graph", "version": 1,
        "tensors": [{"name": "x", "dtype": "f32", "shape": [4, 6], "kind": "input"},
                    {"name": "y", "dtype": "f32", "shape": [4, 6]}],
        "ops": [{"name": "running_total", "op": "aten.cumsum.default", "inputs": ["x"],
                 "outputs": ["y"], "attrs": {"dim": 1}}],
        "outputs": ["y"]
    });
    std::fs::write(&strided, graph.to_string()).unwrap();
    let r = json(&["--json", "--device", "cpu"], strided.to_str().unwrap());
    let missing = r["coverage"]["missing"].as_array().unwrap();
    let per_type = r["coverage"]["missing_per_type"].as_array().unwrap();
    let counted: u64 = per_type.iter().map(|t| t[1].as_u64().unwrap()).sum();
    assert!(!missing.is_empty());
    assert_eq!(counted, missing.len() as u64);
    assert!(missing.iter().all(|g| g["reason"]
        .as_str()
        .unwrap()
        .contains(g["op"].as_str().unwrap())));
    // Without --device, no coverage.
    assert!(json(&["--json"], "graphs/tiny_cnn.json")["coverage"].is_null());
}
