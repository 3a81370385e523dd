//! Trains a model of the zoo on a fixed synthetic batch for some steps, once with a
//! checkpointing plan (sublinear at its lowest peak: the tightest plan the search finds)
//! and once unplanned, prints both loss curves and checks that they are bitwise equal, and
//! prints the bytes each run allocated. Errors print as the command line prints them.
//!
//! `cargo run --example train_zoo [STEPS] [MODEL]` (MODEL: a zoo name, default
//! `tiny_transformer`, whose lowest-peak plan recomputes; `sgc zoo` lists them)

use sgc::exec::{CpuBackend, Executor};
use sgc::plan::{PlanOptions, Strategy};
use std::process::ExitCode;

/// What a run of the example measured.
pub struct Trained {
    pub planned: Vec<f32>,
    pub unplanned: Vec<f32>,
    pub recompute_steps: usize,
}

fn main() -> ExitCode {
    let steps = match std::env::args()
        .nth(1)
        .map_or(Ok(30), |s| s.parse::<usize>())
    {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: STEPS: {e}");
            return ExitCode::FAILURE;
        }
    };
    let model = std::env::args()
        .nth(2)
        .unwrap_or_else(|| "tiny_transformer".to_string());
    match train(&model, steps) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Plans the zoo model `name`, trains both runs for `steps` steps, prints them; an error
/// when the curves differ.
pub fn train(name: &str, steps: usize) -> Result<Trained, Box<dyn std::error::Error>> {
    let models = sgc::ir::zoo::models();
    let names: Vec<&str> = models.iter().map(|m| m.name).collect();
    let model = models
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| format!("the zoo has no model `{name}`: one of {}", names.join(", ")))?;
    let graph = (model.build)();
    // Without a budget, sublinear plans for the lowest peak it can reach (below the
    // unplanned peak, at the price of recomputation).
    let options = PlanOptions {
        strategy: Strategy::Sublinear,
        genetic_iters: sgc::defaults::GENETIC_ITERS,
        ..Default::default()
    };
    let plan = sgc::plan::plan(&graph, &options, &Default::default())?;

    let mut planned = Executor::from_plan(&graph, &plan, CpuBackend::new())?;
    let mut unplanned = sgc::runner::unplanned(&graph, CpuBackend::new())?;
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
    Ok(Trained {
        planned: a,
        unplanned: b,
        recompute_steps: rp.recompute_steps,
    })
}
