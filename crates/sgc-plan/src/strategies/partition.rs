//! `partition`: a forward/backward partition, as `torch.compile` makes ([`crate::partition`]):
//! the forward runs once, a set of its tensors is kept for the backward and the rest is
//! recomputed there, the set chosen by parametric minimum cut over bytes kept and recompute
//! cost.

use super::{original, pool, Name, Scheduled, Strategy};
use crate::budget;
use crate::context::Context;
use crate::error::PlanError;
use crate::offload_search;
use crate::options::{BudgetOf, PlanOptions, RunConfig};

pub struct Partition;

impl Strategy for Partition {
    fn name(&self) -> Name {
        Name::Partition
    }

    fn about(&self) -> &'static str {
        "a forward/backward partition (torch.compile's shape) chosen by minimum cut"
    }

    fn reads(&self) -> &'static [&'static str] {
        &["host_link", "host_memory"]
    }

    fn budget_kinds(&self) -> &'static [BudgetOf] {
        &[BudgetOf::Device, BudgetOf::Peak, BudgetOf::Saved]
    }

    fn searches_budget(&self) -> bool {
        true
    }

    fn can_offload(&self) -> bool {
        true
    }

    fn schedule(
        &self,
        ctx: &Context<'_>,
        options: &PlanOptions,
        run: &RunConfig<'_>,
    ) -> Result<Scheduled, PlanError> {
        plan(ctx, options, run)
    }
}

/// The `partition` strategy ([`crate::partition`]): with a budget, the candidate that recomputes
/// least within it (bytes kept for the backward, device bytes or peak), or with a host link
/// the fastest of those made to fit by offloads ([`offload_search`]); without one, the
/// lowest peak.
fn plan(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<Scheduled, PlanError> {
    let pool = pool(run)?;
    let cands = crate::partition::candidates(ctx, &pool).map_err(|e| {
        PlanError::Partition(match e {
            crate::partition::Unpartitionable::NoBackward => "the graph has no backward op (no op has phase \"backward\" and none can be inferred from a loss): export the whole training step, or use another --strategy".to_string(),
            crate::partition::Unpartitionable::NoSchedule => "no set of forward tensors kept for the backward gives a schedule that can run (ops that may not run again read state written in place): use another --strategy".to_string(),
        })
    })?;
    let Some(limit) = options.budget else {
        let best = cands.into_iter().min_by_key(|c| (c.peak, c.units, c.saved));
        return Ok(Scheduled::of(
            best.map(|c| c.steps).unwrap_or_else(|| original(ctx)),
        ));
    };
    if options.budget_of == BudgetOf::Saved {
        let lowest = cands.iter().map(|c| c.saved).min().unwrap_or(0);
        return cands
            .into_iter()
            .filter(|c| c.saved <= limit)
            .min_by_key(|c| (c.units, c.peak, c.saved))
            .map(|c| Scheduled::of(c.steps))
            .ok_or(PlanError::SavedBudgetNotMet {
                budget: limit,
                lowest,
            });
    }
    let steps: Vec<budget::Candidate> = cands
        .into_iter()
        .map(|c| budget::Candidate::of_steps(c.steps, c.peak, c.units, Name::Partition))
        .collect();
    let choose = |b: u64| budget::choose_among(ctx, options, &steps, b);
    let (chosen, offloads) = offload_search::choose_with_offloads(ctx, options, choose, limit)?;
    Ok(Scheduled {
        offloads,
        ..Scheduled::of(chosen.steps)
    })
}
