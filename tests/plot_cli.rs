//! `sgc plot`: draws a plan found through its recorded graph path (or `--graph`), one
//! rectangle per lifetime, and refuses a graph the plan was not made for.

use std::path::PathBuf;
use std::process::Command;

fn sgc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sgc"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sgc-plot-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn graph(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("graphs/{name}.json"))
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn plots_a_plan_with_one_rect_per_lifetime() {
    let plan = scratch("cnn.plan.json");
    let svg = scratch("cnn.svg");
    ok(sgc()
        .args(["plan", "-q", "--budget", "13KiB", "-o"])
        .arg(&plan)
        .arg(graph("tiny_cnn")));
    ok(sgc().arg("plot").arg(&plan).arg("-o").arg(&svg));
    let text = std::fs::read_to_string(&svg).unwrap();
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let lifetimes = p["lifetimes"].as_array().unwrap().len();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    // Well formed enough: every element opened is closed or self-closing.
    for tag in ["text", "svg"] {
        assert_eq!(
            text.matches(&format!("<{tag} ")).count(),
            text.matches(&format!("</{tag}>")).count(),
            "<{tag}>"
        );
    }
    assert_eq!(text.matches("fill-opacity=\"0.75\"").count(), lifetimes);
    assert!(text.contains("budget 13.00 KiB"), "the budget line");
    assert!(text.contains("per-op lower bound"));
    assert!(text.contains("resident bytes (persistent included)"));
    assert!(
        text.contains("#e4572e\" fill-opacity"),
        "a recomputed tensor is marked"
    );
}

#[test]
fn a_plan_for_another_graph_is_refused() {
    let plan = scratch("mlp.plan.json");
    ok(sgc()
        .args(["plan", "-q", "-o"])
        .arg(&plan)
        .arg(graph("tiny_mlp")));
    let out = sgc()
        .arg("plot")
        .arg(&plan)
        .arg("--graph")
        .arg(graph("tiny_cnn"))
        .arg("-o")
        .arg(scratch("x.svg"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("was made for graph"), "{err}");
}
