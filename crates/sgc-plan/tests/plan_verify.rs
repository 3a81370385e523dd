//! The verifier catches each kind of violation, naming the step, op and tensor; a plan file
//! round-trips and is refused for another graph.

use sgc_plan::{plan, verify, Plan, PlanError, PlanOptions, RunConfig, Strategy, ViolationKind};

/// A chain with a skip connection, a backward pass and an in-place update.
const GRAPH: &str = r#"{"format": "sgc-graph", "version": 1, "name": "v", "loss": "loss",
  "tensors": [
    {"name": "x", "dtype": "f32", "shape": [1024], "kind": "input"},
    {"name": "w", "dtype": "f32", "shape": [4], "kind": "param"},
    {"name": "a", "dtype": "f32", "shape": [1024]},
    {"name": "b", "dtype": "f32", "shape": [1024]},
    {"name": "c", "dtype": "f32", "shape": [1024]},
    {"name": "cv", "dtype": "f32", "shape": [1024], "alias_of": "c"},
    {"name": "loss", "dtype": "f32", "shape": []},
    {"name": "dc", "dtype": "f32", "shape": [1024]},
    {"name": "db", "dtype": "f32", "shape": [1024]},
    {"name": "da", "dtype": "f32", "shape": [1024]},
    {"name": "dw", "dtype": "f32", "shape": [4]}],
  "ops": [
    {"name": "f1", "op": "mul", "inputs": ["x", "w"], "outputs": ["a"], "flops": 10},
    {"name": "f2", "op": "relu", "inputs": ["a"], "outputs": ["b"], "flops": 10},
    {"name": "f3", "op": "relu", "inputs": ["b"], "outputs": ["c"], "flops": 10},
    {"name": "view", "op": "reshape", "inputs": ["c"], "outputs": ["cv"]},
    {"name": "l", "op": "sum", "inputs": ["cv", "a"], "outputs": ["loss"], "flops": 10},
    {"name": "g3", "op": "relu_grad", "inputs": ["cv", "a"], "outputs": ["dc"], "flops": 10},
    {"name": "g2", "op": "relu_grad", "inputs": ["b", "dc"], "outputs": ["db"], "flops": 10},
    {"name": "g1", "op": "relu_grad", "inputs": ["a", "db"], "outputs": ["da"], "flops": 10},
    {"name": "gw", "op": "mul_grad", "inputs": ["x", "da"], "outputs": ["dw"], "flops": 10},
    {"name": "upd", "op": "sgd_update", "inputs": ["w", "dw"], "outputs": [], "recomputable": false}],
  "outputs": ["loss"]}"#;

fn setup() -> (sgc_ir::Graph, Plan) {
    let g = sgc_ir::format::from_str(GRAPH).unwrap();
    let p = plan(&g, &PlanOptions::default(), &RunConfig::default()).unwrap();
    verify(&g, &p).unwrap();
    (g, p)
}

fn kinds(g: &sgc_ir::Graph, p: &Plan) -> Vec<ViolationKind> {
    verify(g, p)
        .unwrap_err()
        .into_iter()
        .map(|v| v.kind)
        .collect()
}

fn step_of(g: &sgc_ir::Graph, p: &Plan, name: &str) -> usize {
    let op = g.op_by_name(name).unwrap();
    p.steps
        .iter()
        .position(|s| s.op == op && !s.recompute)
        .unwrap()
}

/// A step recomputing op `name`, freeing nothing.
fn recompute_of(g: &sgc_ir::Graph, name: &str) -> sgc_plan::Step {
    sgc_plan::Step {
        op: g.op_by_name(name).unwrap(),
        recompute: true,
        free: Vec::new(),
    }
}

#[test]
fn a_premature_free_is_a_use_after_free() {
    let (g, mut p) = setup();
    let a = g.tensor_by_name("a").unwrap();
    let s = step_of(&g, &p, "f1");
    p.steps[s].free.push(a);
    let v = verify(&g, &p).unwrap_err();
    let uaf = v
        .iter()
        .find(|v| matches!(v.kind, ViolationKind::UseAfterFree { freed_at } if freed_at == s))
        .expect("use after free reported");
    assert_eq!(uaf.tensor.as_deref(), Some("a"));
    assert!(uaf.op.is_some() && uaf.step.is_some());
    assert!(uaf.to_string().contains("freed after step"), "{uaf}");
}

#[test]
fn a_wrong_peak_and_wrong_lifetimes_are_reported() {
    let (g, mut p) = setup();
    p.summary.planned_peak += 1;
    p.lifetimes.pop();
    let k = kinds(&g, &p);
    assert!(k
        .iter()
        .any(|k| matches!(k, ViolationKind::PeakMismatch { .. })));
    assert!(k
        .iter()
        .any(|k| matches!(k, ViolationKind::LifetimesMismatch { .. })));
}

#[test]
fn running_a_non_recomputable_op_twice_is_reported() {
    let (g, mut p) = setup();
    p.steps.push(recompute_of(&g, "upd"));
    assert!(kinds(&g, &p).contains(&ViolationKind::NonRecomputableRerun));
}

#[test]
fn a_missing_op_and_a_missing_output_are_reported() {
    let (g, mut p) = setup();
    let s = step_of(&g, &p, "l");
    p.steps.remove(s);
    let k = kinds(&g, &p);
    assert!(k.contains(&ViolationKind::NeverRun));
    assert!(k.contains(&ViolationKind::OutputMissing));
}

#[test]
fn a_recompute_after_an_in_place_update_and_a_stale_view_are_reported() {
    let (g, mut p) = setup();
    p.steps.push(recompute_of(&g, "f1"));
    assert!(kinds(&g, &p)
        .iter()
        .any(|k| matches!(k, ViolationKind::DirtyPersistent { .. })));

    let (g, mut p) = setup();
    // Recompute `c` right before `g3`: the view `cv` taken of the old `c` is now stale.
    let s = step_of(&g, &p, "g3");
    p.steps.insert(s, recompute_of(&g, "f3"));
    assert!(kinds(&g, &p).contains(&ViolationKind::StaleView));
}

#[test]
fn every_strategy_plans_the_small_graph_with_recomputation_when_memory_is_tight() {
    let g = sgc_ir::format::from_str(GRAPH).unwrap();
    for s in Strategy::ALL {
        let o = PlanOptions {
            strategy: s,
            evictee_min_size: 0,
            eviction_threshold: Some(g.lower_bound().bytes),
            ..PlanOptions::default()
        };
        let p = plan(&g, &o, &RunConfig::default()).unwrap();
        assert_eq!(verify(&g, &p).unwrap().peak_bytes, p.summary.planned_peak);
    }
}

#[test]
fn plan_files_round_trip_and_are_refused_for_another_graph() {
    let (g, p) = setup();
    let back = Plan::from_json(&p.to_json()).unwrap();
    assert_eq!(back, p);
    back.check_graph(&g).unwrap();
    let other =
        sgc_ir::format::from_str(&GRAPH.replace("\"flops\": 10}", "\"flops\": 11}")).unwrap();
    let err = back.check_graph(&other).unwrap_err();
    assert!(matches!(err, sgc_plan::FormatError::GraphMismatch { .. }));
    assert!(err.to_string().contains("made for graph"), "{err}");
    assert!(matches!(
        verify(&other, &back).unwrap_err()[0].kind,
        ViolationKind::GraphMismatch { .. }
    ));
    assert!(Plan::from_json("{\"format\": \"sgc-graph\"}").is_err());
}

#[test]
fn lb_memory_trades_memory_for_less_recompute() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../graphs/resnet50.json");
    let Ok(g) = sgc_ir::load_any(&path) else {
        return;
    };
    let o = PlanOptions {
        thresh_tries: 4,
        ..PlanOptions::default()
    };
    let tight = plan(&g, &o, &RunConfig::default()).unwrap();
    let lb = tight.summary.planned_peak
        + (tight.summary.unplanned_peak - tight.summary.planned_peak) / 2;
    let loose = plan(
        &g,
        &PlanOptions {
            lb_memory: Some(lb),
            ..o
        },
        &RunConfig::default(),
    )
    .unwrap();
    verify(&g, &loose).unwrap();
    assert!(loose.summary.planned_peak <= lb);
    assert!(loose.summary.recompute_cost < tight.summary.recompute_cost);
}

/// The index of `name`'s (first) lifetime in the plan.
fn lifetime_of(g: &sgc_ir::Graph, p: &Plan, name: &str) -> usize {
    let t = g.tensor_by_name(name).unwrap();
    p.lifetimes.iter().position(|l| l.root == t).unwrap()
}

#[test]
fn plans_carry_aligned_offsets_at_or_near_the_bound() {
    let (_, p) = setup();
    let arena = p.arena.as_ref().expect("plans have an arena by default");
    assert_eq!(arena.align, 256);
    assert_eq!(arena.offsets.len(), p.lifetimes.len());
    assert!(arena.offsets.iter().all(|o| o % 256 == 0));
    assert!(
        arena.size >= arena.lower_bound,
        "no in-place pairs in this graph"
    );
    let live = p.summary.planned_peak - p.summary.persistent_bytes;
    assert!(arena.lower_bound >= live, "padding only adds");
    let g = sgc_ir::format::from_str(GRAPH).unwrap();
    let o = PlanOptions {
        arena: false,
        ..PlanOptions::default()
    };
    let bare = plan(&g, &o, &RunConfig::default()).unwrap();
    assert!(bare.arena.is_none());
    let o = PlanOptions {
        align: 0,
        ..PlanOptions::default()
    };
    assert!(matches!(
        plan(&g, &o, &RunConfig::default()),
        Err(PlanError::InvalidOption(_))
    ));
}

#[test]
fn an_address_overlap_names_both_tensors_and_the_step() {
    let (g, mut p) = setup();
    let (a, b) = (lifetime_of(&g, &p, "a"), lifetime_of(&g, &p, "b"));
    let arena = p.arena.as_mut().unwrap();
    arena.offsets[b] = arena.offsets[a];
    let v = verify(&g, &p).unwrap_err();
    let hit = v
        .iter()
        .find(|v| matches!(&v.kind, ViolationKind::AddressOverlap { other, .. } if other == "b"))
        .expect("overlap reported");
    assert_eq!(hit.tensor.as_deref(), Some("a"));
    assert_eq!(hit.step, Some(step_of(&g, &p, "f2")));
    assert!(hit.to_string().contains("share addresses"), "{hit}");
}

#[test]
fn misaligned_outside_and_missing_offsets_are_reported() {
    let (g, p) = setup();
    let mut bad = p.clone();
    let arena = bad.arena.as_mut().unwrap();
    let top = (0..arena.offsets.len())
        .max_by_key(|&k| arena.offsets[k])
        .unwrap();
    arena.offsets[top] += 8;
    let k = kinds(&g, &bad);
    assert!(k
        .iter()
        .any(|k| matches!(k, ViolationKind::ArenaMisaligned { align: 256, .. })));
    assert!(k
        .iter()
        .any(|k| matches!(k, ViolationKind::ArenaOutside { .. })));
    let mut small = p.clone();
    small.arena.as_mut().unwrap().size -= 256;
    assert!(kinds(&g, &small)
        .iter()
        .all(|k| matches!(k, ViolationKind::ArenaOutside { .. })));
    let mut short = p;
    short.arena.as_mut().unwrap().offsets.pop();
    assert_eq!(
        kinds(&g, &short),
        [ViolationKind::ArenaCount {
            offsets: short.lifetimes.len() - 1,
            lifetimes: short.lifetimes.len()
        }]
    );
}

/// A relu chain whose ops may run in place.
const IN_PLACE: &str = r#"{"format": "sgc-graph", "version": 1,
  "tensors": [{"name": "x", "dtype": "f32", "shape": [1000], "kind": "input"},
              {"name": "a", "dtype": "f32", "shape": [1000]},
              {"name": "b", "dtype": "f32", "shape": [1000]},
              {"name": "c", "dtype": "f32", "shape": [10]}],
  "ops": [{"name": "f", "op": "relu", "inputs": ["x"], "outputs": ["a"], "inplace": [[0, 0]]},
          {"name": "g", "op": "relu", "inputs": ["a"], "outputs": ["b"], "inplace": [[0, 0]]},
          {"name": "h", "op": "sum", "inputs": ["b"], "outputs": ["c"]}],
  "outputs": ["c"]}"#;

#[test]
fn only_a_declared_in_place_pair_shares_an_address_and_only_exactly() {
    let g = sgc_ir::format::from_str(IN_PLACE).unwrap();
    let o = PlanOptions {
        strategy: Strategy::None,
        ..PlanOptions::default()
    };
    let p = plan(&g, &o, &RunConfig::default()).unwrap();
    let (a, b, c) = (
        lifetime_of(&g, &p, "a"),
        lifetime_of(&g, &p, "b"),
        lifetime_of(&g, &p, "c"),
    );
    let arena = p.arena.clone().unwrap();
    assert!(arena.in_place.contains(&(b, a)), "{:?}", arena.in_place);
    assert_eq!(arena.offsets[a], arena.offsets[b]);
    assert_eq!(
        arena.lower_bound,
        2 * 4096,
        "two big tensors live at steps 0 and 1"
    );
    assert_eq!(
        arena.size,
        4096 + 256,
        "x, a and b share one buffer; c its own"
    );
    // The same address for an undeclared pair (h: b -> c) is an overlap.
    let mut bad = p.clone();
    bad.arena.as_mut().unwrap().offsets[c] = arena.offsets[b];
    let v = verify(&g, &bad).unwrap_err();
    assert!(v.iter().any(|v| v.tensor.as_deref() == Some("b")
        && matches!(&v.kind, ViolationKind::AddressOverlap { other, .. } if other == "c")));
    // A declared pair that overlaps without the very same offset is an overlap too.
    let mut shifted = p;
    let arena = shifted.arena.as_mut().unwrap();
    arena.offsets[b] += 256;
    arena.size += 256;
    let v = verify(&g, &shifted).unwrap_err();
    assert!(v.iter().any(|v| v.tensor.as_deref() == Some("a")
        && matches!(&v.kind, ViolationKind::AddressOverlap { other, .. } if other == "b")));
}

/// A split-based plan that runs an op a third time, or a `chen-sqrt` plan that recomputes
/// more than one forward pass, breaks what those strategies promise.
#[test]
fn a_third_run_and_chen_over_one_forward_pass_are_reported() {
    let (g, mut p) = setup();
    assert_eq!(p.options.strategy, Strategy::Sublinear);
    let s = step_of(&g, &p, "f2") + 1;
    for _ in 0..2 {
        p.steps.insert(s, recompute_of(&g, "f2"));
    }
    let v = verify(&g, &p).unwrap_err();
    let third = v
        .iter()
        .find(|v| matches!(v.kind, ViolationKind::RunsTooOften { runs: 3 }))
        .expect("a third run reported");
    assert_eq!(third.op.as_deref(), Some("f2"));
    assert!(third.to_string().contains("runs 3 times"), "{third}");
    // The same schedule is no violation for DTR, which makes no such promise...
    p.options.strategy = Strategy::Dtr;
    assert!(!kinds(&g, &p)
        .iter()
        .any(|k| matches!(k, ViolationKind::RunsTooOften { .. })));
    // ...and under chen-sqrt, with the whole forward pass recomputed once more on top, it
    // recomputes more than one forward pass.
    p.options.strategy = Strategy::ChenSqrt;
    let extra: Vec<_> = ["f1", "f2", "f3", "view", "l"]
        .iter()
        .map(|n| recompute_of(&g, n))
        .collect();
    let at = step_of(&g, &p, "g3");
    p.steps.splice(at..at, extra);
    let forward = sgc_plan::verify::forward_cost(&g, None);
    let k = kinds(&g, &p);
    assert!(
        k.iter().any(|k| matches!(
            k,
            ViolationKind::RecomputeOverForward { recompute, forward: f }
                if *recompute > forward && *f == forward
        )),
        "{k:?}"
    );
}

/// The verifier's overlap check (a sweep that only looks at the live lifetimes around each
/// new one's addresses) finds an overlap exactly when some pair of lifetimes alive together
/// shares an address outside an in-place pair: zoo plans with offsets moved at random,
/// against a check of every pair.
#[test]
fn overlaps_are_found_exactly_when_a_pair_clashes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../graphs");
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    let mut clashing = 0;
    for name in ["tiny_cnn", "tiny_transformer", "mlp", "chain1000"] {
        let g = sgc_ir::load_any(dir.join(format!("{name}.json"))).unwrap();
        let p = plan(&g, &PlanOptions::default(), &RunConfig::default()).unwrap();
        for trial in 0..40 {
            let mut bad = p.clone();
            let arena = bad.arena.as_mut().unwrap();
            let slots = (arena.size / arena.align).max(1);
            for _ in 0..=trial % 3 {
                let k = next(arena.offsets.len() as u64) as usize;
                let bytes = bad.lifetimes[k].bytes.div_ceil(arena.align) * arena.align;
                let room = (arena.size.saturating_sub(bytes) / arena.align).min(slots);
                arena.offsets[k] = next(room + 1) * arena.align;
            }
            let expected = pairwise_clash(&g, &bad);
            let found = verify(&g, &bad).err().is_some_and(|v| {
                v.iter()
                    .any(|v| matches!(v.kind, ViolationKind::AddressOverlap { .. }))
            });
            assert_eq!(found, expected, "{name}, trial {trial}");
            clashing += usize::from(expected);
        }
    }
    assert!(clashing > 10, "only {clashing} trials clash");
}

/// Whether two lifetimes alive at a common step overlap in address, other than a declared
/// in-place pair at one offset (checked by the IR's rule), pair by pair.
fn pairwise_clash(g: &sgc_ir::Graph, p: &Plan) -> bool {
    let arena = p.arena.as_ref().unwrap();
    let l = &p.lifetimes;
    let in_place = |i: usize, o: usize| {
        let s = l[o].first_step;
        l[i].last_step == s && g.in_place_allowed(p.steps[s].op, l[o].root, l[i].root)
    };
    (0..l.len()).any(|a| {
        (a + 1..l.len()).any(|b| {
            let together = l[a].first_step <= l[b].last_step && l[b].first_step <= l[a].last_step;
            let (oa, ob) = (arena.offsets[a], arena.offsets[b]);
            let apart = oa + l[a].bytes <= ob || ob + l[b].bytes <= oa;
            let shared = oa == ob && (in_place(a, b) || in_place(b, a));
            l[a].bytes > 0 && l[b].bytes > 0 && together && !apart && !shared
        })
    })
}
