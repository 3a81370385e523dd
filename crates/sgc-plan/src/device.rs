//! Device bytes of a schedule: what `sgc run` allocates for it (the arena plus the
//! persistent bytes), placed ([`device_bytes`]) or bounded from below without placing
//! ([`device_floor`]).

use crate::arena;
use crate::context::Context;
use crate::error::PlanError;
use crate::options::PlanOptions;
use sgc_ir::{Graph, OpId};
use sgc_plan_format::plan::{ArenaLayout, Lifetime};

/// Device bytes of a schedule: its arena (at `opts.align`, the planner's allocator effort)
/// plus the persistent bytes.
pub(crate) fn device_bytes(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    steps: &[(OpId, bool)],
) -> Result<u64, PlanError> {
    let (ops, lifetimes) = lifetimes(ctx, opts, steps)?;
    let layout = place(ctx.g, &ops, &lifetimes, opts)?;
    Ok(layout.size.saturating_add(ctx.g.persistent_bytes()))
}

/// The arena of a schedule's `lifetimes`, placed at `opts.align` with the planner's
/// allocator effort.
pub(crate) fn place(
    graph: &Graph,
    ops: &[OpId],
    lifetimes: &[Lifetime],
    opts: &PlanOptions,
) -> Result<ArenaLayout, PlanError> {
    arena::assign(graph, ops, lifetimes, opts.align, opts.arena_effort.into())
}

/// The fewest device bytes any arena of a schedule could take ([`arena::floor`]) plus the
/// persistent bytes: [`device_bytes`] without placing.
pub(crate) fn device_floor(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    steps: &[(OpId, bool)],
) -> Result<u64, PlanError> {
    let (ops, lifetimes) = lifetimes(ctx, opts, steps)?;
    let floor = arena::floor(ctx.g, &ops, &lifetimes, opts.align);
    Ok(floor.saturating_add(ctx.g.persistent_bytes()))
}

/// A schedule's ops and the storage lifetimes an arena places (those of its plan).
fn lifetimes(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    steps: &[(OpId, bool)],
) -> Result<(Vec<OpId>, Vec<Lifetime>), PlanError> {
    let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
    let profile = sgc_ir::simulate(ctx.g, &ops).map_err(|e| PlanError::Internal {
        strategy: opts.strategy.to_string(),
        message: e.to_string(),
    })?;
    let lifetimes = profile.instances.iter().map(Lifetime::from).collect();
    Ok((ops, lifetimes))
}
