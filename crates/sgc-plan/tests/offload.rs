//! Offload chosen by the planner: plans that fit their budget with copies to host memory,
//! verified, predicted no slower than recomputing alone at the same device bytes, within a
//! host-memory limit, the same on any thread count, and unchanged without a host link.

use sgc_ir::{zoo, DeviceProfile, Graph};
use sgc_plan::streams::HostLink;
use sgc_plan::{plan, Plan, PlanOptions, RunConfig, Strategy};

fn h100() -> (DeviceProfile, HostLink) {
    (
        DeviceProfile::by_name("h100").expect("h100 profile"),
        HostLink::named("h100").expect("h100 link"),
    )
}

fn options(strategy: Strategy, budget: Option<u64>, link: Option<HostLink>) -> PlanOptions {
    PlanOptions {
        strategy,
        budget,
        genetic_iters: 2,
        device_profile: Some(h100().0),
        host_link: link,
        ..Default::default()
    }
}

fn workers(n: usize) -> RunConfig<'static> {
    RunConfig {
        workers: Some(n),
        progress: None,
    }
}

/// Arena plus persistent bytes: what the device needs.
fn device(graph: &Graph, p: &Plan) -> u64 {
    p.arena.as_ref().expect("arena").size + graph.persistent_bytes()
}

/// The step time a plan without copies predicts: its steps' compute.
fn plain_step_us(graph: &Graph, p: &Plan) -> f64 {
    let ops: Vec<_> = p.steps.iter().map(|s| s.op).collect();
    sgc_plan::offload::step_times(graph, &ops, p.options.device_profile.as_ref())
        .expect("times")
        .iter()
        .sum()
}

/// The least device bytes any budget is met with by recompute alone (the budgeted
/// candidates' least, below the unbudgeted plan's).
fn least_recompute_budget(graph: &Graph) -> u64 {
    sgc_plan::BudgetSweep::new(
        graph,
        &options(Strategy::Sublinear, None, None),
        &workers(2),
    )
    .expect("candidates")
    .lowest_device_bytes()
    .expect("a placed plan")
}

/// The budget of the lowest-peak recompute plan: its device bytes.
fn lowest_recompute_budget(graph: &Graph, strategy: Strategy) -> u64 {
    let p = plan(graph, &options(strategy, None, None), &workers(2)).expect("plan");
    device(graph, &p)
}

fn graphs() -> Vec<(&'static str, Graph)> {
    vec![
        ("gpt2 (zoo, 2 layers)", zoo::gpt2_deep(2, 4)),
        ("resnet50 (zoo)", (zoo::models()[6].build)()),
        ("vgg16 (zoo)", (zoo::models()[5].build)()),
    ]
}

#[test]
fn offload_plans_fit_their_budget_and_are_no_slower_than_recompute() {
    let link = h100().1;
    let mut faster = Vec::new();
    for (name, g) in graphs() {
        for strategy in [Strategy::Sublinear, Strategy::Partition] {
            let budget = lowest_recompute_budget(&g, strategy);
            let plain = plan(&g, &options(strategy, Some(budget), None), &workers(2))
                .unwrap_or_else(|e| panic!("{name} {strategy}: {e}"));
            let off = plan(
                &g,
                &options(strategy, Some(budget), Some(link)),
                &workers(2),
            )
            .unwrap_or_else(|e| panic!("{name} {strategy} with offload: {e}"));
            assert!(device(&g, &off) <= budget, "{name} {strategy}: over budget");
            sgc_plan::check(&g, &off).unwrap_or_else(|e| panic!("{name} {strategy}: {e}"));
            let base = plain_step_us(&g, &plain);
            let step = off
                .summary
                .offload
                .as_ref()
                .map_or_else(|| plain_step_us(&g, &off), |o| o.step_us);
            assert!(
                step <= base * (1.0 + 1e-12),
                "{name} {strategy}: offload plan predicts {step} us, recompute alone {base} us"
            );
            if !off.offloads.is_empty() && step < base {
                faster.push(format!("{name} {strategy}: {step:.0} < {base:.0} us"));
            }
        }
    }
    assert!(
        !faster.is_empty(),
        "no graph got a faster plan by offloading at the lowest recompute plan's bytes"
    );
}

#[test]
fn the_host_memory_limit_holds() {
    let (_, link) = h100();
    let g = zoo::gpt2_deep(2, 4);
    let budget = lowest_recompute_budget(&g, Strategy::Sublinear);
    let free = plan(
        &g,
        &options(Strategy::Sublinear, Some(budget), Some(link)),
        &workers(2),
    )
    .expect("plan");
    let peak = free.summary.offload.as_ref().expect("offloads").host_peak;
    assert!(peak > 0);
    let limit = peak / 2;
    let limited = plan(
        &g,
        &PlanOptions {
            host_memory: Some(limit),
            ..options(Strategy::Sublinear, Some(budget), Some(link))
        },
        &workers(2),
    )
    .expect("plan under a host limit");
    let host = limited.summary.offload.as_ref().map_or(0, |o| o.host_peak);
    assert!(host <= limit, "host peak {host} above the limit {limit}");
    assert!(device(&g, &limited) <= budget);
}

#[test]
fn offload_plans_are_the_same_on_one_and_two_workers() {
    let (_, link) = h100();
    let g = zoo::gpt2_deep(2, 4);
    let budget = lowest_recompute_budget(&g, Strategy::Sublinear);
    let o = options(Strategy::Sublinear, Some(budget), Some(link));
    let one = plan(&g, &o, &workers(1)).expect("plan").to_json();
    let two = plan(&g, &o, &workers(2)).expect("plan").to_json();
    assert!(one.contains("\"offloads\""), "the plan offloads nothing");
    assert_eq!(one, two);
}

#[test]
fn without_a_host_link_plans_have_no_offload_fields() {
    let g = zoo::gpt2_deep(2, 4);
    let budget = lowest_recompute_budget(&g, Strategy::Sublinear);
    let json = plan(
        &g,
        &options(Strategy::Sublinear, Some(budget), None),
        &workers(2),
    )
    .expect("plan")
    .to_json();
    for key in [
        "offloads",
        "host_link",
        "host_memory",
        "\"host\"",
        "\"offload\"",
    ] {
        assert!(!json.contains(key), "`{key}` in a plan without offload");
    }
}

/// A link far faster than compute hides every copy: offload then replaces all recompute,
/// and the predicted step is the unplanned step's compute exactly: on two zoo graphs at
/// their lowest recompute plan's bytes and 0.8 of them, and on the traced ViT-B/16 (h100
/// times) at 1/6 of its activation bytes (recompute alone: 1.289x there in the offload bench).
#[test]
fn a_fast_link_replaces_all_recompute() {
    let fast = HostLink::new(1e6, 1e6, 0.0).expect("link");
    // Its ops' times dropped: the h100 roofline estimates them, as `--device-profile h100`
    // does for a graph without `time_us`.
    let mut vit = sgc_ir::load_any(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../graphs/real/vit_b_16.json.gz"),
    )
    .expect("graphs/real/vit_b_16")
    .to_def();
    vit.ops.iter_mut().for_each(|o| o.time_us = None);
    let vit = Graph::from_def(vit).expect("graph");
    let sixth = |g: &Graph| {
        let p = plan(g, &options(Strategy::Sublinear, None, None), &workers(2)).expect("plan");
        let persistent = p.summary.persistent_bytes;
        vec![persistent + (p.summary.unplanned_peak - persistent) / 6]
    };
    let zoo_budgets = |g: &Graph| {
        let lowest = lowest_recompute_budget(g, Strategy::Sublinear);
        vec![lowest, lowest / 10 * 8]
    };
    for (name, g, budgets) in [
        (
            "resnet50 (zoo)",
            (zoo::models()[6].build)(),
            zoo_budgets as fn(&Graph) -> Vec<u64>,
        ),
        ("vgg16 (zoo)", (zoo::models()[5].build)(), zoo_budgets),
        ("vit_b_16 (traced, h100 times)", vit, sixth),
    ] {
        let unplanned = plan(&g, &options(Strategy::Sublinear, None, None), &workers(2))
            .expect("plan")
            .summary
            .step_cost;
        for budget in budgets(&g) {
            let p = plan(
                &g,
                &options(Strategy::Sublinear, Some(budget), Some(fast)),
                &workers(2),
            )
            .unwrap_or_else(|e| panic!("{name} at {budget} B: {e}"));
            assert!(device(&g, &p) <= budget, "{name}: over budget");
            sgc_plan::check(&g, &p).unwrap_or_else(|e| panic!("{name}: {e}"));
            let o = p.summary.offload.as_ref().expect("offloads");
            assert_eq!(o.exposed_us, 0.0, "{name} at {budget} B: exposed copies");
            assert!(
                (o.step_us - unplanned).abs() <= 1e-9 * unplanned,
                "{name} at {budget} B: {} us, unplanned {unplanned} us",
                o.step_us
            );
        }
    }
}

/// Where copies cannot hide (a slow link) and recompute alone cannot fit, offloads still
/// meet the budget, their stalls in the predicted step.
#[test]
fn copies_that_cannot_hide_still_meet_the_budget_and_report_their_stalls() {
    let slow = HostLink::new(1.0, 1.0, 10.0).expect("link");
    let g = (zoo::models()[5].build)();
    let budget = least_recompute_budget(&g) / 10 * 9;
    let plain = plan(
        &g,
        &options(Strategy::Sublinear, Some(budget), None),
        &workers(2),
    );
    assert!(
        plain.is_err(),
        "recompute alone fits {budget} B: pick a lower budget"
    );
    let p = plan(
        &g,
        &options(Strategy::Sublinear, Some(budget), Some(slow)),
        &workers(2),
    )
    .expect("a plan with exposed copies");
    assert!(device(&g, &p) <= budget);
    sgc_plan::check(&g, &p).expect("verified");
    let o = p.summary.offload.as_ref().expect("offloads");
    assert!(o.exposed_us > 0.0, "1 GB/s hid every copy");
    assert!((o.step_us - o.compute_us - o.exposed_us).abs() <= 1e-6 * o.step_us);
    assert_eq!(o.compute_us, plain_step_us(&g, &p));
}

/// A budget nothing meets: the refusal says how low offloads got beside recompute alone
/// (and nothing about offloads without a host link).
#[test]
fn a_refusal_says_how_low_offloads_got() {
    let g = (zoo::models()[6].build)();
    let budget = lowest_recompute_budget(&g, Strategy::Sublinear) / 2;
    for link in [Some(h100().1), None] {
        let e = plan(
            &g,
            &options(Strategy::Sublinear, Some(budget), link),
            &workers(2),
        )
        .expect_err("half the lowest recompute plan's bytes fits");
        let message = e.to_string();
        let sgc_plan::PlanError::BudgetNotMet { offload, .. } = e else {
            panic!("not a budget refusal: {message}");
        };
        assert_eq!(offload.is_some(), link.is_some(), "{message}");
        assert_eq!(
            message.contains("with offloads to host"),
            link.is_some(),
            "{message}"
        );
        if let Some(r) = offload {
            assert!(r.device.unwrap_or(r.peak) > budget, "{r:?} fits {budget}");
            assert!(r.peak >= g.persistent_bytes());
        }
    }
}
