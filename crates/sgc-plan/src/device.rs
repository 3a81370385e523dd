//! Device bytes of a schedule: what `sgc run` allocates for it (the arena plus the
//! persistent bytes), placed ([`device_bytes`]) or bounded from below without placing
//! ([`device_floor`]).

use crate::context::Context;
use crate::{arena, Plan, PlanError, PlanOptions};
use sgc_ir::OpId;

/// Device bytes of a schedule: its arena (at `opts.align`, the planner's allocator effort)
/// plus the persistent bytes.
pub(crate) fn device_bytes(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    steps: &[(OpId, bool)],
) -> Result<u64, PlanError> {
    let (ops, plan) = assembled(ctx, opts, steps)?;
    let layout = arena::assign(
        ctx.g,
        &ops,
        &plan.lifetimes,
        opts.align,
        opts.arena_effort.effort(),
    )?;
    Ok(layout.size.saturating_add(ctx.g.persistent_bytes()))
}

/// The fewest device bytes any arena of a schedule could take ([`arena::floor`]) plus the
/// persistent bytes: [`device_bytes`] without placing.
pub(crate) fn device_floor(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    steps: &[(OpId, bool)],
) -> Result<u64, PlanError> {
    let (ops, plan) = assembled(ctx, opts, steps)?;
    let floor = arena::floor(ctx.g, &ops, &plan.lifetimes, opts.align);
    Ok(floor.saturating_add(ctx.g.persistent_bytes()))
}

/// A schedule's ops and its plan (the lifetimes an arena places).
fn assembled(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    steps: &[(OpId, bool)],
) -> Result<(Vec<OpId>, Plan), PlanError> {
    let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
    let profile = sgc_ir::simulate(ctx.g, &ops).map_err(|e| PlanError::Internal {
        strategy: opts.strategy.to_string(),
        message: e.to_string(),
    })?;
    let plan = Plan::assemble(ctx.g, opts, steps, &profile);
    Ok((ops, plan))
}
