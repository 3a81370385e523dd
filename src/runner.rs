//! Plan, then run. The executor (`sgc-exec`) runs verified plans and makes none: it
//! depends on the plan format and its verifier, not on the planner. These two calls are
//! the convenience on top: [`unplanned`] makes the plan of strategy `none` (the traced
//! order, every storage freed after its last use, placed in one arena) and runs it;
//! [`planned`] runs a given plan, placing its arena first when it was made without one.
//! Unplanned and planned runs go through the same executor and the same verifier.

use sgc_exec::{Backend, ExecError, Executor};
use sgc_ir::{Graph, OpId};
use sgc_plan::{Plan, PlanError, PlanOptions, Strategy};

/// Why a graph could not be planned or its plan not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// The plan of the unplanned step: strategy `none`, default options (its arena placed).
pub fn unplanned_plan(graph: &Graph) -> Result<Plan, PlanError> {
    let options = PlanOptions {
        strategy: Strategy::None,
        ..Default::default()
    };
    sgc_plan::plan(graph, &options, &Default::default())
}

/// The executor of the unplanned step ([`unplanned_plan`]) on `backend`.
pub fn unplanned<B: Backend>(graph: &Graph, backend: B) -> Result<Executor<B>, RunError> {
    let plan = unplanned_plan(graph)?;
    Ok(Executor::from_plan(graph, &plan, backend)?)
}

/// The executor of `plan` on `backend`; a plan made without an arena (`arena: false`) is
/// placed first by the planner's allocator at the plan's alignment.
pub fn planned<B: Backend>(
    graph: &Graph,
    plan: &Plan,
    backend: B,
) -> Result<Executor<B>, RunError> {
    if plan.arena.is_some() {
        return Ok(Executor::from_plan(graph, plan, backend)?);
    }
    plan.check_graph(graph).map_err(PlanError::from)?;
    let ops: Vec<OpId> = plan.steps.iter().map(|s| s.op).collect();
    let mut placed = plan.clone();
    placed.arena = Some(sgc_plan::arena::assign(
        graph,
        &ops,
        &plan.lifetimes,
        plan.options.align,
        sgc_plan::alloc::Effort::PLAN,
    )?);
    Ok(Executor::from_plan(graph, &placed, backend)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sgc_exec::CpuBackend;

    fn losses(mut ex: Executor<CpuBackend>) -> Vec<u32> {
        ex.bind_seeded(7).unwrap();
        ex.run(3).unwrap().iter().map(|l| l.to_bits()).collect()
    }

    /// A plan made without an arena runs once placed, with the losses of the unplanned run.
    #[test]
    fn a_plan_without_an_arena_is_placed_and_runs_as_unplanned() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/graphs/tiny_mlp.json");
        let g = sgc_ir::format::load(path).unwrap();
        let mut plan = unplanned_plan(&g).unwrap();
        plan.arena = None;
        let refused = Executor::from_plan(&g, &plan, CpuBackend::new()).err();
        assert!(matches!(refused, Some(ExecError::NoArena)), "{refused:?}");
        let placed = planned(&g, &plan, CpuBackend::new()).unwrap();
        let base = unplanned(&g, CpuBackend::new()).unwrap();
        assert_eq!(losses(placed), losses(base));
    }
}
