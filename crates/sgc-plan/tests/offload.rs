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
