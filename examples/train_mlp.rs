//! Trains the tiny MLP of the zoo on a fixed synthetic batch for some steps, once with a
//! checkpointing plan (sublinear, the tightest budget it meets) and once unplanned, prints both loss curves and checks that they
//! are bitwise equal, and prints the bytes each run allocated.
//!
//! `cargo run --example train_mlp [STEPS]`

use sgc::exec::{CpuBackend, Executor};
use sgc::plan::{PlanOptions, Strategy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: usize = std::env::args().nth(1).map_or(Ok(30), |s| s.parse())?;
    let model = sgc::ir::zoo::models()
        .into_iter()
        .find(|m| m.name == "tiny_mlp")
        .ok_or("the zoo has no tiny_mlp")?;
    let graph = (model.build)();
    // Ask for the lower bound; the planner answers with the best peak it can reach,
    // which is below the unplanned peak and takes recomputation: plan for that.
    let with_budget = |budget| PlanOptions {
        strategy: Strategy::Sublinear,
        budget: Some(budget),
        ..Default::default()
    };
    let plan = match sgc::plan::plan(
        &graph,
        &with_budget(graph.lower_bound().bytes),
        &Default::default(),
    ) {
        Err(sgc::plan::PlanError::BudgetNotMet { best_peak, .. }) => {
            sgc::plan::plan(&graph, &with_budget(best_peak), &Default::default())?
        }
        other => other?,
    };

    let mut planned = Executor::from_plan(&graph, &plan, CpuBackend::new())?;
    let mut unplanned = Executor::unplanned(&graph, CpuBackend::new())?;
    planned.bind_seeded(42)?;
    unplanned.bind_seeded(42)?;
    let a = planned.run(steps)?;
    let b = unplanned.run(steps)?;

    println!("step  planned loss  unplanned loss");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        println!(
            "{:>4}  {x:>12.6}  {y:>14.6}{}",
            i + 1,
            if x.to_bits() == y.to_bits() {
                ""
            } else {
                "  DIFFERENT"
            }
        );
    }
    let equal = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
    let (rp, ru) = (planned.report(), unplanned.report());
    println!(
        "curves bitwise equal: {equal}; loss {:.6} -> {:.6}",
        b.first().copied().unwrap_or(f32::NAN),
        b.last().copied().unwrap_or(f32::NAN)
    );
    println!(
        "allocated: planned {} B (model peak {} B, {} recomputed ops per step), unplanned {} B (model peak {} B)",
        rp.allocator.peak_bytes,
        rp.model_peak_bytes,
        rp.recompute_steps,
        ru.allocator.peak_bytes,
        ru.model_peak_bytes
    );
    if !equal {
        return Err("the planned loss curve differs from the unplanned one".into());
    }
    Ok(())
}
