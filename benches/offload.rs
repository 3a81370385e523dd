//! Offload against recompute alone, predicted, on the real corpus's ResNet-50, GPT-2 and
//! ViT-B/16 with the h100 profile and its host link (`sgc_plan::streams::HostLink::named`).
//!
//! Two clocks per graph: the ops' `time_us` as traced (roofline estimates on an A100, which
//! the graphs carry and `--device-profile` keeps) and the h100 roofline (those times removed
//! and estimated again on the h100): copies hide under slower compute more easily, so the
//! second is the harder test. At each of two budgets in device bytes (arena plus persistent):
//! - the lowest-peak recompute plan's own device bytes: the offload plan's predicted step
//!   must be faster than that recompute plan's;
//! - the persistent bytes plus 1/6 of the unplanned activation bytes (peak less persistent):
//!   the target is a plan there at most 10% slower than the unplanned step, where
//!   the link allows it; the table says how far each plan got.
//!
//! Every figure is the plan's own prediction (the three-stream replay of
//! `sgc_plan::offload`), as a ratio to the unplanned step's compute on the same clock.
//! Where a row misses, the last column says whether the link is what stops it: the least
//! of [`FASTER`] times the h100 link's bandwidths (same latency) at which the same search
//! meets the row's target, or that none does (then the search, not the link, is short).
//! `OFFLOAD_MARKDOWN=FILE` also writes the table as markdown (`just offload` puts it in
//! docs/benchmarks.md).

mod common;

use sgc_ir::{DeviceProfile, Graph};
use sgc_plan::streams::HostLink;
use sgc_plan::{plan, Plan, PlanError, PlanOptions, RunConfig, Strategy};
use std::fmt::Write;

const GRAPHS: [&str; 3] = ["resnet50", "gpt2", "vit_b_16"];
/// Multiples of the h100 link's bandwidths tried where a row misses.
const FASTER: [f64; 7] = [1.25, 1.5, 2.0, 3.0, 4.0, 8.0, 64.0];

fn main() {
    let device = DeviceProfile::by_name("h100").expect("h100");
    let link = HostLink::named("h100").expect("h100 link");
    let mut md = String::new();
    let _ = writeln!(
        md,
        "h100 host link: {} GB/s to host, {} GB/s to device, {} µs per copy.\n",
        link.to_host_gbps, link.to_device_gbps, link.latency_us
    );
    let _ = writeln!(md, "| graph | clock | budget | device bytes | recompute alone: step | offload: step | of it exposed copies | offloaded | host peak | verdict | a faster link |");
    let _ = writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|");
    for name in GRAPHS {
        let path = common::real_graph_files()
            .into_iter()
            .find(|p| common::real_name(p) == name)
            .unwrap_or_else(|| panic!("graphs/real/{name}.json.gz"));
        let traced = sgc_ir::load_any(&path).expect("graph");
        let h100 = reestimated(&traced, &device);
        for (clock, g) in [
            ("traced (a100 roofline)", &traced),
            ("h100 roofline", &h100),
        ] {
            for row in rows(name, clock, g, &device, &link) {
                println!("{row}");
                let _ = writeln!(md, "{row}");
            }
        }
    }
    if let Ok(out) = std::env::var("OFFLOAD_MARKDOWN") {
        std::fs::write(&out, md).expect("write the markdown");
    }
}

/// The graph with every op's time estimated again on `device`.
fn reestimated(g: &Graph, device: &DeviceProfile) -> Graph {
    let mut def = g.to_def();
    for o in &mut def.ops {
        o.time_us = None;
    }
    if let Some(meta) = def.meta.as_mut() {
        meta.remove("time_us_source");
    }
    let bare = Graph::from_def(def).expect("graph");
    sgc_ir::cost::with_estimated_times(&bare, device)
        .expect("estimates")
        .0
}

fn options(device: &DeviceProfile, budget: Option<u64>, link: Option<HostLink>) -> PlanOptions {
    PlanOptions {
        strategy: Strategy::Sublinear,
        budget,
        genetic_iters: 20,
        device_profile: Some(device.clone()),
        host_link: link,
        ..Default::default()
    }
}

fn run() -> RunConfig<'static> {
    RunConfig {
        workers: None,
        progress: None,
    }
}

fn device_bytes(g: &Graph, p: &Plan) -> u64 {
    p.arena
        .as_ref()
        .map_or(p.summary.planned_peak, |a| a.size + g.persistent_bytes())
}

/// Predicted step time of a plan, µs: the replay with copies, or its compute alone.
fn step_us(p: &Plan) -> f64 {
    p.summary
        .offload
        .as_ref()
        .map_or(p.summary.step_cost + p.summary.recompute_cost, |o| {
            o.step_us
        })
}

fn rows(
    name: &str,
    clock: &str,
    g: &Graph,
    device: &DeviceProfile,
    link: &HostLink,
) -> Vec<String> {
    let lowest = plan(g, &options(device, None, None), &run()).expect("lowest-peak plan");
    let unplanned = lowest.summary.unplanned_peak;
    let persistent = lowest.summary.persistent_bytes;
    let step = lowest.summary.step_cost;
    let budgets = [
        ("lowest recompute plan's", device_bytes(g, &lowest)),
        (
            "1/6 of activations",
            persistent + (unplanned - persistent) / 6,
        ),
    ];
    let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    let x = |us: f64| format!("{:.0} µs ({:.3}x)", us, us / step);
    budgets
        .iter()
        .map(|&(what, budget)| {
            let plain = plan(g, &options(device, Some(budget), None), &run()).ok();
            let plain_us = plain.as_ref().map(step_us);
            // The row's target: within 10% at 1/6, else faster than recompute alone.
            let sixth = what.starts_with("1/6");
            let target = |p: &Plan| {
                let us = step_us(p);
                if sixth {
                    us <= 1.10 * step
                } else {
                    plain_us.is_some_and(|b| us < b)
                }
            };
            let off = plan(g, &options(device, Some(budget), Some(*link)), &run());
            let faster = match &off {
                Ok(p) if target(p) => "-".to_string(),
                Err(PlanError::BudgetBelowLowerBound { .. }) => "no link: no schedule fits".to_string(),
                _ => faster_link(g, device, link, budget, &target),
            };
            let cell = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            match off {
                Ok(p) => {
                    let o = p.summary.offload.as_ref();
                    let us = step_us(&p);
                    let verdict = match (sixth, plain_us) {
                        (true, _) if target(&p) => "within 10%: holds".to_string(),
                        (true, _) => format!("{:.1}% over: MISSED", 100.0 * (us / step - 1.0)),
                        (_, Some(b)) if us < b => format!("faster by {:.2}%: holds", 100.0 * (1.0 - us / b)),
                        (_, Some(_)) => "no faster: MISSED".to_string(),
                        _ => "-".to_string(),
                    };
                    format!(
                        "| {name} | {clock} | {what} {} | {} | {} | {} | {} | {} | {} | {verdict} | {faster} |",
                        gib(budget),
                        gib(device_bytes(g, &p)),
                        cell(plain_us.map(x)),
                        x(us),
                        cell(o.map(|o| format!("{:.0} µs", o.exposed_us))),
                        cell(o.map(|o| format!("{} ({})", gib(o.bytes), o.offloads))),
                        cell(o.map(|o| gib(o.host_peak))),
                    )
                }
                Err(e) => format!(
                    "| {name} | {clock} | {what} {} | - | {} | none fits | - | - | - | MISSED: {} | {faster} |",
                    gib(budget),
                    cell(plain_us.map(x)),
                    refusal(&e)
                ),
            }
        })
        .collect()
}

/// The least of [`FASTER`] times `link`'s bandwidths at which the plan at `budget` meets
/// `target`, as a cell.
fn faster_link(
    g: &Graph,
    device: &DeviceProfile,
    link: &HostLink,
    budget: u64,
    target: &dyn Fn(&Plan) -> bool,
) -> String {
    for m in FASTER {
        let faster = HostLink::new(
            link.to_host_gbps * m,
            link.to_device_gbps * m,
            link.latency_us,
        )
        .expect("link");
        let p = plan(g, &options(device, Some(budget), Some(faster)), &run());
        if let Some(p) = p.ok().filter(|p| target(p)) {
            return format!(
                "met at {m}x ({:.0} GB/s): {:.3}x",
                faster.to_host_gbps,
                step_us(&p) / p.summary.step_cost
            );
        }
    }
    format!(
        "not met at {}x: the search or the budget, not the link",
        FASTER[FASTER.len() - 1]
    )
}

/// A refusal in a table cell: how low recompute alone and offloads got, or the error.
fn refusal(e: &PlanError) -> String {
    let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    match e {
        PlanError::BudgetNotMet {
            best_peak,
            best_device,
            offload,
            lower_bound,
            ..
        } => {
            let mut cell = format!(
                "recompute alone reaches {}",
                gib(best_device.unwrap_or(*best_peak))
            );
            if let Some(r) = offload {
                let _ = write!(cell, ", with offloads {}", gib(r.device.unwrap_or(r.peak)));
                if r.device.is_some() {
                    let _ = write!(cell, " placed (memory model {})", gib(r.peak));
                }
            }
            let _ = write!(cell, "; per-op lower bound {}", gib(*lower_bound));
            cell
        }
        e => first_line(&e.to_string()),
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").replace('|', "/")
}
