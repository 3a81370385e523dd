//! Strategies are one trait and one registry (`sgc_plan::strategies`):
//! - every strategy name of the plan format has exactly one registered strategy, and the
//!   options each says it reads are fields of `PlanOptions`;
//! - a strategy written outside the crate (a toy, here) plans through the same pipeline as
//!   the registered ones (`plan_by`): its schedule becomes a verified plan with no other
//!   change. A real new strategy is this file's `Toy` in `strategies/`, one line of
//!   `REGISTRY`, and its name and promises in the plan format: three files.

use sgc_ir::{OpId, Phase};
use sgc_plan::strategies::{self, Context, Name, Scheduled, Strategy, REGISTRY};
use sgc_plan::{plan, plan_by, verify, PlanError, PlanOptions, RunConfig};

fn load(rel: &str) -> sgc_ir::Graph {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    sgc_ir::load_any(&p).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn every_name_has_exactly_one_registered_strategy() {
    for &name in Name::EVERY {
        let n = REGISTRY.iter().filter(|s| s.name() == name).count();
        assert_eq!(n, 1, "strategy {name}: {n} registered");
        assert_eq!(strategies::of(name).name(), name);
    }
    assert_eq!(REGISTRY.len(), Name::EVERY.len());
}

#[test]
fn the_options_a_strategy_reads_are_plan_options() {
    let mut all = PlanOptions {
        budget: Some(1),
        lb_memory: Some(1),
        eviction_threshold: Some(1),
        host_memory: Some(1),
        time_limit_s: Some(1),
        host_link: sgc_plan::streams::HostLink::named("h100"),
        device_profile: Some("h100".parse().unwrap()),
        ..PlanOptions::default()
    };
    all.budget_of = sgc_plan::BudgetOf::Peak;
    all.arena_effort = sgc_plan::ArenaEffort::Fast;
    let json = serde_json::to_value(&all).unwrap();
    let fields: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    for s in REGISTRY {
        for f in s.reads().iter().chain(&strategies::COMMON_OPTIONS) {
            assert!(
                fields.contains(f),
                "{} reads `{f}`, not a PlanOptions field",
                s.name()
            );
        }
    }
}

/// A toy: the traced forward, then every rerunnable forward op once more (in order) right
/// before the first backward op, then the rest. It keeps nothing for the backward that it
/// can make again, the opposite of a useful plan, and a valid one.
struct Toy;

impl Strategy for Toy {
    fn name(&self) -> Name {
        // A toy outside the crate cannot add a name to the plan format; it plans under
        // `dtr`'s, whose rules (no limit on runs) its schedules keep.
        Name::Dtr
    }

    fn about(&self) -> &'static str {
        "the forward run twice"
    }

    fn schedule(
        &self,
        ctx: &Context<'_>,
        _: &PlanOptions,
        _: &sgc_plan::RunConfig<'_>,
    ) -> Result<Scheduled, PlanError> {
        let g = ctx.graph();
        let first_backward = g
            .op_ids()
            .position(|o| g.phase(o) == Some(Phase::Backward))
            .unwrap_or(g.num_ops());
        let mut steps: Vec<(OpId, bool)> =
            (0..first_backward).map(|i| (OpId::new(i), false)).collect();
        steps.extend(
            (0..first_backward)
                .map(OpId::new)
                .filter(|&o| ctx.rerunnable(o))
                .map(|o| (o, true)),
        );
        steps.extend((first_backward..g.num_ops()).map(|i| (OpId::new(i), false)));
        Ok(Scheduled::of(steps))
    }
}

#[test]
fn a_strategy_outside_the_crate_plans_through_the_same_pipeline() {
    let run = RunConfig {
        workers: Some(1),
        progress: None,
    };
    for file in ["graphs/tiny_mlp.json", "graphs/tiny_cnn.json"] {
        let g = load(file);
        let (p, _) = plan_by(&g, &Toy, &PlanOptions::default(), &run).unwrap();
        assert!(verify(&g, &p).is_ok(), "{file}");
        assert_eq!(p.options.strategy, Name::Dtr);
        let rerun: Vec<OpId> = p
            .steps
            .iter()
            .filter(|s| s.recompute)
            .map(|s| s.op)
            .collect();
        let forward: Vec<OpId> = g
            .op_ids()
            .filter(|&o| g.phase(o) == Some(Phase::Forward))
            .collect();
        assert!(!rerun.is_empty(), "{file}: the toy reran nothing");
        assert!(rerun.iter().all(|o| forward.contains(o)), "{file}");
        // Its recompute is what it reran, and the pipeline reports it like any plan's.
        assert!(p.summary.recompute_cost > 0.0, "{file}");
        // A registered strategy through `plan_by` is exactly `plan`.
        let o = PlanOptions::default();
        let by = plan_by(&g, strategies::of(o.strategy), &o, &run).unwrap().0;
        assert_eq!(
            by.to_json(),
            plan(&g, &o, &run).unwrap().to_json(),
            "{file}"
        );
    }
}

#[test]
fn a_strategy_that_needs_a_budget_is_refused_without_one() {
    let g = load("graphs/tiny_mlp.json");
    for s in REGISTRY.iter().filter(|s| s.needs_budget()) {
        let e = plan_by(&g, *s, &PlanOptions::default(), &RunConfig::default()).unwrap_err();
        assert!(
            e.to_string().contains("needs --budget"),
            "{}: {e}",
            s.name()
        );
    }
}
