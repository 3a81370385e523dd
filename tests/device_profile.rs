//! Planning with a device profile: the planner costs ops without `time_us` by their roofline
//! estimate, the plan records the profile in its options (old plan files without it still
//! load), `sgc plan --device-profile` reports the cost source, and the plan it writes passes
//! `sgc plan --check`, which reproduces the summary from the plan's own options.

use serde_json::Value;
use sgc::ir::{format, DeviceProfile, Graph};
use sgc::plan::{Plan, PlanOptions, Strategy};
use std::path::PathBuf;
use std::process::{Command, Output};

fn sgc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(args)
        .output()
        .expect("sgc runs")
}

fn zoo(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("graphs/{name}.json"))
        .display()
        .to_string()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sgc-device-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn ok_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

fn a100() -> DeviceProfile {
    "a100".parse().expect("named profile")
}

fn options(device: Option<DeviceProfile>) -> PlanOptions {
    PlanOptions {
        strategy: Strategy::Sublinear,
        genetic_iters: 2,
        device_profile: device,
        ..PlanOptions::default()
    }
}

#[test]
fn the_summary_costs_ops_by_the_profile() {
    let g: Graph = format::load(zoo("tiny_transformer")).expect("zoo graph");
    let d = a100();
    let plan = sgc::plan::plan(&g, &options(Some(d.clone())), &Default::default()).expect("plans");
    sgc::plan::verify(&g, &plan).expect("verifies");
    let expected: f64 = g
        .op_ids()
        .map(|o| g.op_cost_with(o, Some(&d)).0)
        .fold(0.0, |a, c| a + c);
    assert_eq!(plan.summary.step_cost, expected);
    assert_eq!(plan.summary.cost_source, "roofline estimate (a100)");
    let recompute: f64 = plan
        .steps
        .iter()
        .filter(|s| s.recompute)
        .map(|s| g.op_cost_with(s.op, Some(&d)).0)
        .fold(0.0, |a, c| a + c);
    assert!(plan.summary.recompute_steps > 0);
    assert_eq!(plan.summary.recompute_cost, recompute);
    assert_eq!(plan.summary_for(&g).expect("replays"), plan.summary);
    let plain = sgc::plan::plan(&g, &options(None), &Default::default()).expect("plans");
    assert_eq!(plain.summary.cost_source, "flops");
    assert_ne!(plain.summary.step_cost, plan.summary.step_cost);
}

#[test]
fn plan_options_round_trip_with_and_without_a_profile() {
    for device in [None, Some(a100()), Some("1/2/3".parse().expect("custom"))] {
        let o = options(device.clone());
        let text = serde_json::to_string(&o).expect("serialises");
        assert_eq!(text.contains("device_profile"), device.is_some(), "{text}");
        let back: PlanOptions = serde_json::from_str(&text).expect("loads");
        assert_eq!(back, o);
    }
    // A plan file written before the field existed loads with no profile.
    let g: Graph = format::load(zoo("tiny_mlp")).expect("zoo graph");
    let plan = sgc::plan::plan(&g, &options(None), &Default::default()).expect("plans");
    let mut value: Value = serde_json::from_str(&plan.to_json()).expect("JSON");
    assert!(value["options"].get("device_profile").is_none());
    value["options"]
        .as_object_mut()
        .expect("object")
        .remove("device_profile");
    let old = Plan::from_json(&value.to_string()).expect("an old plan loads");
    assert_eq!(old.options.device_profile, None);
    // A stored profile with a zero rate is refused, not divided by.
    value["options"]["device_profile"] = serde_json::json!(
        {"name": "x", "f32_tflops": 1.0, "half_tflops": 1.0, "bandwidth_gbps": 0.0});
    let err = Plan::from_json(&value.to_string()).expect_err("zero bandwidth");
    assert!(err.to_string().contains("bandwidth"), "{err}");
}

#[test]
fn sgc_plan_reports_the_roofline_source_and_its_plan_passes_check() {
    let file = zoo("tiny_cnn");
    let out = scratch("tiny_cnn.a100.plan.json");
    let out_path = out.display().to_string();
    let r = ok_json(&sgc(&[
        "plan",
        &file,
        "--device-profile",
        "a100",
        "--quiet",
        "--json",
        "-o",
        &out_path,
    ]));
    assert_eq!(r["cost_source"], "roofline estimate (a100)", "{r}");
    assert_eq!(r["options"]["device_profile"]["name"], "a100");
    assert_eq!(r["options"]["device_profile"]["half_tflops"], 312.0);
    assert!(r["step_cost"].as_f64().expect("number") > 0.0);
    let check = sgc(&["plan", &file, "--check", &out_path]);
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(text.contains("summary reproduced"), "{text}");
    assert!(text.contains("roofline estimate (a100)"), "{text}");

    // The same plan under another profile's name no longer reproduces its summary.
    let mut plan: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("plan file")).expect("JSON");
    plan["options"]["device_profile"]["bandwidth_gbps"] = serde_json::json!(300.0);
    let edited = scratch("tiny_cnn.edited.plan.json");
    std::fs::write(&edited, plan.to_string()).expect("writes");
    let bad = sgc(&["plan", &file, "--check", &edited.display().to_string()]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("step_cost") && err.contains("tiny_cnn.edited.plan.json"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn custom_rates_are_accepted_and_a_bad_profile_names_the_valid_ones() {
    let file = zoo("tiny_mlp");
    let r = ok_json(&sgc(&[
        "plan",
        &file,
        "--device-profile",
        "19.5/312/2039",
        "--quiet",
        "--json",
    ]));
    assert_eq!(r["cost_source"], "roofline estimate (19.5/312/2039)");
    for bad in ["a200", "19.5/312", "19.5/0/2039"] {
        let out = sgc(&["plan", &file, "--device-profile", bad, "--quiet"]);
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("v100, t4, a100, l4, h100, rtx4090"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn sgc_cost_writes_a_graph_whose_ops_all_have_time_us() {
    let file = zoo("tiny_transformer");
    let out = scratch("tiny_transformer.a100.json.gz");
    let run = sgc(&[
        "cost",
        &file,
        "--device-profile",
        "a100",
        "-o",
        &out.display().to_string(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let raw = std::fs::read(&out).expect("written");
    assert_eq!(&raw[..2], &[0x1f, 0x8b], "a .gz output is gzip");
    let original = format::load(&file).expect("zoo graph");
    let costed = sgc::ir::load_any(&out).expect("the costed graph loads");
    let d = a100();
    assert_eq!(costed.num_ops(), original.num_ops());
    for o in costed.op_ids() {
        let t = costed.op(o).time_us.expect("every op has time_us");
        assert_eq!(t, original.op_cost_with(o, Some(&d)).0);
    }
    let source = &costed.meta().expect("meta")["time_us_source"];
    assert_eq!(source["method"], "roofline");
    assert_eq!(source["device_profile"], "a100");
    assert_eq!(source["bandwidth_gbps"], 2039.0);
    // The rest of the graph is unchanged.
    let mut def = costed.to_def();
    for op in &mut def.ops {
        op.time_us = None;
    }
    def.meta.as_mut().expect("meta").remove("time_us_source");
    assert_eq!(def, original.to_def());
    // No temporary file is left beside the output.
    let dir = out.parent().expect("dir");
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn sgc_cost_refuses_its_input_as_output_and_needs_a_profile() {
    let input = scratch("self.json");
    std::fs::copy(zoo("tiny_mlp"), &input).expect("copies");
    let before = std::fs::read(&input).expect("reads");
    let path = input.display().to_string();
    let same = sgc(&["cost", &path, "--device-profile", "a100", "-o", &path]);
    assert!(!same.status.success());
    let err = String::from_utf8_lossy(&same.stderr);
    assert!(
        err.contains("input file") && err.contains("self.json"),
        "{err}"
    );
    assert_eq!(std::fs::read(&input).expect("reads"), before, "untouched");
    let other = scratch("never_written.json");
    let none = sgc(&["cost", &path, "-o", &other.display().to_string()]);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("--device-profile"));
    assert!(!other.exists());
}

#[test]
fn sgc_inspect_names_the_source_and_the_memory_bound_share() {
    let file = zoo("gpt2");
    let r = ok_json(&sgc(&[
        "inspect",
        &file,
        "--json",
        "--device-profile",
        "a100",
    ]));
    assert_eq!(r["cost_source"], "roofline estimate (a100)");
    assert_eq!(r["cost_sources"]["roofline"], r["ops"]);
    let e = &r["estimates"];
    let share = e["memory_bound_share"].as_f64().expect("share");
    assert!(share > 0.0 && share < 1.0, "{e}");
    let total = r["total_cost"].as_f64().expect("total");
    assert_eq!(e["estimated_time_us"].as_f64(), Some(total));
    let plain = ok_json(&sgc(&["inspect", &file, "--json"]));
    assert_eq!(plain["cost_source"], "flops");
    assert!(plain["estimates"].is_null());
    let text = sgc(&["inspect", &file, "--device-profile", "a100"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("from roofline estimate (a100)"), "{text}");
    assert!(text.contains("memory-bound ops"), "{text}");
}

#[test]
fn compare_and_fit_take_the_profile() {
    let file = zoo("tiny_cnn");
    let rows = ok_json(&sgc(&[
        "compare",
        &file,
        "--no-exec",
        "--genetic-iters",
        "1",
        "--json",
        "--device-profile",
        "t4",
    ]));
    assert_eq!(rows[0]["cost_source"], "roofline estimate (t4)");
    let fit = ok_json(&sgc(&[
        "fit",
        &file,
        "--memory",
        "64KiB",
        "--strategy",
        "sublinear",
        "--json",
        "--device-profile",
        "l4",
    ]));
    let s = &fit["strategies"][0];
    assert_eq!(s["options"]["device_profile"]["name"], "l4");
    assert_eq!(s["fitting"]["cost_source"], "roofline estimate (l4)");
}

#[test]
fn rescale_writes_gzip_for_a_gz_path_and_inspect_reads_it() {
    let out = scratch("tiny_cnn_b4.json.gz");
    let path = out.display().to_string();
    let run = sgc(&["rescale", &zoo("tiny_cnn"), "--batch", "4", "-o", &path]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(&std::fs::read(&out).expect("written")[..2], &[0x1f, 0x8b]);
    let r = ok_json(&sgc(&["inspect", &path, "--json"]));
    assert_eq!(r["file"], path.as_str());
    let truncated = scratch("tiny_cnn_cut.json.gz");
    let raw = std::fs::read(&out).expect("written");
    std::fs::write(&truncated, &raw[..raw.len() / 2]).expect("writes");
    let bad = sgc(&["plan", &truncated.display().to_string(), "--quiet"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("tiny_cnn_cut.json.gz") && err.contains("truncated"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
