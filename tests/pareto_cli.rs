//! `sgc pareto`: every strategy's plans across budgets, each with its bound.
//! - every point fits its budget, and its bound is at most its recompute;
//! - `sublinear`'s recompute never rises as its budget grows (one search, many budgets);
//! - the SVG is one self-contained image, and the table names every strategy;
//! - a strategy that cannot plan at some budget is reported, not an error;
//! - the sweep starts at the least device bytes any budget is met with, below the
//!   unbudgeted plan's where eviction plans reach lower.

use std::process::Command;

fn sgc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sgc"))
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = sgc().args(args).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_point_fits_its_budget_and_lies_above_its_bound() {
    for file in ["graphs/tiny_cnn.json", "graphs/tiny_transformer.json"] {
        let f = json(&["pareto", file, "--budgets", "5", "--genetic-iters", "2"]);
        let points = f["points"].as_array().unwrap();
        let strategies: Vec<&str> = points
            .iter()
            .map(|p| p["strategy"].as_str().unwrap())
            .collect();
        for s in ["none", "chen-sqrt", "sublinear", "partition"] {
            assert!(strategies.contains(&s), "{file}: no {s} point");
        }
        let unplanned = f["unplanned_device"].as_u64().unwrap();
        let least = f["least_device"].as_u64().unwrap();
        for p in points {
            let device = p["device_bytes"].as_u64().unwrap();
            assert!(
                least <= device,
                "{file}: below the least-peak bound {least}: {p}"
            );
            let recompute = p["recompute_share"].as_f64().unwrap();
            if let Some(b) = p["budget"].as_u64() {
                assert!(device <= b, "{file}: {p}");
            }
            assert!(
                device <= unplanned || p["strategy"] == "chen-sqrt",
                "{file}: {p}"
            );
            let bound = p["bound"].as_f64().expect("a bound beside every plan");
            assert!(bound <= recompute + 1e-12, "{file}: {p}");
        }
        let sub: Vec<(u64, f64)> = points
            .iter()
            .filter(|p| p["strategy"] == "sublinear")
            .map(|p| {
                (
                    p["budget"].as_u64().unwrap(),
                    p["recompute_share"].as_f64().unwrap(),
                )
            })
            .collect();
        assert!(
            sub.windows(2).all(|w| w[0].0 < w[1].0 && w[1].1 <= w[0].1),
            "{file}: {sub:?}"
        );
    }
}

/// The zoo's U-Net: static DTR's eviction plans reach below the unbudgeted sublinear
/// plan's device bytes. The front starts at the least device bytes of any plan a budget can
/// select: that budget is met, one byte less is refused, and the unbudgeted plan needs more.
#[test]
fn the_front_starts_at_the_lowest_plan_a_budget_can_get() {
    let file = "graphs/unet.json";
    let f = json(&[
        "pareto",
        file,
        "--strategy",
        "sublinear",
        "--budgets",
        "2",
        "--genetic-iters",
        "2",
        "--no-bound",
    ]);
    let low = f["budgets"][0].as_u64().unwrap();
    let first = &f["points"][0];
    assert_eq!(first["budget"].as_u64(), Some(low), "{f}");
    assert!(first["device_bytes"].as_u64().unwrap() <= low, "{f}");
    let dir = std::env::temp_dir().join(format!("sgc-pareto-low-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("plan.json");
    let plan = |budget: Option<u64>| {
        let mut c = sgc();
        c.args(["plan", file, "--genetic-iters", "2", "-o"])
            .arg(&out);
        if let Some(b) = budget {
            c.args(["--budget", &b.to_string()]);
        }
        c.output().unwrap()
    };
    let below = plan(Some(low - 1));
    assert!(
        !below.status.success(),
        "a budget of {} B is met below the front's start",
        low - 1
    );
    let unbudgeted = plan(None);
    assert!(unbudgeted.status.success());
    let p: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let device = p["arena"]["size"].as_u64().unwrap() + f["persistent_bytes"].as_u64().unwrap();
    assert!(
        low < device,
        "the front starts at {low} B, the unbudgeted plan needs {device} B"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_table_and_the_plot_name_every_strategy() {
    let dir = std::env::temp_dir().join(format!("sgc-pareto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("front.svg");
    let out = sgc()
        .args([
            "pareto",
            "graphs/tiny_cnn.json",
            "--budgets",
            "4",
            "--genetic-iters",
            "2",
            "--plot",
        ])
        .arg(&svg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("| strategy | budget | device bytes |"),
        "{text}"
    );
    // dtr cannot go below the unplanned device bytes on tiny_cnn: said, not an error.
    assert!(text.contains("dtr refused at"), "{text}");
    let image = std::fs::read_to_string(&svg).unwrap();
    assert!(image.starts_with("<svg") && image.trim_end().ends_with("</svg>"));
    for s in [
        "none",
        "chen-sqrt",
        "sublinear",
        "partition",
        "bound at each plan",
    ] {
        assert!(image.contains(s), "the plot's legend has no {s}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn optimal_without_its_solver_is_one_refusal() {
    if cfg!(feature = "optimal") {
        return;
    }
    let f = json(&[
        "pareto",
        "graphs/tiny_mlp.json",
        "--budgets",
        "3",
        "--strategy",
        "sublinear,optimal",
    ]);
    let refused = f["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["strategy"], "optimal");
}
