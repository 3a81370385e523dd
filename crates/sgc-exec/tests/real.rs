//! Real PyTorch exports run on the CPU backend: ResNet-18, ResNet-50, DenseNet-121,
//! MobileNetV3-Large, EfficientNet-B0, ViT-B/16 (torchvision, batch 2 at 64x64), the
//! two-layer LSTM language model (batch 2, 8 tokens), the transformer LM (batch 2, 32
//! tokens) and the U-Net (batch 2 at 32x32) as `sgc_trace` traces them, random weights;
//! made by `python -m sgc_trace.tools.corpus --small --only resnet18 resnet50 densenet121
//! mobilenet_v3_large efficientnet_b0 lstm_lm transformer_lm vit_b_16 unet --out
//! tests/fixtures/real_small` from `python/` (GPT-2, BERT and Inception-v3 run too, but
//! their full-width weights make a debug run too slow for CI: `tests/torch_values.rs`
//! checks their ops on small models against PyTorch instead). Every plan the planner makes for them (static DTR also at its lowest
//! threshold, where ops run many times) passes the verifier and gives the loss and every
//! gradient bit for bit as the unplanned run does: the view ops (`t`, `expand`, `slice` of
//! the dense blocks) run as aliases read through views, depthwise and biased convolutions
//! per group, and the random ops (MobileNet's dropout, EfficientNet's stochastic depth:
//! `bernoulli`) draw the same values in both runs because a plan never recomputes them
//! (the LSTM's dropout masks are `bool` tensors).

mod common;

use common::device::assert_matches;
use common::{real, seeded_step, REAL_SMALL, REAL_SMALL_MORE};
use sgc_exec::{CpuBackend, Executor};
use sgc_ir::Graph;
use sgc_plan::{Plan, PlanOptions, Strategy};

/// Static DTR at the lowest threshold there is (the per-op lower bound, which it raises to
/// its eviction floor) and no smallest evictee (these small exports' tensors are all below
/// the default 1 MiB): the plan that evicts and recomputes the most, ops running up to 9
/// times.
fn dtr_at_lower_bound(g: &Graph) -> Plan {
    let options = PlanOptions {
        strategy: Strategy::Dtr,
        eviction_threshold: Some(g.lower_bound().bytes),
        evictee_min_size: 0,
        ..Default::default()
    };
    let plan = sgc_plan::plan(g, &options, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    sgc_plan::verify(g, &plan).unwrap_or_else(|e| panic!("dtr: {e:?}"));
    plan
}

#[test]
fn planned_runs_of_real_exports_equal_the_unplanned_run_bitwise() {
    for name in REAL_SMALL.into_iter().chain(REAL_SMALL_MORE) {
        let g = real(name);
        let mut base = common::unplanned(&g, CpuBackend::new()).unwrap();
        let expected = seeded_step(&g, &mut base);
        assert!(expected.len() > 10, "{name}: loss and gradients");
        for (n, t) in &expected {
            let v = t.as_f32().unwrap();
            assert!(v.iter().all(|x| x.is_finite()), "{name}: `{n}` not finite");
        }
        let loss = g.tensor(g.loss().unwrap()).name.clone();
        let l = expected
            .iter()
            .find(|(n, _)| *n == loss)
            .unwrap()
            .1
            .as_f32()
            .unwrap()[0];
        assert!(
            l > 0.0 && l < 20.0,
            "{name}: loss {l} of 1000 classes (10000 words)"
        );
        let mut plans: Vec<(String, Plan)> =
            [Strategy::Sublinear, Strategy::ChenSqrt, Strategy::Dtr]
                .into_iter()
                .map(|s| (s.to_string(), common::plan(&g, s)))
                .collect();
        plans.push(("dtr at the lower bound".into(), dtr_at_lower_bound(&g)));
        for (strategy, plan) in plans {
            let mut ex = Executor::from_plan(&g, &plan, CpuBackend::new()).unwrap();
            let got = seeded_step(&g, &mut ex);
            assert_matches(&format!("{name} / {strategy}"), &expected, &got, None);
        }
    }
}

/// Rotor on real exports whose forward has ops that may not run again: batch norm's
/// running statistics written back in place (all three), dropout (MobileNetV3), stochastic
/// depth (EfficientNet-B0's `bernoulli`). At a peak budget it meets with recomputation (a
/// share of the unplanned peak: these small exports' peaks are mostly weights and
/// gradients), the verifier accepts its plan, and the step gives the loss and every
/// gradient bit for bit as the unplanned run: a stage run again repeats only the ops that
/// remake what is read after it, never the state writes or the random draws, whose outputs
/// stay resident.
#[test]
fn rotor_plans_of_real_exports_with_state_and_dropout_run_like_the_unplanned_run() {
    for (name, percent) in [
        ("mobilenet_v3_large", 95),
        ("efficientnet_b0", 90),
        ("densenet121", 97),
    ] {
        let g = real(name);
        let options = PlanOptions {
            strategy: Strategy::Rotor,
            budget: Some(g.memory_profile().peak * percent / 100),
            budget_of: sgc_plan::BudgetOf::Peak,
            ..Default::default()
        };
        let plan = sgc_plan::plan(&g, &options, &Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        sgc_plan::verify(&g, &plan).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(plan.steps.iter().any(|s| s.recompute), "{name}: recomputes");
        let mut base = common::unplanned(&g, CpuBackend::new()).unwrap();
        let expected = seeded_step(&g, &mut base);
        let mut ex = Executor::from_plan(&g, &plan, CpuBackend::new()).unwrap();
        let got = seeded_step(&g, &mut ex);
        assert_matches(&format!("{name} / rotor"), &expected, &got, None);
    }
}
