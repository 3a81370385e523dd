//! The planner's entry points: check the options, build the per-graph [`Context`], run the
//! strategy ([`crate::run`]) for a schedule, and turn that schedule into a [`Plan`]: its
//! summary, its arena (checked against the budget) and the verifier's verdict. Every plan
//! that leaves this module has passed [`verify`].

use crate::bound::{Bound, BoundMethod};
use crate::budget;
use crate::context::Context;
use crate::device;
use crate::error::{Floor, LowerBoundKind, PlanError};
use crate::offload;
use crate::offload_search;
use crate::options::{BudgetOf, PlanOptions, RunConfig, Strategy};
use crate::strategies;
use crate::sublinear::search::SearchStats;
use sgc_ir::{Graph, MemoryProfile, Offload, OpId};
use sgc_plan_format::plan::{self, Plan};
use sgc_plan_format::verify::verify;

/// Makes a plan for `graph` and verifies it.
pub fn plan(graph: &Graph, options: &PlanOptions, run: &RunConfig<'_>) -> Result<Plan, PlanError> {
    plan_with_stats(graph, options, run).map(|p| p.0)
}

/// The plan of an explicit schedule, `ops` in order (every run of an op after its first is
/// a recomputation): every storage freed after its last use, the arena placed by the
/// planner's allocator (unless `options.arena` is off), the summary computed, and the whole
/// verified. For tools and tests that choose their own order: what the executor runs is
/// always a plan. The verifier applies `options.strategy`'s rules (a split-based strategy
/// may recompute an op once; `dtr` any number of times).
pub fn plan_schedule(
    graph: &Graph,
    options: &PlanOptions,
    ops: &[OpId],
) -> Result<Plan, PlanError> {
    plan_schedule_offloaded(graph, options, ops, &[])
}

/// [`plan_schedule`] with storages offloaded to host memory and back
/// ([`sgc_ir::Offload`]); `options.host_link` prices the copies (required when
/// `offloads` is not empty).
pub fn plan_schedule_offloaded(
    graph: &Graph,
    options: &PlanOptions,
    ops: &[OpId],
    offloads: &[sgc_ir::Offload],
) -> Result<Plan, PlanError> {
    let profile = sgc_ir::simulate_offloaded(graph, ops, offloads)?;
    let mut seen = vec![false; graph.num_ops()];
    let steps: Vec<(OpId, bool)> = ops
        .iter()
        .map(|&op| (op, std::mem::replace(&mut seen[op.index()], true)))
        .collect();
    let mut plan = assemble(graph, options, &steps, offloads, &profile)?;
    if options.arena {
        let layout = device::place(graph, ops, &plan.lifetimes, options)?;
        plan.arena = Some(layout);
    }
    verify(graph, &plan).map_err(|violations| PlanError::Rejected {
        strategy: format!("{} (explicit schedule)", options.strategy),
        violations,
    })?;
    Ok(plan)
}

/// What making a plan took (nothing here is part of the plan).
#[derive(Clone, Debug, Default)]
pub struct PlanStats {
    /// The sublinear search's work (`None` for the other strategies).
    pub search: Option<SearchStats>,
    /// Wall time of choosing the schedule (the search, for `sublinear`).
    pub schedule_secs: f64,
    /// Wall time of placing the arena.
    pub arena_secs: f64,
    /// Why the strategy fell back to the traced order, when it did (`dtr` only).
    pub fallback: Option<String>,
    /// The strategy whose candidate met a `sublinear` budget when it is another's: static
    /// DTR's eviction plan (`dtr`) or partition's kept set (`partition`), the candidate
    /// recomputing least whose device bytes fit (the plan's strategy is then that one).
    pub met_by: Option<Strategy>,
    /// What the solver proved (`optimal` only).
    pub optimal: Option<crate::optimal::OptimalStats>,
}

/// [`plan()`], with what the planner did and how long its phases took.
pub fn plan_with_stats(
    graph: &Graph,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(Plan, PlanStats), PlanError> {
    plan_by(graph, strategies::of(options.strategy), options, run)
}

/// [`plan_with_stats`] by `strategy`, registered or not (`options.strategy` is ignored; the
/// plan records the strategy's name): every strategy's schedule is made into a plan here.
pub fn plan_by(
    graph: &Graph,
    strategy: &dyn strategies::Strategy,
    options: &PlanOptions,
    run: &RunConfig<'_>,
) -> Result<(Plan, PlanStats), PlanError> {
    let options = &PlanOptions {
        strategy: strategy.name(),
        ..options.clone()
    };
    check_options(strategy, options)?;
    let mut stats = PlanStats::default();
    let start = std::time::Instant::now();
    let ctx = Context::with_profile(graph, options.device_profile.as_ref());
    let budget = options
        .budget
        .filter(|_| options.budget_of != BudgetOf::Saved);
    let floor = budget.and_then(|_| floor(&ctx, strategy, options));
    if let Some(budget) = budget {
        below_bound(&ctx, budget)?;
        crate::least_peak::below_floor(&ctx, budget, floor)?;
    }
    let made = strategy
        .schedule(&ctx, options, run)
        .map_err(|e| e.retrying(strategy.when_refused(options)).bounded_by(floor))?;
    stats.search = made.search;
    stats.fallback = made.fallback;
    stats.optimal = made.optimal;
    stats.met_by = made.follows;
    let strategy = made.follows.unwrap_or(options.strategy);
    let (steps, offloads) = (made.steps, made.offloads);
    stats.schedule_secs = start.elapsed().as_secs_f64();
    let plan = finish_plan(&ctx, options, strategy, &steps, &offloads, &mut stats)
        .map_err(|e| e.bounded_by(floor))?;
    Ok((plan, stats))
}

/// Plans for every budget in `budgets` (`options.budget` is ignored): the plan
/// [`plan()`] makes with that budget, or why there is none ([`BudgetSweep`]: one search,
/// then an arena per budget).
pub fn plan_budgets(
    graph: &Graph,
    options: &PlanOptions,
    budgets: &[u64],
    run: &RunConfig<'_>,
) -> Result<Vec<Result<Plan, PlanError>>, PlanError> {
    let sweep = BudgetSweep::new(graph, options, run)?;
    Ok(budgets.iter().map(|&b| sweep.plan(b)).collect())
}

/// `sublinear`'s candidate set, built once and planned at any number of budgets. Only
/// `sublinear` takes budgets this way: its candidate set does not depend on the budget
/// (see `budget.rs`), so every budget selects from the same set: the plans are those of
/// separate [`plan()`] calls, recompute never rises as the budget grows, and a sweep of
/// many budgets costs one search plus the arenas.
pub struct BudgetSweep<'g> {
    ctx: Context<'g>,
    options: PlanOptions,
    cands: budget::Candidates,
    floor: Option<Floor>,
}

impl<'g> BudgetSweep<'g> {
    /// The search of `options` (`options.budget` is ignored), for budgets to come.
    pub fn new(
        graph: &'g Graph,
        options: &PlanOptions,
        run: &RunConfig<'_>,
    ) -> Result<Self, PlanError> {
        check_options(strategies::of(options.strategy), options)?;
        if options.strategy != Strategy::Sublinear {
            return Err(PlanError::InvalidOption(format!(
                "a sweep of budgets plans with sublinear, not {}",
                options.strategy
            )));
        }
        let ctx = Context::with_profile(graph, options.device_profile.as_ref());
        let cands = strategies::sublinear_candidates(&ctx, options, run)?;
        let floor = floor(&ctx, strategies::of(options.strategy), options);
        Ok(BudgetSweep {
            ctx,
            options: options.clone(),
            cands,
            floor,
        })
    }

    /// The plan [`plan()`] makes with `budget` (in the terms of `options.budget_of`), or
    /// why there is none.
    pub fn plan(&self, budget: u64) -> Result<Plan, PlanError> {
        let (ctx, floor) = (&self.ctx, self.floor);
        let o = PlanOptions {
            budget: Some(budget),
            ..self.options.clone()
        };
        below_bound(ctx, budget)?;
        crate::least_peak::below_floor(ctx, budget, floor)?;
        let choose = |level: u64| budget::choose(ctx, &o, &self.cands, level);
        let (chosen, offloads) = offload_search::choose_with_offloads(ctx, &o, choose, budget)
            .map_err(|e| e.retrying(strategies::when_refused(&o)).bounded_by(floor))?;
        finish_plan(
            ctx,
            &o,
            chosen.strategy,
            &chosen.steps,
            &offloads,
            &mut PlanStats::default(),
        )
        .map_err(|e| e.bounded_by(floor))
    }

    /// The least device bytes (arena plus persistent) of the plans the set holds, without
    /// offloads: plans placed by increasing peak until one's peak, less the largest
    /// in-place saving, exceeds the least found. A device budget of these bytes is met;
    /// `None` when no plan could be placed.
    pub fn lowest_device_bytes(&self) -> Option<u64> {
        budget::lowest_device(&self.ctx, &self.options, &self.cands)
    }
}

/// The best lower bound sgc can prove on the recompute of any plan of `graph` within the
/// peak of `plan` (ops costed as in it): the cut bound ([`crate::bound`](mod@crate::bound))
/// and, for a graph small enough for the `optimal` strategy's program (and with its solver
/// built), that program's linear relaxation, solved within 5 s; the larger. It covers plans that keep
/// or recompute with first runs in the traced order, which is every plan sgc makes without
/// offloads; a plan with offloads or another order is refused.
pub fn bound(graph: &Graph, plan: &Plan) -> Result<Bound, PlanError> {
    if !plan.offloads.is_empty() {
        return Err(PlanError::InvalidOption(
            "--bound covers plans that keep or recompute; this plan offloads (plan with --no-offload for one it covers)".into(),
        ));
    }
    for (next, s) in plan.steps.iter().filter(|s| !s.recompute).enumerate() {
        if s.op.index() != next {
            return Err(PlanError::InvalidOption(format!(
                "--bound covers plans whose ops first run in the traced order; this plan runs `{}` first where the graph has `{}`",
                graph.op(s.op).name,
                graph.op(OpId::new(next)).name
            )));
        }
    }
    let ctx = Context::with_profile(graph, plan.options.device_profile.as_ref());
    let peak = plan.summary.planned_peak;
    let cut = crate::bound::cut(&ctx, peak);
    let relaxed = crate::optimal::relaxation(&ctx, peak, 5);
    Ok(match relaxed {
        Some(r) if r > cut.recompute => Bound {
            recompute: r,
            method: BoundMethod::Relaxation,
            at_op: None,
        },
        _ => cut,
    })
}

/// A budget below the per-op lower bound, refused with the op that sets the bound.
pub(crate) fn below_bound(ctx: &Context<'_>, budget: u64) -> Result<(), PlanError> {
    let lb = ctx.lower_bound;
    if budget < lb.bytes {
        return Err(PlanError::BudgetBelowLowerBound {
            budget,
            lower_bound: lb.bytes,
            op: lb.op.map(|o| ctx.g.op(o).name.clone()).unwrap_or_default(),
            kind: crate::error::LowerBoundKind::PerOp,
        });
    }
    Ok(())
}

/// The least-peak lower bound of `graph` ([`crate::least_peak`]), persistent bytes
/// included, and the op that sets it: no plan that keeps or recomputes (without offloads)
/// peaks below it under the memory model. A budget below it is refused before any strategy
/// runs.
pub fn least_peak(graph: &Graph) -> sgc_ir::LowerBound {
    crate::least_peak::least_peak(&Context::with_profile(graph, None))
}

/// The graph's two peak bounds, persistent bytes included: the least-peak bound
/// ([`least_peak`]), and the kept-outputs bound of plans that keep each graph output from
/// when it is made, as every strategy but `optimal` does
/// (`least_peak.rs`, docs/method.md): the least-peak bound, or more where graph
/// outputs made before an op (the gradients done so far) raise it.
pub fn peak_bounds(graph: &Graph) -> (sgc_ir::LowerBound, sgc_ir::LowerBound) {
    let ctx = Context::with_profile(graph, None);
    let least = crate::least_peak::least_peak(&ctx);
    (least, crate::least_peak::kept_outputs_peak(&ctx, least).0)
}

/// The lower bound on the peak of every plan `strategy` can make of `graph` without
/// offloads, persistent bytes included, and which bound it is: the kept-outputs bound for a
/// strategy that keeps graph outputs once made (every one but `optimal`), else
/// [`least_peak`]. The bound `sgc plan --bound` prints beside a plan's peak.
pub fn peak_bound_of(graph: &Graph, strategy: Strategy) -> (sgc_ir::LowerBound, LowerBoundKind) {
    peak_floor(
        &Context::with_profile(graph, None),
        strategies::of(strategy),
    )
}

/// [`peak_bound_of`] on a context.
fn peak_floor(
    ctx: &Context<'_>,
    strategy: &dyn strategies::Strategy,
) -> (sgc_ir::LowerBound, LowerBoundKind) {
    let least = crate::least_peak::least_peak(ctx);
    if strategy.keeps_outputs() {
        crate::least_peak::kept_outputs_peak(ctx, least)
    } else {
        (least, LowerBoundKind::LeastPeak)
    }
}

/// The least-peak lower bound ([`crate::least_peak`]) in device bytes (arena plus
/// persistent bytes, as `sgc fit` and a device budget count them): the bound less the
/// largest in-place saving of one op (`budget::in_place_slack`). No plan that keeps or
/// recomputes needs fewer device bytes.
pub fn least_device_bytes(graph: &Graph) -> sgc_ir::LowerBound {
    let ctx = Context::with_profile(graph, None);
    in_device_terms(&ctx, crate::least_peak::least_peak(&ctx))
}

/// The kept-outputs lower bound (`least_peak.rs`, docs/method.md) in device bytes,
/// as [`least_device_bytes`] gives the least-peak one: no plan that keeps or recomputes and
/// keeps each graph output from when it is made (every strategy's but `optimal`'s, without
/// offloads) needs fewer device bytes.
pub fn kept_device_bytes(graph: &Graph) -> sgc_ir::LowerBound {
    let ctx = Context::with_profile(graph, None);
    let least = crate::least_peak::least_peak(&ctx);
    in_device_terms(&ctx, crate::least_peak::kept_outputs_peak(&ctx, least).0)
}

/// A lower bound on the memory-model peak as one on device bytes: less the largest
/// in-place saving of one op, which the arena may pack below the peak.
fn in_device_terms(ctx: &Context<'_>, peak: sgc_ir::LowerBound) -> sgc_ir::LowerBound {
    sgc_ir::LowerBound {
        bytes: peak.bytes.saturating_sub(budget::in_place_slack(ctx)),
        ..peak
    }
}

/// The lower bound on the peak of every plan `strategy` can make, in the terms of
/// `options`' budget: the kept-outputs bound (`least_peak.rs`, docs/method.md) for
/// a strategy that keeps graph outputs once made, else the least-peak bound; `None` when
/// its plans may offload (a host link given to a strategy that offloads), which neither
/// bound covers, or for a budget of saved bytes. A device budget bounds the arena plus
/// persistent bytes, which is at least the memory-model peak less the largest in-place
/// saving of one op ([`budget::in_place_slack`]), so that much comes off.
fn floor(
    ctx: &Context<'_>,
    strategy: &dyn strategies::Strategy,
    options: &PlanOptions,
) -> Option<Floor> {
    if options.host_link.is_some() && strategy.can_offload() {
        return None;
    }
    let (bound, kind) = peak_floor(ctx, strategy);
    let bound = match options.budget_of {
        BudgetOf::Peak => bound,
        BudgetOf::Device => in_device_terms(ctx, bound),
        BudgetOf::Saved => return None,
    };
    Some(Floor { bound, kind })
}

/// The plan of a chosen schedule: summary, arena (checked against the budget in device
/// bytes) and the verifier. The plan records the rules its schedule follows (a budget met
/// by eviction is `dtr`).
fn finish_plan(
    ctx: &Context<'_>,
    options: &PlanOptions,
    strategy: Strategy,
    steps: &[(OpId, bool)],
    offloads: &[sgc_ir::Offload],
    stats: &mut PlanStats,
) -> Result<Plan, PlanError> {
    let graph = ctx.g;
    let options = &PlanOptions {
        strategy,
        ..options.clone()
    };
    let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
    let profile =
        sgc_ir::simulate_offloaded(graph, &ops, offloads).map_err(|e| PlanError::Internal {
            strategy: options.strategy.to_string(),
            message: e.to_string(),
        })?;
    let mut plan = assemble(graph, options, steps, offloads, &profile)?;
    let start = std::time::Instant::now();
    if options.arena || options.budget.is_some() {
        let layout = device::place(graph, &ops, &plan.lifetimes, options)?;
        let device = layout.size.saturating_add(graph.persistent_bytes());
        let bounded = match options.budget_of {
            BudgetOf::Device => device,
            BudgetOf::Peak => profile.peak,
            BudgetOf::Saved => plan::saved_bytes(graph, steps),
        };
        if let Some(budget) = options.budget.filter(|&b| bounded > b) {
            if options.budget_of == BudgetOf::Saved {
                return Err(PlanError::SavedBudgetNotMet {
                    budget,
                    lowest: bounded,
                });
            }
            return Err(PlanError::BudgetNotMet {
                budget,
                of: options.budget_of,
                best_peak: profile.peak,
                // Device bytes say how far a device budget is; beside a peak budget they
                // would read as the figure held against it.
                best_device: (options.budget_of == BudgetOf::Device).then_some(device),
                lower_bound: ctx.lower_bound.bytes,
                bound: crate::error::LowerBoundKind::PerOp,
                offload: None,
                retry: crate::strategies::when_refused(options),
            });
        }
        plan.arena = options.arena.then_some(layout);
    }
    stats.arena_secs = start.elapsed().as_secs_f64();
    verify(graph, &plan).map_err(|violations| PlanError::Rejected {
        strategy: options.strategy.to_string(),
        violations,
    })?;
    Ok(plan)
}

fn check_options(strategy: &dyn strategies::Strategy, o: &PlanOptions) -> Result<(), PlanError> {
    if !strategy.budget_kinds().contains(&o.budget_of) {
        let with: Vec<&str> = strategies::REGISTRY
            .iter()
            .filter(|s| s.budget_kinds().contains(&o.budget_of))
            .map(|s| s.name().as_str())
            .collect();
        return Err(PlanError::InvalidOption(format!(
            "--budget-of {} plans with --strategy {}, not {}",
            o.budget_of.as_str(),
            with.join(" or "),
            o.strategy
        )));
    }
    if strategy.needs_budget() {
        strategies::needed_budget(o)?;
    }
    if o.align == 0 {
        return Err(PlanError::InvalidOption(
            "--align must be at least 1".into(),
        ));
    }
    if o.pool_size == 0 {
        return Err(PlanError::InvalidOption(
            "--pool-size must be at least 1".into(),
        ));
    }
    Ok(())
}

/// Assembles a plan from a schedule and its offloads, `profile` being what
/// `simulate_offloaded` gave for them (a device instance freed at `free_after`).
fn assemble(
    graph: &Graph,
    options: &PlanOptions,
    schedule: &[(OpId, bool)],
    offloads: &[Offload],
    profile: &MemoryProfile,
) -> Result<Plan, PlanError> {
    let last = schedule.len().saturating_sub(1);
    let mut kept = vec![false; graph.num_tensors()];
    for &t in graph.outputs() {
        kept[graph.storage_root(t).index()] = true;
    }
    let mut steps: Vec<plan::Step> = schedule
        .iter()
        .map(|&(op, recompute)| plan::Step {
            op,
            recompute,
            free: Vec::new(),
        })
        .collect();
    for i in &profile.instances {
        if !(kept[i.root.index()] && i.end == last) {
            steps[i.end].free.push(i.root);
        }
    }
    for s in &mut steps {
        s.free.sort();
    }
    let lifetimes = profile.instances.iter().map(plan::Lifetime::from).collect();
    let checkpoints = plan::checkpoints(graph, schedule);
    let device = options.device_profile.as_ref();
    let mut summary = plan::summarize(graph, schedule, profile, checkpoints.len(), device);
    let mut offloads = offloads.to_vec();
    offloads.sort_by_key(|o| (o.copy_after, o.root));
    let host = if offloads.is_empty() {
        None
    } else {
        let link = options.host_link.as_ref().ok_or_else(|| {
            PlanError::InvalidOption("a plan with offloads needs a host link".into())
        })?;
        let ops: Vec<OpId> = schedule.iter().map(|s| s.0).collect();
        summary.offload = Some(offload::summarize(graph, &ops, &offloads, device, link)?);
        Some(offload::host_layout(graph, &offloads)?)
    };
    Ok(Plan {
        format: plan::PLAN_FORMAT.to_string(),
        version: plan::PLAN_VERSION,
        graph: plan::GraphRef::of(graph),
        options: options.clone(),
        steps,
        checkpoints,
        lifetimes,
        summary,
        arena: None,
        offloads,
        host,
    })
}
