//! `sgc plot`: draws a plan found through its recorded graph path (or `--graph`), one
//! rectangle per lifetime, a plan's offloads on copy lanes, and refuses a graph the plan
//! was not made for.

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

#[test]
fn plots_an_offload_plan_with_copy_lanes() {
    use sgc::plan::{plan_schedule_offloaded, streams::HostLink, PlanOptions};
    let path = graph("tiny_mlp");
    let g = sgc::ir::load_any(&path).unwrap();
    let ops: Vec<_> = g.op_ids().collect();
    let offloads = sgc_ir::testgen::spaced_offloads(&g, &ops, 3);
    assert_eq!(offloads.len(), 3, "the graph has gaps to offload over");
    let options = PlanOptions {
        device_profile: Some("h100".parse().unwrap()),
        host_link: HostLink::named("h100"),
        ..PlanOptions::default()
    };
    let mut p = plan_schedule_offloaded(&g, &options, &ops, &offloads).unwrap();
    p.graph.path = Some(path.display().to_string());
    let plan = scratch("offload.plan.json");
    let svg = scratch("offload.svg");
    std::fs::write(&plan, p.to_json()).unwrap();
    let out = ok(sgc().arg("plot").arg(&plan).arg("-o").arg(&svg));
    assert!(out.contains("3 offloads' copies on their lanes"), "{out}");
    let text = std::fs::read_to_string(&svg).unwrap();
    for lane in ["compute", "to host", "to device"] {
        assert!(text.contains(&format!(">{lane}</text>")), "lane {lane}");
    }
    assert!(text.contains("copies beside compute: 3 offloads"));
    // One bar per copy in each direction; each offload's two device instances marked.
    assert_eq!(text.matches("fill=\"#f4a261\"").count(), 3);
    assert_eq!(text.matches("fill=\"#2a9d8f\"").count(), 3);
    assert_eq!(text.matches("fill=\"#8e44ad\" fill-opacity").count(), 6);
    // A plan without offloads has no lanes.
    let plain = scratch("plain.svg");
    let p = sgc::plan::plan_schedule(&g, &PlanOptions::default(), &ops).unwrap();
    let plain_plan = scratch("plain.plan.json");
    std::fs::write(&plain_plan, p.to_json()).unwrap();
    ok(sgc()
        .arg("plot")
        .arg(&plain_plan)
        .arg("--graph")
        .arg(&path)
        .arg("-o")
        .arg(&plain));
    assert!(!std::fs::read_to_string(&plain)
        .unwrap()
        .contains("copies beside compute"));
}
