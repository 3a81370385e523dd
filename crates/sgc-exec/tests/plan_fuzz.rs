//! Property (issue 49): random training steps (`sgc_ir::testgen::random_train_graph`:
//! chains, DAGs with skips, views, in-place updates, dropout, multi-output ops) planned with
//! every strategy under every budget of `support/plan_check.rs` verify, keep their budget,
//! and run bit for bit like the unplanned run on the CPU backend. The fuzz target
//! `fuzz/fuzz_targets/plan.rs` runs the same check on graphs drawn from its bytes.

#[path = "support/plan_check.rs"]
mod plan_check;

use plan_check::{check_step, Tally};
use proptest::prelude::*;
use sgc_ir::ops::OpKind;
use sgc_ir::testgen::{random_train_graph, TrainGenConfig};
use sgc_ir::{OpId, Phase};

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn planned_steps_verify_and_run_like_the_unplanned_step(seed in any::<u64>()) {
        let g = random_train_graph(seed, &TrainGenConfig::default());
        let tally = check_step(&g).map_err(TestCaseError::fail)?;
        // `none` without a budget always plans: at least one plan ran.
        prop_assert!(tally.ran > 0);
    }
}

/// The check runs plans that recompute, and refuses budgets, on the generator's graphs:
/// over 16 seeds, some of each (else the property above would check little), and rotor
/// plans some chains with dropout in their forward (ops that may not run again).
#[test]
fn the_check_sees_recomputation_and_refusals() {
    let mut total = Tally::default();
    // Rotor's plans of graphs with an op that may not run again (dropout) in the forward.
    let mut rotor_fixed = 0;
    for seed in 0..16 {
        let g = random_train_graph(seed, &TrainGenConfig::default());
        let t = check_step(&g).unwrap();
        total.ran += t.ran;
        total.recomputing += t.recomputing;
        total.refused += t.refused;
        total.rotor += t.rotor;
        let fixed = g
            .op_ids()
            .any(|o| g.phase(o) == Some(Phase::Forward) && !g.op(o).recomputable);
        rotor_fixed += if fixed { t.rotor } else { 0 };
    }
    println!("seeds 0..16: {total:?}; rotor on graphs with dropout: {rotor_fixed}");
    assert!(total.recomputing > 0 && total.refused > 0, "{total:?}");
    assert!(
        rotor_fixed > 0,
        "rotor planned no chain with dropout: {total:?}"
    );
}

/// Over 64 seeds the generator makes every feature the property is about: views,
/// dropout (an op that may not run again), ops with several outputs, skip connections (an
/// activation read by forward ops that are not consecutive) and in-place updates.
#[test]
fn the_generator_makes_every_feature() {
    let mut seen = [false; 5];
    for seed in 0..64 {
        let g = random_train_graph(seed, &TrainGenConfig::default());
        for t in g.tensor_ids() {
            seen[0] |= g.tensor(t).alias_of.is_some();
            let readers: Vec<OpId> = (g.consumers(t).iter().copied())
                .filter(|&o| g.phase(o) == Some(Phase::Forward))
                .collect();
            seen[3] |= readers.windows(2).any(|w| w[1].index() > w[0].index() + 1);
        }
        for o in g.op_ids() {
            let op = g.op(o);
            seen[1] |= op.kind == Some(OpKind::AtenDropout) && !op.recomputable;
            seen[2] |= op.outputs.len() > 1;
            seen[4] |= op.kind == Some(OpKind::SgdUpdate);
        }
    }
    assert_eq!(seen, [true; 5]);
}
