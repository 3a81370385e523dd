//! Every strategy on every zoo graph (`graphs/*.json`, when present), every graph of the
//! real corpus (`graphs/real/*.json.gz`) and every Checkmate graph of
//! `benches/data/checkmate` gives a plan that the verifier accepts (which holds the
//! split-based strategies to one recomputation per op, and Chen's to one forward pass);
//! plans do not depend on the worker count; genetic refinement never ends worse; budgets
//! are honoured.

use sgc_ir::Graph;
use sgc_plan::{plan, verify, PlanError, PlanOptions, RunConfig, Strategy, Traded};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (file stem, graph) for every zoo graph and Checkmate graph there is.
fn graphs() -> Vec<(String, Graph)> {
    let mut files = Vec::new();
    for dir in [
        root().join("graphs"),
        root().join("graphs/real"),
        root().join("benches/data/checkmate"),
    ] {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            files.extend(rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| {
                let name = p.to_string_lossy();
                name.ends_with(".json") || name.ends_with(".json.gz")
            }));
        }
    }
    files.sort();
    assert!(
        files.len() >= 4,
        "no graphs found next to {}",
        root().display()
    );
    files
        .into_iter()
        .map(|p| {
            let g = sgc_ir::load_any(&p).unwrap_or_else(|e| panic!("{e}"));
            let name = p.file_name().unwrap().to_string_lossy();
            (
                name.trim_end_matches(".gz")
                    .trim_end_matches(".json")
                    .to_string(),
                g,
            )
        })
        .collect()
}

/// Lighter search settings for the largest graphs, so the debug-mode suite stays quick.
fn options(g: &Graph, strategy: Strategy, genetic_iters: usize) -> PlanOptions {
    let big = g.num_ops() > 1500;
    PlanOptions {
        strategy,
        seed: 7,
        thresh_tries: if big { 3 } else { 10 },
        genetic_iters: if big {
            genetic_iters.min(2)
        } else {
            genetic_iters
        },
        pool_size: if big { 6 } else { 20 },
        evictee_min_size: 0,
        // Only `every_strategy_verifies_on_every_graph` checks the arena: the other tests
        // are about the schedule, and placing every plan's tensors would triple their time.
        arena: false,
        ..PlanOptions::default()
    }
}

/// What a plan needs on the device: its arena plus the persistent bytes.
fn device(g: &Graph, p: &sgc_plan::Plan) -> u64 {
    p.arena.as_ref().expect("planned with an arena").size + g.persistent_bytes()
}

fn checked(g: &Graph, o: &PlanOptions, workers: Option<usize>) -> sgc_plan::Plan {
    let run = RunConfig {
        workers,
        progress: None,
    };
    let p = plan(g, o, &run).unwrap_or_else(|e| panic!("{}: {e}", o.strategy));
    let peak = verify(g, &p).unwrap_or_else(|v| panic!("{}: {:?}", o.strategy, v));
    assert_eq!(peak.peak_bytes, p.summary.planned_peak);
    assert!(p.summary.planned_peak >= p.summary.lower_bound);
    assert_eq!(p.arena.is_some(), o.arena);
    if let Some(arena) = &p.arena {
        let live = p.summary.planned_peak - p.summary.persistent_bytes;
        assert!(
            arena.lower_bound >= live,
            "the aligned bound pads the live peak"
        );
        assert!(arena.size >= arena.lower_bound || !arena.in_place.is_empty());
    }
    p
}

#[test]
fn every_strategy_verifies_on_every_graph() {
    let real: Vec<String> = std::fs::read_dir(root().join("graphs/real"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter_map(|n| n.strip_suffix(".json.gz").map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut misses = Vec::new();
    for (name, g) in graphs() {
        let mut chen: Option<(sgc_plan::Summary, u64)> = None;
        let has_backward = g
            .op_ids()
            .any(|o| g.phase(o) == Some(sgc_ir::Phase::Backward));
        for s in Strategy::ALL {
            let o = PlanOptions {
                arena: true,
                ..options(&g, s, 3)
            };
            if s == Strategy::Partition && !has_backward {
                // Nothing to partition: refused with what to do.
                let err = plan(&g, &o, &RunConfig::default()).unwrap_err();
                assert!(err.to_string().contains("no backward op"), "{name}: {err}");
                continue;
            }
            let p = checked(&g, &o, None);
            // Chen's fixed rule is a baseline and may lose to no plan on plain sequences.
            assert!(
                s == Strategy::ChenSqrt || p.summary.planned_peak <= p.summary.unplanned_peak,
                "{name} {s}: planned {} > unplanned {}",
                p.summary.planned_peak,
                p.summary.unplanned_peak
            );
            if s == Strategy::None {
                assert_eq!(p.summary.planned_peak, p.summary.unplanned_peak);
                assert_eq!(p.summary.recompute_steps, 0);
            }
            // The split strategies recompute an op at most once; Chen's plan at most one
            // forward pass (the verifier checks both too).
            if matches!(
                s,
                Strategy::ChenSqrt | Strategy::Sublinear | Strategy::Partition
            ) {
                assert!(
                    p.summary.max_op_runs <= 2,
                    "{name} {s}: {}",
                    p.summary.max_op_runs
                );
            }
            if matches!(s, Strategy::ChenSqrt | Strategy::Partition) {
                let forward = sgc_plan::verify::forward_cost(&g, None);
                assert!(
                    p.summary.recompute_cost <= forward * (1.0 + 1e-9),
                    "{name}: {s} recomputes {} > one forward pass {forward}",
                    p.summary.recompute_cost
                );
            }
            // The search never peaks above Chen's plan, and with Chen's peak as its
            // budget it never recomputes more either.
            match s {
                Strategy::ChenSqrt => chen = Some((p.summary.clone(), device(&g, &p))),
                Strategy::Sublinear => {
                    let (c, chen_device) = chen
                        .as_ref()
                        .expect("chen-sqrt is planned before sublinear");
                    assert!(
                        p.summary.planned_peak <= c.planned_peak,
                        "{name}: sublinear peak {} > chen-sqrt {}",
                        p.summary.planned_peak,
                        c.planned_peak
                    );
                    // A budget is in device bytes (the arena plus persistent bytes).
                    let at_chen = PlanOptions {
                        budget: Some(*chen_device),
                        ..options(&g, s, 3)
                    };
                    let b = checked(&g, &at_chen, None);
                    assert!(
                        b.summary.recompute_cost <= c.recompute_cost * (1.0 + 1e-9),
                        "{name}: at chen-sqrt's device bytes, sublinear recomputes {} > {}",
                        b.summary.recompute_cost,
                        c.recompute_cost
                    );
                }
                _ => {}
            }
            let arena = p.arena.as_ref().unwrap();
            eprintln!(
                "{name:>28} {s:>10}: peak {:.3} of unplanned, recompute {:.3}, arena {:.4}x the live peak ({})",
                p.summary.planned_peak as f64 / p.summary.unplanned_peak as f64,
                p.summary.recompute_share,
                arena.ratio(),
                arena.algorithm
            );
            // The Checkmate random graphs are hundreds of tiny tensors of arbitrary sizes
            // (a few 256-byte units each): their aligned live peak is a looser bound. The
            // real corpus's arenas are reported by `cargo bench --bench real`; placing them
            // within 1.01x is allocation work of its own (the arena column of the real bench).
            let slack = if name.starts_with("random_layered") {
                1.05
            } else if real.contains(&name) {
                1.2
            } else {
                1.01
            };
            if matches!(s, Strategy::None | Strategy::Sublinear) && arena.ratio() > slack {
                misses.push(format!(
                    "{name} {s}: arena {} B is {:.4}x the live peak {} B",
                    arena.size,
                    arena.ratio(),
                    arena.lower_bound
                ));
            }
        }
    }
    assert!(
        misses.is_empty(),
        "arena above 1.01x the live peak:\n{}",
        misses.join("\n")
    );
}

#[test]
fn plan_files_do_not_depend_on_worker_count() {
    for (name, g) in graphs() {
        let o = options(&g, Strategy::Sublinear, 4);
        let one = checked(&g, &o, Some(1)).to_json();
        let all = checked(&g, &o, None).to_json();
        assert!(one == all, "{name}: 1-worker and all-worker plans differ");
    }
}

/// 20 generations never end worse than none up to the fixed-peak stage, and that stage never
/// ends worse than it starts. The search picks the better of the plans finished from the
/// refined and from the unrefined population, in (peak, recompute) order; the fixed-peak
/// stage (the least recompute at that peak) keeps its input unless a climb ends cheaper at
/// or under its peak; the last step's steep trade next to the lowest peak
/// (`SearchStats::traded_from`) gives up a little peak on purpose, so the stage's result is
/// read before it. The stage's climbs are greedy and start from other plans after
/// generations, so its result is not ordered the same way: on MobileNetV3 at seed 7, 20
/// generations end at 6.110% of a step and none at 6.104%, at the same peak (`sgc plan
/// graphs/real/mobilenet_v3_large.json.gz --seed 7 --evictee-min-size 0 --genetic-iters
/// 20`, and `0`, where the 6.104% plan is the lowest peak found). Climbing from
/// every start a search without generations takes as well would order it, for 44% more
/// schedules built on gpt2_deep at 100k ops (the commit that added the 5% rung measures
/// both).
#[test]
fn genetic_refinement_never_ends_worse() {
    let share = |t: Traded| (t.peak, t.recompute_share());
    // (peak, share) before the fixed-peak stage and after it.
    let run = |g: &Graph, iters: usize| {
        let o = options(g, Strategy::Sublinear, iters);
        let (p, stats) = sgc_plan::plan_with_stats(g, &o, &RunConfig::default()).expect("plans");
        verify(g, &p).expect("the plan verifies");
        let s = stats.search.expect("a sublinear search");
        let before = share(s.before_fixed_peak.expect("no budget: the stage runs"));
        let after = s
            .traded_from
            .map(share)
            .unwrap_or((p.summary.planned_peak, p.summary.recompute_share));
        (before, after)
    };
    // Shares from integer cost units and from the summary's costs differ in the last digits.
    let no_worse =
        |b: (u64, f64), a: (u64, f64)| b.0 < a.0 || (b.0 == a.0 && b.1 <= a.1 * (1.0 + 1e-9));
    for (name, g) in graphs() {
        let (a, b) = (run(&g, 0), run(&g, 20));
        for (iters, (before, after)) in [(0, a), (20, b)] {
            assert!(
                no_worse(after, before),
                "{name}, {iters} generations: the fixed-peak stage ended worse than it started \
                 ({after:?} after, {before:?} before)"
            );
        }
        assert!(
            no_worse(b.0, a.0),
            "{name}: 20 iterations ({} B, {:.5} of a step) worse than 0 ({} B, {:.5}) before the \
             fixed-peak stage",
            b.0 .0,
            b.0 .1,
            a.0 .0,
            a.0 .1
        );
    }
}

#[test]
fn a_budget_below_the_lower_bound_is_refused() {
    for (_, g) in graphs().into_iter().take(2) {
        let lb = g.lower_bound().bytes;
        for s in Strategy::ALL {
            let o = PlanOptions {
                budget: Some(lb - 1),
                ..options(&g, s, 0)
            };
            let err = plan(&g, &o, &RunConfig::default()).unwrap_err();
            assert!(
                matches!(err, PlanError::BudgetBelowLowerBound { .. }),
                "{err}"
            );
            assert!(err.to_string().contains("lower bound"), "{err}");
        }
    }
}

#[test]
fn a_budget_is_met_or_refused_with_the_lowest_peak() {
    for (name, g) in graphs() {
        let with_arena = PlanOptions {
            arena: true,
            ..options(&g, Strategy::Sublinear, 0)
        };
        let best = checked(&g, &with_arena, None);
        // At the unbudgeted plan's own device bytes, and halfway from there to the
        // unplanned peak: met, within the budget in device bytes, never costlier.
        let s = &best.summary;
        let own = device(&g, &best);
        for budget in [own, own + s.unplanned_peak.saturating_sub(own) / 2] {
            let o = PlanOptions {
                budget: Some(budget),
                ..with_arena.clone()
            };
            let p = checked(&g, &o, None);
            assert!(device(&g, &p) <= budget, "{name}");
            assert!(
                p.summary.recompute_cost <= s.recompute_cost,
                "{name}: budget plan costs more"
            );
        }
        // At the per-op lower bound: met, refused naming the lowest device bytes reached,
        // or refused as below the kept-outputs bound (sublinear keeps each graph output from
        // when it is made), which no plan made here goes below.
        let o = PlanOptions {
            budget: Some(s.lower_bound),
            ..with_arena
        };
        match plan(&g, &o, &RunConfig::default()) {
            Ok(p) => assert!(device(&g, &p) <= s.lower_bound),
            Err(PlanError::BudgetNotMet {
                best_peak,
                best_device,
                ..
            }) => assert!(best_device.map_or(best_peak, |d| d) > s.lower_bound),
            Err(PlanError::BudgetBelowLowerBound { lower_bound, .. }) => {
                assert!(lower_bound > s.lower_bound, "{name}");
                assert!(lower_bound <= sgc_plan::peak_bounds(&g).1.bytes, "{name}");
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

/// Static DTR on a long chain whose activations set the peak: it used to evict whole runs
/// of the chain and recompute them over and over (16,625% of a step, 250 s). With the
/// cascade in its score it saves memory at a small recompute share, without giving up.
#[test]
fn dtr_does_not_thrash_on_a_long_chain() {
    let model = sgc_ir::zoo::models()
        .into_iter()
        .find(|m| m.name == "chain1000")
        .expect("chain1000 is in the zoo");
    let g = (model.build_at)(2048);
    let o = PlanOptions {
        strategy: Strategy::Dtr,
        arena: false,
        ..PlanOptions::default()
    };
    let run = RunConfig::default();
    let (p, stats) = sgc_plan::plan_with_stats(&g, &o, &run).expect("dtr plans chain1000");
    assert_eq!(stats.fallback, None, "dtr fell back to the traced order");
    let s = &p.summary;
    assert!(
        s.planned_peak < s.unplanned_peak * 3 / 4,
        "peak {} of {}",
        s.planned_peak,
        s.unplanned_peak
    );
    assert!(
        s.recompute_share < 0.5,
        "recompute share {}",
        s.recompute_share
    );
    verify(&g, &p).expect("the dtr plan verifies");
}

/// Static DTR says at once, and why, when no pass can lower the peak: the plan is the
/// traced order (its peak, no recompute) with the reason as the fallback. On tiny_mlp every
/// activation is under the default smallest evictee (1 MiB); on a wide fan of small
/// branches concatenated at the end, only the concatenation (over 1 MiB) may be evicted,
/// and what may not (the branches, all live together at the concatenation) already sets
/// the traced order's peak.
#[test]
fn dtr_says_at_once_when_it_cannot_lower_the_peak() {
    let tiny = sgc_ir::load_any(root().join("graphs/tiny_mlp.json")).expect("tiny_mlp loads");
    let cases = [
        (tiny, "no storage it may evict"),
        (sgc_ir::zoo::wide_shallow(40, 32), "already peaks at"),
    ];
    let o = PlanOptions {
        strategy: Strategy::Dtr,
        arena: false,
        ..PlanOptions::default()
    };
    for (g, why) in cases {
        let run = RunConfig::default();
        let (p, stats) = sgc_plan::plan_with_stats(&g, &o, &run).expect("dtr plans");
        let said = stats.fallback.unwrap_or_default();
        assert!(said.contains(why), "{:?}: {said:?}", g.name());
        assert_eq!(p.summary.planned_peak, p.summary.unplanned_peak);
        assert_eq!(p.summary.recompute_cost, 0.0);
        verify(&g, &p).expect("the traced order verifies");
    }
}
