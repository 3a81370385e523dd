//! The `optimal` strategy: the least recompute under a memory cap, proven, for graphs small
//! enough for an integer program.
//!
//! `model` writes Checkmate's stage model over sgc's memory model (every schedule whose
//! first runs follow the traced order, each stage's recomputations in traced order before
//! its own op) as a mixed-integer program; `solve` hands it to HiGHS (the `optimal` feature),
//! warm-started from the best heuristic schedule at the same cap (sublinear, static DTR or
//! partition), under a time limit, and never answers worse than that start. Given that start,
//! no op whose one run costs more than the whole start is given a recomputation in the
//! program: a schedule with one recomputes more than the start, so the optimum is kept and
//! the dual bound, capped at the start's cost, still bounds every schedule. HiGHS returns
//! its best schedule and a proven lower bound on the objective (the dual bound of its branch
//! and bound): when they meet within the relative gap the plan is optimal; when the time
//! limit stops it first, the plan is the best found and the bound says how far from optimal
//! it can be. Either way the schedule becomes a normal plan, checked by the verifier.
//!
//! The program has about `n^2` columns for `n` ops (each op may run in each later stage,
//! each storage may be present at each stage), so it is built only up to [`MAX_COLUMNS`];
//! above that the strategy says so and names `sublinear`.

pub(crate) mod model;
#[cfg(feature = "optimal")]
mod solve;

use crate::context::Context;
use crate::error::PlanError;
use sgc_ir::OpId;

/// The most columns the program is built with: room for every Checkmate graph in
/// `benches/data/checkmate/` (the largest, random_layered_n250, has 220,584). Size is not
/// time: MobileNet's 93,293 columns are proven within 60 s at some budgets and not at
/// others (docs/benchmarks.md, "How far from optimal"); the limit guards the program's
/// memory and build time.
pub const MAX_COLUMNS: usize = 400_000;

/// The most columns of a program whose linear relaxation `--bound` solves: HiGHS's simplex
/// takes about 10 s for 90,000 (MobileNet of the Checkmate graphs), and `--bound` must
/// finish within seconds.
pub const MAX_RELAXED_COLUMNS: usize = 40_000;

/// The relative gap at which HiGHS stops and calls its plan optimal: `(plan - bound) / plan`,
/// the gap HiGHS reports. At 1e-3 a plan recomputing 1% of a step is within 1e-5 of a step
/// of the optimum.
pub const GAP: f64 = 1e-3;

/// The absolute gap at which HiGHS also stops (its default), in shares of one step: plans
/// recomputing less than a millionth of a step are not told apart.
pub const ABS_GAP: f64 = 1e-6;

/// The default time limit of the solver, in seconds.
pub const DEFAULT_TIME_LIMIT_S: u64 = 60;

/// Workers of HiGHS's branch and bound: its parallel tree search, whose workers exchange
/// bounds, cuts and incumbents only at fixed synchronisation points, so the search (and the
/// plan) depends on their number and not on timing. The number is fixed here, not taken
/// from the machine, so that every machine searches the same tree: with fewer threads than
/// workers the same search runs serially (HiGHS's `mip_search_simulate_concurrency`).
/// Two, for the two cores sgc is measured on: docs/benchmarks.md, "How far from optimal",
/// compares one, two and four.
pub const SEARCH_WORKERS: usize = 2;

/// HiGHS's time when the deadline has passed before it starts (the starts took it all), in
/// seconds: a floor, so that it still runs; stopped before it reads the warm start, the
/// start is the answer.
pub const LEAST_SOLVER_S: f64 = 1.0;

/// How the solver may run: until when, and on how many threads. Neither changes the program
/// it solves, and the threads do not change its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effort {
    /// When HiGHS stops with the best plan and bound found so far: the strategy's start
    /// plus its time limit, so that the heuristic starts and building the program count
    /// against it (HiGHS gets what is left, at least [`LEAST_SOLVER_S`]).
    pub deadline: std::time::Instant,
    /// Threads the planner may use; below [`SEARCH_WORKERS`] the search runs serially.
    pub threads: usize,
}

/// What the solver proved about a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimalStats {
    /// Recompute cost of the plan, as a share of one step.
    pub recompute: f64,
    /// The proven lower bound on any stage-form plan's recompute within the cap, and how it
    /// was proven: the larger of HiGHS's dual bound and the cut bound ([`crate::bound`](mod@crate::bound)) at
    /// the cap, which is the higher where HiGHS's root does not finish
    /// (random_layered_n250 of the Checkmate graphs).
    pub bound: crate::bound::Bound,
    /// Whether the solver proved the plan optimal (within the relative gap [`GAP`]).
    pub proven: bool,
    /// The heuristic plan it started from, its recompute (`None`: none fitted the cap).
    pub warm_start: Option<f64>,
    /// Size of the program.
    pub columns: usize,
    pub rows: usize,
    /// Seconds the solver ran.
    pub seconds: f64,
    /// Branch-and-bound nodes HiGHS explored (0: settled at the root). The same for any
    /// number of threads ([`SEARCH_WORKERS`]).
    pub nodes: u64,
}

/// The least-recompute stage-form schedule whose memory-model peak (persistent bytes
/// included) is at most `peak`, starting from the best of `starts` (heuristic schedules)
/// that is a point of the program within the cap. `peak` is at or above the least-peak
/// bound ([`crate::least_peak::below_floor`]).
pub(crate) fn solve(
    ctx: &Context<'_>,
    peak: u64,
    starts: &[Vec<(OpId, bool)>],
    effort: Effort,
) -> Result<(Vec<(OpId, bool)>, OptimalStats), PlanError> {
    search(ctx, peak, starts, effort).map(|solved| with_cut(ctx, peak, solved))
}

/// [`solve`], with HiGHS's dual bound as the bound.
fn search(
    ctx: &Context<'_>,
    peak: u64,
    starts: &[Vec<(OpId, bool)>],
    effort: Effort,
) -> Result<(Vec<(OpId, bool)>, OptimalStats), PlanError> {
    let cap = peak.saturating_sub(ctx.persistent_bytes);
    let m = model::Model::build(ctx, cap, MAX_COLUMNS).map_err(|e| match e {
        model::Unmodelled::TooLarge { columns, limit } => PlanError::InvalidOption(format!(
            "--strategy optimal: this graph ({} ops) needs an integer program of about {columns} \
             columns, above the {limit} it solves in reasonable time; plan it with \
             --strategy sublinear (and --bound for how far that plan can be from optimal)",
            ctx.n
        )),
    })?;
    let warm = starts
        .iter()
        .filter_map(|s| Some((s, m.point_of(s)?)))
        .filter(|(_, x)| m.violated(x, 1e-6).is_empty())
        .min_by(|a, b| m.objective(&a.1).total_cmp(&m.objective(&b.1)));
    let Some((start, x)) = warm else {
        return run_solver(&m, None, effort);
    };
    // No op dearer than the whole start is worth recomputing: the program without those
    // runs has the same optimum and is smaller (MobileNet of the Checkmate graphs at 0.6 of
    // its peak: 84,535 columns of 93,293), so HiGHS's root takes less time. The slack
    // covers the rounding of a sum of shares.
    let dearest = m.objective(&x) * (1.0 + 1e-9);
    let below = model::Model::build_below(ctx, cap, MAX_COLUMNS, dearest)
        .ok()
        .and_then(|b| {
            let y = b.point_of(start)?;
            b.violated(&y, 1e-6).is_empty().then_some((b, y))
        });
    match below {
        Some((b, y)) => run_solver(&b, Some(y), effort),
        None => run_solver(&m, Some(x), effort),
    }
}

/// The solver's answer with the cut bound at `peak` as its bound where that is higher.
fn with_cut(
    ctx: &Context<'_>,
    peak: u64,
    (steps, mut stats): (Vec<(OpId, bool)>, OptimalStats),
) -> (Vec<(OpId, bool)>, OptimalStats) {
    let cut = crate::bound::cut(ctx, peak);
    if cut.recompute > stats.bound.recompute {
        stats.bound = cut;
    }
    (steps, stats)
}

/// The optimum of the program's linear relaxation at `peak`: a lower bound on the recompute
/// of any stage-form schedule within it (`None`: the program is too large, the solver is
/// not built, or it did not finish within `time_limit_s`).
pub(crate) fn relaxation(ctx: &Context<'_>, peak: u64, time_limit_s: u64) -> Option<f64> {
    let cap = peak.saturating_sub(ctx.persistent_bytes);
    let mut m = model::Model::build(ctx, cap, MAX_RELAXED_COLUMNS).ok()?;
    for c in &mut m.columns {
        c.integer = false;
    }
    relax_solver(&m, time_limit_s)
}

#[cfg(feature = "optimal")]
fn relax_solver(m: &model::Model, time_limit_s: u64) -> Option<f64> {
    solve::relaxation(m, time_limit_s)
}

#[cfg(not(feature = "optimal"))]
fn relax_solver(_: &model::Model, _: u64) -> Option<f64> {
    None
}

#[cfg(feature = "optimal")]
fn run_solver(
    m: &model::Model,
    warm: Option<Vec<f64>>,
    effort: Effort,
) -> Result<(Vec<(OpId, bool)>, OptimalStats), PlanError> {
    solve::solve(m, warm, effort)
}

#[cfg(not(feature = "optimal"))]
fn run_solver(
    _: &model::Model,
    _: Option<Vec<f64>>,
    _: Effort,
) -> Result<(Vec<(OpId, bool)>, OptimalStats), PlanError> {
    Err(PlanError::InvalidOption(
        "--strategy optimal needs sgc built with the `optimal` feature (HiGHS, built from \
         source: needs cmake and libclang): cargo build --release --features optimal"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bound::BoundMethod;

    fn stats(bound: f64) -> OptimalStats {
        OptimalStats {
            recompute: 0.05,
            bound: crate::bound::Bound {
                recompute: bound,
                method: BoundMethod::Solver,
                at_op: None,
            },
            proven: false,
            warm_start: Some(0.05),
            columns: 0,
            rows: 0,
            seconds: 0.0,
            nodes: 0,
        }
    }

    /// Where HiGHS's root does not finish its dual bound is 0 (random_layered_n250 of the
    /// Checkmate graphs at 0.9 of its peak); the strategy then reports the cut bound at the
    /// cap, and HiGHS's where that is the higher.
    #[test]
    fn optimal_reports_the_higher_of_its_two_bounds() {
        let g = crate::testing::load("benches/data/checkmate/random_layered_n250.json");
        let ctx = Context::new(&g);
        let peak = ctx.unplanned_peak * 9 / 10;
        let cut = crate::bound::cut(&ctx, peak);
        assert!(
            cut.recompute > 0.0,
            "the cut bound is 0 here: nothing to compare"
        );
        let (_, low) = with_cut(&ctx, peak, (Vec::new(), stats(0.0)));
        assert_eq!(low.bound.recompute, cut.recompute);
        assert_eq!(low.bound.method, BoundMethod::Cut);
        assert_eq!(low.bound.at_op, cut.at_op);
        let (_, high) = with_cut(&ctx, peak, (Vec::new(), stats(cut.recompute * 2.0)));
        assert_eq!(high.bound.recompute, cut.recompute * 2.0);
        assert_eq!(high.bound.method, BoundMethod::Solver);
        assert_eq!(high.bound.at_op, None);
    }
}
