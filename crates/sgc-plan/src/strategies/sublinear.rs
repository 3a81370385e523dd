//! `sublinear`: MegEngine's split-point search ([`crate::sublinear`]: thresholds, then
//! genetic refinement); with a budget, the plan recomputing least among the
//! budget-independent candidates ([`crate::budget`]) whose device bytes fit, or with a host
//! link the fastest of those made to fit by offloads ([`crate::offload_search`]).

use super::{original, pool, unbudgeted, Name, Scheduled, Strategy};
use crate::budget;
use crate::context::Context;
use crate::error::{PlanError, Retry};
use crate::offload_search;
use crate::options::{Goal, PlanOptions, RunConfig};
use crate::sublinear::evaluate::{self, schedule};
use crate::sublinear::search::{Evaluator, SearchStats};

pub struct Sublinear;

impl Strategy for Sublinear {
    fn name(&self) -> Name {
        Name::Sublinear
    }

    fn about(&self) -> &'static str {
        "threshold search plus genetic refinement over split points (MegEngine's method)"
    }

    fn when_refused(&self, _options: &PlanOptions) -> Retry {
        Retry::Search
    }

    fn reads(&self) -> &'static [&'static str] {
        &[
            "lb_memory",
            "goal",
            "thresh_tries",
            "genetic_iters",
            "pool_size",
            "host_link",
            "host_memory",
        ]
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
        let (chosen, offloads, search) = plan(ctx, options, run)?;
        Ok(Scheduled {
            steps: chosen.steps,
            offloads,
            follows: (chosen.strategy != Name::Sublinear).then_some(chosen.strategy),
            search: Some(search),
            ..Scheduled::default()
        })
    }
}

/// The budget-independent candidate set of the search ([`budget`]), for a sweep of budgets.
pub(crate) fn candidates(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<budget::Candidates, PlanError> {
    let pool = pool(run)?;
    let mut ev = Evaluator::new(ctx, &pool, run.progress);
    let (best, fit) = crate::sublinear::best(&mut ev, &unbudgeted(options));
    Ok(budget::candidates(&mut ev, options, &best, fit.peak))
}

/// The search; with a budget, the cheapest plan of the budget-independent candidate set
/// whose device bytes fit it.
pub(crate) fn plan(
    ctx: &Context<'_>,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(budget::Chosen, Vec<sgc_ir::Offload>, SearchStats), PlanError> {
    let pool = pool(run)?;
    let mut ev = Evaluator::new(ctx, &pool, run.progress);
    if options.goal == Goal::Balanced {
        ev.objective.balance = Some(evaluate::Balance::of(ctx));
    }
    // The search never sees the budget: with one, it only selects among the candidates
    // that the unbudgeted search and the fixed ladder made, so that a larger budget never
    // costs more recompute.
    let (best, fit) = crate::sublinear::best(&mut ev, &unbudgeted(options));
    let Some(limit) = options.budget else {
        let steps = schedule(ctx, &best).unwrap_or_else(|| original(ctx));
        let chosen = budget::Chosen {
            steps,
            strategy: Name::Sublinear,
        };
        return Ok((chosen, Vec::new(), ev.stats));
    };
    let cands = budget::candidates(&mut ev, options, &best, fit.peak);
    // The budget selects among the candidates; the unbudgeted pick's trade is not the plan's.
    let stats = SearchStats {
        traded_from: None,
        before_fixed_peak: None,
        ..ev.stats
    };
    let choose = |b: u64| budget::choose(ctx, options, &cands, b);
    let (chosen, offloads) = offload_search::choose_with_offloads(ctx, options, choose, limit)?;
    Ok((chosen, offloads, stats))
}
