//! Static DTR on real traced graphs (PyTorch exports in `graphs/real`): what a user asking
//! for an eviction threshold relies on. The bounds come from published figures, not from
//! what the planner happens to reach:
//!
//! 1. The DTR paper (Kirisame et al., "Dynamic Tensor Rematerialization", ICLR 2021):
//!    about 30% overhead at about a third of the memory on ResNet- and DenseNet-style
//!    networks. At a threshold of a third of the unplanned peak, the plan peaks at most
//!    [`TOLERANCE`] above the threshold and recomputes at most 30% of a step.
//! 2. The split planner's floor: below the lowest peak the sublinear planner reaches
//!    (`sgc plan FILE`, 20 generations), static DTR is what `--budget` falls back to. At
//!    85% of that peak, the plan peaks at most [`TOLERANCE`] above the threshold and
//!    recomputes at most the split planner's own share at its lowest peak plus the
//!    paper's 30%.
//! 3. At the split planner's lowest peak, DTR peaks no higher and recomputes no more than
//!    the split planner: on ResNet-50 and U-Net (17% and 15% of a step against 24%). On
//!    DenseNet-121 it holds by a hair (27.9% against 28.3%, not asserted); on ViT-B/16 it
//!    does not yet (23% against 21%). Both are checked against 1. and 2. only.
//!
//! Every plan is verified (an op may run any number of times under `dtr`).

use sgc_ir::Graph;
use sgc_plan::{plan, verify, Plan, PlanOptions, RunConfig, Strategy};
use std::path::PathBuf;

/// How far above its threshold a plan may peak (2%).
const TOLERANCE: f64 = 0.02;
/// The DTR paper's overhead at about a third of the memory.
const PAPER_OVERHEAD: f64 = 0.30;

fn graph(name: &str) -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../graphs/real")
        .join(format!("{name}.json.gz"));
    sgc_ir::load_any(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// The split planner's plan as `sgc plan FILE` makes it.
fn sublinear(g: &Graph) -> Plan {
    let o = PlanOptions {
        genetic_iters: 20,
        arena: false,
        ..PlanOptions::default()
    };
    plan(g, &o, &RunConfig::default()).expect("sublinear plans")
}

fn dtr(g: &Graph, threshold: u64) -> Plan {
    let o = PlanOptions {
        strategy: Strategy::Dtr,
        eviction_threshold: Some(threshold),
        arena: false,
        ..PlanOptions::default()
    };
    let (p, stats) = sgc_plan::plan_with_stats(g, &o, &RunConfig::default()).expect("dtr plans");
    assert_eq!(stats.fallback, None, "dtr fell back to the traced order");
    verify(g, &p).expect("the dtr plan verifies");
    p
}

fn gib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 30)
}

/// Checks 1. and 2. of the module doc, and 3. when `beats_split`.
fn check(name: &str, beats_split: bool) {
    let g = graph(name);
    let split = sublinear(&g);
    let s = &split.summary;
    let third = s.unplanned_peak / 3;
    let below = (s.planned_peak as f64 * 0.85) as u64;
    assert!(
        below > s.lower_bound,
        "{name}: 85% of the split peak is below the bound"
    );
    let mut cases = vec![
        ("a third of the unplanned peak", third, PAPER_OVERHEAD),
        (
            "85% of the split planner's lowest peak",
            below,
            s.recompute_share + PAPER_OVERHEAD,
        ),
    ];
    if beats_split {
        cases.push((
            "the split planner's lowest peak",
            s.planned_peak,
            s.recompute_share,
        ));
    }
    for (what, threshold, max_share) in cases {
        let p = dtr(&g, threshold);
        let d = &p.summary;
        println!(
            "{name}: threshold {:.3} GiB ({what}): peak {:.3} GiB, recompute {:.1}% (bound {:.1}%)",
            gib(threshold),
            gib(d.planned_peak),
            100.0 * d.recompute_share,
            100.0 * max_share
        );
        assert!(
            d.planned_peak as f64 <= threshold as f64 * (1.0 + TOLERANCE),
            "{name}: threshold {threshold} ({what}): peak {}",
            d.planned_peak
        );
        assert!(
            d.recompute_share <= max_share,
            "{name}: threshold {threshold} ({what}): recompute {} above {max_share}",
            d.recompute_share
        );
    }
}

#[test]
fn dtr_on_real_resnet50_meets_its_threshold() {
    check("resnet50", true);
}

#[test]
fn dtr_on_real_unet_meets_its_threshold() {
    check("unet", true);
}

#[test]
fn dtr_on_real_densenet121_meets_its_threshold() {
    check("densenet121", false);
}

#[test]
fn dtr_on_real_vit_b_16_meets_its_threshold() {
    check("vit_b_16", false);
}
