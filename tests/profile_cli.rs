//! `sgc profile` on the CPU: every op of the written graph carries a positive measured
//! `time_us`, the file validates, a plan of it is costed by those times, and
//! `sgc run --compare` prints the ratio that plan predicts beside the one it measures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sgc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sgc"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = sgc(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sgc-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn profile_writes_measured_times_that_plans_use() {
    let dir = scratch();
    let timed = dir.join("cnn.timed.json.gz");
    let t = timed.to_str().unwrap();
    let said = ok(&["profile", "graphs/tiny_cnn.json", "--steps", "2", "-o", t]);
    assert!(
        said.contains("time_us measured on all 32 ops on cpu"),
        "{said}"
    );
    let graph = sgc::ir::load_any(Path::new(t)).expect("the timed graph validates");
    for op in graph.op_ids() {
        let o = graph.op(op);
        assert!(
            o.time_us.is_some_and(|v| v > 0.0),
            "{}: {:?}",
            o.name,
            o.time_us
        );
    }
    let source = &graph.meta().expect("meta")["time_us_source"];
    assert_eq!(source["method"], "measured");
    assert_eq!(source["clock"], "wall clock");
    let plan = ok(&["plan", t, "-q"]);
    assert!(plan.contains("from time_us"), "{plan}");
    let run = ok(&[
        "run",
        t,
        "--strategy",
        "sublinear",
        "--compare",
        "--steps",
        "2",
    ]);
    assert!(
        run.contains("plan predicted 1.") && run.contains("(costs from time_us)"),
        "{run}"
    );
    assert!(run.contains("2 warm-up + 2 timed steps"), "{run}");
}

#[test]
fn profile_on_a_missing_device_is_one_error() {
    if cfg!(feature = "cuda") {
        return; // a build with the feature may find a device
    }
    let out_dir = scratch();
    let o = out_dir.join("never.json");
    let out = sgc(&[
        "profile",
        "graphs/tiny_cnn.json",
        "--device",
        "cuda",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: ") && err.contains("CUDA"), "{err}");
    assert!(!o.exists());
}

#[test]
fn compare_without_a_plan_says_what_it_needs() {
    let out = sgc(&["run", "graphs/tiny_mlp.json", "--compare", "--steps", "1"]);
    assert!(!out.status.success(), "--compare without a plan ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("graphs/tiny_mlp.json")
            && err.contains("--strategy")
            && err.contains("--plan"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
