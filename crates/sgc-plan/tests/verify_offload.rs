//! The verifier on plans with offloads: plans made from zoo schedules with offloads (the
//! traced order, and a sublinear plan's schedule with recomputations) verify, and one
//! mutation per offload rule is refused with that rule's violation.

use sgc_ir::testgen::spaced_offloads;
use sgc_ir::{DeviceProfile, Graph, Offload, OpId};
use sgc_plan::streams::HostLink;
use sgc_plan::{check, plan_schedule_offloaded, verify, Plan, PlanOptions, Strategy};
use sgc_plan::{Violation, ViolationKind as K};

fn load(name: &str) -> Graph {
    let path = format!("{}/../../graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
    sgc_ir::load_any(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn options(strategy: Strategy) -> PlanOptions {
    PlanOptions {
        strategy,
        device_profile: DeviceProfile::by_name("h100"),
        host_link: HostLink::named("h100"),
        ..Default::default()
    }
}

/// The plan of schedule `ops` with up to 8 spaced offloads.
fn offloaded(g: &Graph, strategy: Strategy, ops: &[OpId]) -> Plan {
    let offloads = spaced_offloads(g, ops, 8);
    assert!(offloads.len() >= 2, "{:?}: offloads {offloads:?}", g.name());
    plan_schedule_offloaded(g, &options(strategy), ops, &offloads).unwrap_or_else(|e| panic!("{e}"))
}

fn traced(name: &str) -> (Graph, Plan) {
    let g = load(name);
    let ops: Vec<OpId> = g.op_ids().collect();
    let p = offloaded(&g, Strategy::None, &ops);
    (g, p)
}

fn refused(g: &Graph, p: &Plan, what: &str, is: impl Fn(&K) -> bool) -> Violation {
    let found = verify(g, p).expect_err(what);
    found
        .iter()
        .find(|v| is(&v.kind))
        .cloned()
        .unwrap_or_else(|| panic!("{what}: not among {found:#?}"))
}

fn producer_step(g: &Graph, p: &Plan, o: &Offload) -> usize {
    p.steps
        .iter()
        .position(|s| g.op(s.op).outputs.contains(&o.root))
        .unwrap()
}

/// The steps of `p` reading `o.root`'s storage.
fn readers(g: &Graph, p: &Plan, o: &Offload) -> Vec<usize> {
    (0..p.steps.len())
        .filter(|&s| {
            let op = g.op(p.steps[s].op);
            op.inputs.iter().any(|&t| g.storage_root(t) == o.root)
        })
        .collect()
}

#[test]
fn plans_with_offloads_verify_and_save_device_bytes() {
    for name in ["tiny_mlp", "tiny_cnn", "tiny_transformer", "mlp"] {
        let (g, p) = traced(name);
        check(&g, &p).unwrap_or_else(|e| panic!("{name}: {e}"));
        let plain = sgc_plan::plan_schedule(
            &g,
            &options(Strategy::None),
            &g.op_ids().collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(
            p.lifetimes.len(),
            plain.lifetimes.len() + p.offloads.len(),
            "{name}"
        );
        assert!(
            p.summary.planned_peak <= plain.summary.planned_peak,
            "{name}"
        );
        let summary = p.summary.offload.as_ref().unwrap();
        assert_eq!(summary.offloads, p.offloads.len(), "{name}");
        assert!(p.host.as_ref().unwrap().peak > 0, "{name}");
    }
}

#[test]
fn offloads_on_a_recomputing_schedule_verify() {
    let g = load("tiny_transformer");
    let sub = sgc_plan::plan(&g, &options(Strategy::Sublinear), &Default::default()).unwrap();
    assert!(sub.summary.recompute_steps > 0);
    let ops: Vec<OpId> = sub.steps.iter().map(|s| s.op).collect();
    let p = offloaded(&g, Strategy::Sublinear, &ops);
    check(&g, &p).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn offloads_of_other_than_a_storage_root_are_refused() {
    let (g, p) = traced("tiny_transformer");
    let param = g.tensor_ids().find(|&t| g.is_persistent(t)).unwrap();
    let view = g
        .tensor_ids()
        .find(|&t| g.tensor(t).alias_of.is_some())
        .unwrap();
    for t in [param, view] {
        let mut bad = p.clone();
        bad.offloads[0].root = t;
        refused(&g, &bad, "offload of a param or view", |k| {
            *k == K::OffloadNotRoot
        });
    }
}

#[test]
fn offload_steps_out_of_order_or_overlapping_are_refused() {
    let (g, p) = traced("tiny_cnn");
    let mut bad = p.clone();
    bad.offloads[0].fetch_after = bad.offloads[0].free_after;
    let v = refused(&g, &bad, "fetch at the free", |k| {
        matches!(k, K::OffloadOrder { .. })
    });
    assert!(v.to_string().contains("does not hold"), "{v}");
    let mut bad = p.clone();
    bad.offloads[0].needed_at = bad.steps.len();
    refused(&g, &bad, "reader past the end", |k| {
        matches!(k, K::OffloadOrder { .. })
    });
    let mut bad = p.clone();
    bad.offloads.push(bad.offloads[0]);
    bad.host.as_mut().unwrap().offsets.push(0);
    refused(&g, &bad, "one storage offloaded twice at once", |k| {
        matches!(k, K::OffloadsOverlap { .. })
    });
}

#[test]
fn a_copy_of_storage_not_resident_or_written_is_refused() {
    let (g, p) = traced("tiny_cnn");
    let k = (0..p.offloads.len())
        .find(|&k| producer_step(&g, &p, &p.offloads[k]) > 0)
        .unwrap();
    let mut bad = p.clone();
    let o = &mut bad.offloads[k];
    o.copy_after = producer_step(&g, &p, &p.offloads[k]) - 1;
    let v = refused(&g, &bad, "copy before the producer", |k| {
        *k == K::CopySourceNotResident
    });
    let name = &g.tensor(p.offloads[k].root).name;
    assert!(v.to_string().contains(name.as_str()), "{v}");
    refused(&g, &bad, "producer writes while copied", |k| {
        matches!(k, K::WrittenWhileCopied { .. })
    });
}

#[test]
fn a_storage_freed_early_or_never_is_refused() {
    let (g, p) = traced("tiny_cnn");
    let o = p.offloads[0];
    let mut early = p.clone();
    early.steps[o.free_after].free.retain(|&t| t != o.root);
    early.steps[o.copy_after].free.push(o.root);
    refused(&g, &early, "freed before the copy ends", |k| {
        matches!(k, K::CopySourceFreedEarly { .. })
    });
    let mut never = p.clone();
    never.steps[o.free_after].free.retain(|&t| t != o.root);
    refused(&g, &never, "never freed", |k| *k == K::OffloadNotFreed);
}

#[test]
fn a_touch_while_away_or_before_the_fetch_is_refused() {
    let (g, p) = traced("tiny_transformer");
    // Away: waited for at a later reader, so the real reader comes while it is away.
    let (k, later) = (0..p.offloads.len())
        .find_map(|k| {
            let o = &p.offloads[k];
            let r = readers(&g, &p, o)
                .into_iter()
                .find(|&r| r > o.needed_at + 1)?;
            Some((k, r))
        })
        .expect("an offloaded storage read again after its reader");
    let mut away = p.clone();
    away.offloads[k].fetch_after = later - 1;
    away.offloads[k].needed_at = later;
    refused(&g, &away, "read while away", |k| {
        matches!(k, K::TouchedWhileAway { write: false, .. })
    });
    // Before the fetch: fetched early, waited for one step after the real reader.
    let o = p.offloads[0];
    let mut early = p.clone();
    early.offloads[0] = Offload {
        fetch_after: o.free_after + 1,
        needed_at: o.needed_at + 1,
        ..o
    };
    refused(&g, &early, "read before the fetch is waited for", |k| {
        matches!(k, K::TouchedBeforeFetch { write: false, .. })
    });
    // A reader that does not read: waited for one step before the real reader.
    let mut not_read = p.clone();
    not_read.offloads[0].needed_at = o.needed_at - 1;
    assert!(!readers(&g, &p, &o).contains(&(o.needed_at - 1)));
    refused(&g, &not_read, "waited for by a step not reading it", |k| {
        *k == K::FetchNotRead
    });
}

#[test]
fn a_bad_host_layout_is_refused() {
    let (g, p) = traced("tiny_transformer");
    let mut bad = p.clone();
    bad.host = None;
    refused(&g, &bad, "no host layout", |k| *k == K::HostMissing);
    let mut bad = p.clone();
    bad.host.as_mut().unwrap().offsets.pop();
    refused(&g, &bad, "an offset missing", |k| {
        matches!(k, K::HostCount { .. })
    });
    let mut bad = p.clone();
    let host = bad.host.as_mut().unwrap();
    host.offsets[0] = host.size;
    refused(&g, &bad, "outside the pool", |k| {
        matches!(k, K::HostOutside { .. })
    });
    let mut bad = p.clone();
    bad.host.as_mut().unwrap().peak += 1;
    refused(&g, &bad, "peak", |k| {
        matches!(k, K::HostPeakMismatch { .. })
    });
    let mut bad = p.clone();
    bad.options.host_memory = Some(p.host.as_ref().unwrap().peak - 1);
    refused(&g, &bad, "over the host memory", |k| {
        matches!(k, K::HostOverLimit { .. })
    });
    let mut fits = p.clone();
    fits.options.host_memory = Some(p.host.as_ref().unwrap().peak);
    verify(&g, &fits).unwrap();
    // Two offloads on the host at once, moved to the same bytes.
    let on_host = |o: &Offload| (o.copy_after + 1, o.needed_at);
    let pair = (0..p.offloads.len())
        .flat_map(|a| (a + 1..p.offloads.len()).map(move |b| (a, b)))
        .find(|&(a, b)| {
            let (x, y) = (on_host(&p.offloads[a]), on_host(&p.offloads[b]));
            x.0 <= y.1 && y.0 <= x.1
        })
        .expect("two offloads on the host at once");
    let mut bad = p.clone();
    let host = bad.host.as_mut().unwrap();
    host.offsets[pair.1] = host.offsets[pair.0];
    refused(&g, &bad, "sharing host bytes", |k| {
        matches!(k, K::HostOverlap { .. })
    });
}
