//! The program of [`super::model`] solved by HiGHS: its deterministic parallel tree search
//! with [`super::SEARCH_WORKERS`] workers (run serially on fewer threads), a fixed seed, the
//! relative gap [`super::GAP`] (and the absolute [`super::ABS_GAP`]), presolve only for
//! small programs ([`PRESOLVE_BELOW_COLUMNS`]), the warm start passed as a first incumbent.
//! `SGC_HIGHS_LOG=1` prints HiGHS's own log; `SGC_HIGHS_OPTIONS=name=value,...` sets HiGHS
//! options over these (for trying solver settings: a plan is still called proven only within
//! sgc's gaps); `SGC_HIGHS_MPS=FILE` writes the program HiGHS
//! is given (its objective scaled by [`SCALE`]) as an MPS file, for another solver to read
//! (`scripts/cpsat-solve.py`); where one command solves more than one (`--bound`'s
//! relaxation, then `optimal`'s program), the file holds the last.

use super::model::Model;
use super::{Effort, OptimalStats, SEARCH_WORKERS};
use crate::bound::{Bound, BoundMethod};
use crate::error::PlanError;
use highs::{HighsModelStatus, RowProblem, Sense};
use sgc_ir::OpId;

/// What a bound HiGHS reports gives up to its tolerances (a share of one step): its
/// optimality and feasibility tolerances (1e-7) may put a relaxation's or a dual bound's
/// value that far above the true one.
const TOLERANCE: f64 = 1e-6;

/// HiGHS's objective is the recompute in ten-thousandths of one step (each cost, a share of
/// a step, times this; the objective and the bounds read back divided by it). HiGHS's
/// tolerances are absolute (1e-7 on reduced costs), and a recomputation's cost as a share
/// of a step is as small as 8e-5 (random_layered_n100; HiGHS warns of "excessively small
/// costs"); in this unit the Checkmate graphs' costs run from about 1 to 200. The effect on
/// solve times: docs/benchmarks.md, "How far from optimal".
const SCALE: f64 = 1e4;

/// HiGHS presolves the integer program only when it has fewer columns than this. On the
/// Checkmate graphs' programs (14,000 to 220,000 columns) presolve takes much of the minute
/// and finds little: 3.8 to 5.2 s on random_layered_n100's (removing 6.5% to 29% of the
/// rows), 13 s on MobileNet's at 0.7 of its peak (3.5% of them), 27 s on
/// random_layered_n250's. Without it MobileNet at 0.9 to 0.7 and n100 at 0.9 and 0.8 are
/// proven 4 to 17 s sooner, and the other pairs change within the machine's run-to-run noise
/// (docs/benchmarks.md, "How far from optimal"). On small programs it is quick and the
/// search after it is shorter: the tests' random graphs, and tiny_cnn at 0.78 of its peak
/// (2,723 columns: 11 s with it, 16 s without).
pub(super) const PRESOLVE_BELOW_COLUMNS: usize = 10_000;

/// The program as HiGHS's, its options set, with or without HiGHS's presolve. HiGHS's
/// threads are the same number on every call (its scheduler, one per calling thread, is
/// made once with that many).
fn highs_model(m: &Model, time_limit_s: f64, presolve: bool) -> highs::Model {
    let mut pb = RowProblem::default();
    let cols: Vec<highs::Col> = m
        .columns
        .iter()
        .map(|c| pb.add_column_with_integrality(c.cost * SCALE, c.lo..=c.hi, c.integer))
        .collect();
    for row in &m.rows {
        let terms = row.terms.iter().map(|&(c, a)| (cols[c], a));
        pb.add_row(row.lo..=row.hi, terms);
    }
    let mut model = pb.optimise(Sense::Minimise);
    if std::env::var_os("SGC_HIGHS_LOG").is_none() {
        model.make_quiet();
    } else {
        model.set_option("output_flag", true);
        model.set_option("log_to_console", true);
    }
    model.set_option("time_limit", time_limit_s);
    model.set_option("threads", SEARCH_WORKERS as i32);
    model.set_option("random_seed", 0);
    model.set_option("mip_rel_gap", super::GAP);
    model.set_option("mip_abs_gap", super::ABS_GAP * SCALE);
    model.set_option("presolve", if presolve { "on" } else { "off" });
    if let Some(options) = std::env::var_os("SGC_HIGHS_OPTIONS") {
        set_options(&mut model, &options.to_string_lossy());
    }
    if let Some(path) = std::env::var_os("SGC_HIGHS_MPS") {
        write_model(&mut model, &path);
    }
    model
}

/// Sets HiGHS options from `name=value` pairs separated by commas, each value read by its
/// option's type (bool, integer, float or string, as HiGHS declares it), or says on stderr
/// which it refused: an aid for trying solver settings, which changes the search and so may
/// change the plan.
fn set_options(model: &mut highs::Model, options: &str) {
    for pair in options.split(',').filter(|p| !p.trim().is_empty()) {
        let set = pair
            .split_once('=')
            .is_some_and(|(name, value)| set_option(model, name.trim(), value.trim()));
        if !set {
            eprintln!(
                "SGC_HIGHS_OPTIONS: HiGHS refused {pair:?} (expected name=value, a HiGHS option \
                 and a value of its type)"
            );
        }
    }
}

/// Sets one HiGHS option from text by the option's type; whether HiGHS took it.
fn set_option(model: &mut highs::Model, name: &str, value: &str) -> bool {
    let Ok(c_name) = std::ffi::CString::new(name) else {
        return false;
    };
    let mut kind: highs_sys::HighsInt = -1;
    // SAFETY: `model` owns a live HiGHS instance; the name is NUL-terminated and `kind` a
    // valid HighsInt for HiGHS to write.
    let status =
        unsafe { highs_sys::Highs_getOptionType(model.as_mut_ptr(), c_name.as_ptr(), &mut kind) };
    if status != highs_sys::STATUS_OK {
        return false;
    }
    let set = match kind {
        highs_sys::kHighsOptionTypeBool => match value {
            "true" | "on" | "1" => model.try_set_option(name, true),
            "false" | "off" | "0" => model.try_set_option(name, false),
            _ => return false,
        },
        highs_sys::kHighsOptionTypeInt => match value.parse::<i32>() {
            Ok(v) => model.try_set_option(name, v),
            Err(_) => return false,
        },
        highs_sys::kHighsOptionTypeDouble => match value.parse::<f64>() {
            Ok(v) => model.try_set_option(name, v),
            Err(_) => return false,
        },
        _ => model.try_set_option(name, value),
    };
    set.is_ok()
}

/// Writes the program to `path` (MPS, or LP by the name's extension), or says why not on
/// stderr: a debugging aid, which never changes the plan.
fn write_model(model: &mut highs::Model, path: &std::ffi::OsStr) {
    let written = std::ffi::CString::new(path.as_encoded_bytes()).is_ok_and(|c| {
        // SAFETY: `model` owns a live HiGHS instance and `c` is a NUL-terminated path.
        let status = unsafe { highs_sys::Highs_writeModel(model.as_mut_ptr(), c.as_ptr()) };
        status == highs_sys::STATUS_OK
    });
    if !written {
        eprintln!(
            "SGC_HIGHS_MPS: HiGHS could not write {}",
            path.to_string_lossy()
        );
    }
}

/// The optimum of a relaxed program (`None` unless HiGHS proves it within the time).
pub(super) fn relaxation(m: &Model, time_limit_s: u64) -> Option<f64> {
    let solved = highs_model(m, time_limit_s as f64, true).try_solve().ok()?;
    (solved.status() == HighsModelStatus::Optimal)
        .then(|| (solved.objective_value() / SCALE - TOLERANCE).max(0.0))
}

pub(super) fn solve(
    m: &Model,
    warm: Option<Vec<f64>>,
    effort: Effort,
) -> Result<(Vec<(OpId, bool)>, OptimalStats), PlanError> {
    let left = effort
        .deadline
        .saturating_duration_since(std::time::Instant::now())
        .as_secs_f64();
    let presolve = m.columns.len() < PRESOLVE_BELOW_COLUMNS;
    let mut model = highs_model(m, left.max(super::LEAST_SOLVER_S), presolve);
    model.set_option("parallel", "on");
    model.set_option(
        "mip_search_simulate_concurrency",
        effort.threads < SEARCH_WORKERS,
    );
    let warm_objective = warm.as_ref().map(|x| m.objective(x));
    if let Some(x) = &warm {
        // A start HiGHS finds infeasible is dropped by it; the plan is then searched from
        // scratch.
        let _ = model.try_set_solution(Some(x), None, None, None);
    }
    let start = std::time::Instant::now();
    let solved = model
        .try_solve()
        .map_err(|e| PlanError::Solver(format!("HiGHS failed: {e:?}")))?;
    let seconds = start.elapsed().as_secs_f64();
    let status = solved.status();
    let feasible = matches!(
        status,
        HighsModelStatus::Optimal | HighsModelStatus::ReachedTimeLimit
    ) && solved.primal_solution_status() == highs::HighsSolutionStatus::Feasible;
    if status == HighsModelStatus::Infeasible {
        return Err(PlanError::Solver(
            "HiGHS proved that no schedule with first runs in the traced order fits this \
             budget; raise the budget"
                .into(),
        ));
    }
    // Within its gaps HiGHS may return a schedule a little worse than the start it was
    // given (a pointless recomputation of an op costing 1e-9 of a step); the start is then
    // the better answer, and every bound below still holds. Stopped before it read the
    // start (a deadline the starts used up), HiGHS has none: the start is the answer.
    let found = feasible.then(|| solved.get_solution().columns().to_vec());
    let x = match (warm, found) {
        (Some(w), Some(f)) if m.objective(&w) > m.objective(&f) => f,
        (Some(w), _) => w,
        (None, Some(f)) => f,
        (None, None) => {
            return Err(PlanError::Solver(format!(
                "HiGHS stopped ({status:?}) after {seconds:.1} s without a schedule within the \
                 budget, and no heuristic plan fitted it to start from; raise --time-limit or \
                 the budget"
            )))
        }
    };
    // The program may leave out runs dearer than the start, so its dual bound holds for
    // the schedules that recompute no more than the start; every other one recomputes
    // more, so the smaller of the two bounds them all.
    let bound = (solved.double_info_value(c"mip_dual_bound").unwrap_or(0.0) / SCALE - TOLERANCE)
        .max(0.0)
        .min(warm_objective.unwrap_or(f64::INFINITY));
    let steps = m.schedule_of(&x);
    let recompute = m.objective(&x);
    let proven = status == HighsModelStatus::Optimal && within_gap(recompute, bound);
    Ok((
        steps,
        OptimalStats {
            recompute,
            bound: Bound {
                recompute: if proven { bound.min(recompute) } else { bound },
                method: BoundMethod::Solver,
                at_op: None,
            },
            proven,
            warm_start: warm_objective,
            columns: m.columns.len(),
            rows: m.rows.len(),
            seconds,
            nodes: node_count(&solved),
        },
    ))
}

/// Whether a plan recomputing `recompute` is within sgc's gaps ([`super::GAP`],
/// [`super::ABS_GAP`]) of a bound read back from HiGHS (less [`TOLERANCE`]). HiGHS's
/// "optimal" means within its own gaps, which `SGC_HIGHS_OPTIONS` may have widened.
fn within_gap(recompute: f64, bound: f64) -> bool {
    recompute - bound <= super::GAP * recompute + super::ABS_GAP + TOLERANCE
}

/// The branch-and-bound nodes HiGHS explored (`mip_node_count`, a 64-bit info value, which
/// the `highs` crate does not read).
fn node_count(solved: &highs::SolvedModel) -> u64 {
    let mut nodes: i64 = 0;
    // SAFETY: `solved` owns a live HiGHS instance; the name is a NUL-terminated string and
    // `nodes` a valid i64 for HiGHS to write.
    let status = unsafe {
        highs_sys::Highs_getInt64InfoValue(solved.as_ptr(), c"mip_node_count".as_ptr(), &mut nodes)
    };
    if status == highs_sys::STATUS_OK {
        u64::try_from(nodes).unwrap_or(0)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan is proven when the bound is within the relative gap of it, or within the
    /// absolute gap where both are near zero; a gap HiGHS was told to accept (tiny_cnn at
    /// 0.9 of its peak with `mip_rel_gap=0.5`: 21.177% against a bound of 11.851%) is not.
    #[test]
    fn proven_means_within_sgcs_gap() {
        assert!(within_gap(0.021_177, 0.021_177 - 1e-6));
        assert!(within_gap(0.5, 0.5 * (1.0 - super::super::GAP)));
        assert!(within_gap(1e-6, 0.0));
        assert!(!within_gap(0.211_77, 0.118_51));
        assert!(!within_gap(0.5, 0.5 * (1.0 - 2.0 * super::super::GAP)));
    }
}
