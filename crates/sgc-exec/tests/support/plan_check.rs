//! The check that the `plan_fuzz` proptest and the `plan` fuzz target (fuzz/) ask of a
//! training step: included by path by both (`#[path = ...] mod plan_check;`), so they
//! check the same things.
//!
//! For every strategy of [`Strategy::ALL`] and every budget of [`budgets`] (none; the
//! unplanned device bytes; halfway between the per-op lower bound and the unplanned peak;
//! the lower bound; as device bytes and as memory-model peaks), [`check_step`] plans the
//! graph and requires:
//! - the plan verifier accepts the plan, and its replay's peak equals the plan's peak;
//! - a device budget is kept by the arena plus persistent bytes, a peak budget by the peak;
//! - one step run on the CPU backend from the same seeded inputs and parameters gives
//!   every graph output (the loss, every gradient) and every updated parameter bit for bit
//!   as the unplanned run does;
//! - a plan that does not offload peaks at or above the least-peak lower bound
//!   (`sgc_plan::least_peak`), and one of a strategy that keeps graph outputs once made
//!   (every one but `optimal`) at or above the kept-outputs bound
//!   (`sgc_plan::peak_bounds`): the bounds the planner refuses budgets below before
//!   planning;
//! - a budget refused (`BudgetNotMet`) is one that the best plan found really exceeds, and
//!   one refused as below a lower bound (`BudgetBelowLowerBound`) is below it.
//!
//! Any other planner or executor error fails the check.

use sgc_exec::{CpuBackend, Executor, HostTensor};
use sgc_ir::{Graph, TensorKind};
use sgc_plan::{
    peak_bounds, plan, verify, BudgetOf, Plan, PlanError, PlanOptions, RunConfig, Strategy,
};

/// What [`check_step`] did with one graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Plans verified and run bit for bit like the unplanned run.
    pub ran: usize,
    /// Of those, plans that recompute at least one op.
    pub recomputing: usize,
    /// Budgets refused, each above the best plan found.
    pub refused: usize,
    /// Of `ran`, plans by `rotor` (on graphs that are chains in its sense).
    pub rotor: usize,
}

/// The seed of every run's inputs and parameters (and of the planners' searches).
pub const SEED: u64 = 7;

/// Plans `g` with every strategy and budget and checks each plan (module docs); the first
/// failure, described, as the error.
pub fn check_step(g: &Graph) -> Result<Tally, String> {
    let unplanned =
        plan_with(g, Strategy::None, None).map_err(|e| format!("the unplanned plan: {e}"))?;
    let want = run(g, &unplanned).map_err(|e| format!("the unplanned run: {e}"))?;
    let (least_peak, kept_outputs) = peak_bounds(g);
    let floor = Floors {
        least_peak: least_peak.bytes,
        kept_outputs: kept_outputs.bytes,
    };
    let mut tally = Tally::default();
    for strategy in Strategy::ALL {
        for budget in budgets(g, &unplanned) {
            let what = format!("{strategy}, budget {budget:?}");
            check_one(g, strategy, budget, floor, &want, &mut tally)
                .map_err(|e| format!("{what}: {e}"))?;
        }
    }
    // Rotor plans within a budget, and only chains: a graph that is not one is refused
    // by name.
    for budget in budgets(g, &unplanned).into_iter().flatten() {
        let what = format!("rotor, budget {budget:?}");
        check_one(g, Strategy::Rotor, Some(budget), floor, &want, &mut tally)
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(tally)
}

/// The budgets every strategy is asked for: none, and device and peak budgets between
/// the per-op lower bound and the unplanned plan.
pub fn budgets(g: &Graph, unplanned: &Plan) -> Vec<Option<(u64, BudgetOf)>> {
    let peak = unplanned.summary.planned_peak;
    let device = device_bytes(g, unplanned);
    let low = g.lower_bound().bytes;
    let mid = low + peak.saturating_sub(low) / 2;
    let mut all = vec![None, Some((device, BudgetOf::Device))];
    for b in [mid, low] {
        all.push(Some((b, BudgetOf::Device)));
        all.push(Some((b, BudgetOf::Peak)));
    }
    all
}

/// The graph's peak bounds: of every plan that keeps or recomputes, and of those that also
/// keep each graph output from when it is made.
#[derive(Clone, Copy)]
struct Floors {
    least_peak: u64,
    kept_outputs: u64,
}

/// One plan checked against the graph's bounds (`floor`).
fn check_one(
    g: &Graph,
    strategy: Strategy,
    budget: Option<(u64, BudgetOf)>,
    floor: Floors,
    want: &[(String, HostTensor)],
    tally: &mut Tally,
) -> Result<(), String> {
    let p = match plan_with(g, strategy, budget) {
        Ok(p) => p,
        Err(PlanError::BudgetNotMet {
            best_peak,
            best_device,
            budget: b,
            of,
            ..
        }) => {
            let best = match of {
                BudgetOf::Device => best_device.unwrap_or(best_peak),
                _ => best_peak,
            };
            tally.refused += 1;
            return match best > b {
                true => Ok(()),
                false => Err(format!("refused, yet the best plan found has {best}")),
            };
        }
        Err(PlanError::BudgetBelowLowerBound {
            budget: b,
            lower_bound,
            ..
        }) => {
            tally.refused += 1;
            return match b < lower_bound {
                true => Ok(()),
                false => Err(format!("refused as below the bound {lower_bound}")),
            };
        }
        Err(PlanError::NotAChain(_)) if strategy == Strategy::Rotor => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let verified = verify(g, &p).map_err(|e| format!("the verifier rejects the plan: {e:?}"))?;
    let keeps = sgc_plan::strategies::of(p.options.strategy).keeps_outputs();
    if keeps {
        runs_once_what_it_keeps(g, &p)?;
    }
    let (bound, name) = match keeps {
        true => (floor.kept_outputs, "kept-outputs"),
        false => (floor.least_peak, "least-peak"),
    };
    if p.offloads.is_empty() && p.summary.planned_peak < bound {
        return Err(format!(
            "the plan peaks at {}, below the {name} lower bound {bound}",
            p.summary.planned_peak
        ));
    }
    if verified.peak_bytes != p.summary.planned_peak {
        return Err(format!(
            "the plan's peak {} is not the replay's {}",
            p.summary.planned_peak, verified.peak_bytes
        ));
    }
    keeps_budget(g, &p, budget)?;
    let got = run(g, &p)?;
    same_bits(want, &got)?;
    tally.ran += 1;
    tally.recomputing += usize::from(p.steps.iter().any(|s| s.recompute));
    tally.rotor += usize::from(strategy == Strategy::Rotor);
    Ok(())
}

/// The kept-outputs bound's premise: a plan of a strategy that keeps graph outputs runs no
/// op twice whose every output is a graph output (or a view of one).
fn runs_once_what_it_keeps(g: &Graph, p: &Plan) -> Result<(), String> {
    let kept: std::collections::HashSet<_> =
        g.outputs().iter().map(|&t| g.storage_root(t)).collect();
    let mut runs = vec![0u32; g.num_ops()];
    for s in &p.steps {
        runs[s.op.index()] += 1;
    }
    for v in g.op_ids().filter(|&v| runs[v.index()] > 1) {
        let outputs = &g.op(v).outputs;
        let roots = outputs.iter().map(|&t| g.storage_root(t));
        if roots
            .clone()
            .all(|r| g.is_persistent(r) || kept.contains(&r))
            && roots.clone().any(|r| !g.is_persistent(r))
        {
            return Err(format!(
                "op `{}` runs {} times, yet it makes only graph outputs",
                g.op(v).name,
                runs[v.index()]
            ));
        }
    }
    Ok(())
}

fn keeps_budget(g: &Graph, p: &Plan, budget: Option<(u64, BudgetOf)>) -> Result<(), String> {
    let used = match budget {
        None => return Ok(()),
        Some((b, BudgetOf::Device)) => (b, device_bytes(g, p)),
        Some((b, _)) => (b, p.summary.planned_peak),
    };
    match used.1 <= used.0 {
        true => Ok(()),
        false => Err(format!("a plan of {} bytes for budget {}", used.1, used.0)),
    }
}

/// Arena plus persistent bytes: what a device budget bounds.
fn device_bytes(g: &Graph, p: &Plan) -> u64 {
    p.arena.as_ref().map_or(0, |a| a.size) + g.persistent_bytes()
}

/// The plan of `g` with `strategy` under `budget`, searches kept short (as
/// sgc-plan's plan_properties does) on one worker.
pub fn plan_with(
    g: &Graph,
    strategy: Strategy,
    budget: Option<(u64, BudgetOf)>,
) -> Result<Plan, PlanError> {
    let options = PlanOptions {
        strategy,
        seed: SEED,
        thresh_tries: 4,
        genetic_iters: 3,
        pool_size: 6,
        evictee_min_size: 0,
        budget: budget.map(|b| b.0),
        budget_of: budget.map_or(BudgetOf::Device, |b| b.1),
        ..PlanOptions::default()
    };
    let run = RunConfig {
        workers: Some(1),
        progress: None,
    };
    plan(g, &options, &run)
}

/// One step of `p` on the CPU backend from seeded values: every graph output and every
/// parameter afterwards, by name.
pub fn run(g: &Graph, p: &Plan) -> Result<Vec<(String, HostTensor)>, String> {
    let mut ex = Executor::from_plan(g, p, CpuBackend::new()).map_err(|e| e.to_string())?;
    ex.bind_seeded(SEED).map_err(|e| e.to_string())?;
    ex.run(1).map_err(|e| e.to_string())?;
    let params = g
        .tensor_ids()
        .filter(|&t| g.tensor(t).kind == TensorKind::Param);
    g.outputs()
        .iter()
        .copied()
        .chain(params)
        .map(|t| {
            let name = &g.tensor(t).name;
            let value = ex.read(name).map_err(|e| format!("reading {name}: {e}"))?;
            Ok((name.clone(), value))
        })
        .collect()
}

/// `got` is `want`, tensor by tensor, bit for bit.
fn same_bits(want: &[(String, HostTensor)], got: &[(String, HostTensor)]) -> Result<(), String> {
    for ((name, w), (_, g)) in want.iter().zip(got) {
        if !w.bits_eq(g) {
            return Err(format!("{name} differs from the unplanned run's"));
        }
    }
    Ok(())
}
