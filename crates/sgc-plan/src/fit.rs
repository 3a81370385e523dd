//! The largest batch that fits a given amount of GPU memory, with and without planning.
//!
//! # What "fits" means
//! A batch `b` fits memory `M` with reserve `R` under a strategy when the graph rescaled to
//! `b` ([`sgc_ir::rescale`]) has a plan whose arena plus persistent bytes is at most
//! `M - R`, and, with a recompute limit ([`FitOptions::max_recompute`]), whose
//! recomputation costs at most that share of one step: a batch trained several times
//! slower is not one a user wants. The arena is what the plan's arena stage ([`crate::arena::assign`]) packs
//! the plan's storage lifetimes into (closed `[first, last]` steps become half-open
//! `[first, last + 1)`), offsets aligned to `align` bytes (256, as CUDA allocators do), so
//! fragmentation and padding count, not only the peak. Each probe plans with
//! `budget = M - R`, so a planner that can trade memory for recomputation (sublinear,
//! dtr) picks the cheapest plan whose device bytes (arena plus persistent, at the fit's
//! alignment) fit the limit rather than the smallest peak.
//!
//! # The bound no plan can pass
//! Every plan's peak is at least the per-op lower bound ([`sgc_ir::Graph::lower_bound`]:
//! persistent bytes plus the largest op's own storage), and an arena is at least the peak
//! minus the persistent bytes. The bound grows with the batch (each op's storage is a sum
//! of terms linear in it), so a bisection finds the largest batch whose bound fits: no
//! strategy can report more, and the search never probes past it + 1.
//!
//! A tighter bound covers the plans that keep or recompute (every strategy without a host
//! link): the least-peak lower bound ([`crate::least_peak`]) in device bytes, less the
//! largest in-place saving of one op, as the planner holds a device budget against it. It
//! too grows with the batch (a max and min of sums of storages), so a search below the
//! per-op bound's batch finds the largest batch it lets through
//! ([`FitReport::least_peak_batch`]): an interpolation search, since each evaluation is a
//! least-peak computation (up to a fifth of a second) where the per-op bound's is a sum.
//! The kept-outputs lower bound (`least_peak.rs`, docs/method.md) is at least the
//! least-peak one and covers the plans that also keep each graph output from when it is
//! made (every strategy's but `optimal`'s): the same search below the least-peak batch
//! finds the largest batch it lets through ([`FitReport::kept_outputs_batch`]). The weight
//! gradients it adds do not grow with the batch, so it stops below the other two where they
//! weigh beside the activations (ViT-B/16 in 16 GiB: batch 2273 against 2317).
//!
//! # Search
//! Per strategy (in the order given), a galloping search from a start batch (the previous
//! strategy's answer, else 1): double while the batch fits, halve while it does not, then
//! bisect between the largest batch seen to fit and the smallest seen not to. Both
//! neighbours of the answer are probed, so the answer `b` fits and `b + 1` does not, under
//! the same options, by construction. Heuristic planners need not be monotone in the batch;
//! any probed batch that fits above one that did not is listed in `non_monotone`. Probes
//! are deterministic (same graph, options and seed give the same plan), so each batch is
//! planned once per strategy.

use crate::error::{LowerBoundKind, PlanError};
use crate::options::{ArenaEffort, PlanOptions, RunConfig};
use serde::Serialize;
use sgc_ir::rescale::{self, RescaleError};
use sgc_ir::Graph;
use std::collections::BTreeMap;
use std::time::Instant;
use thiserror::Error;

/// Memory and allocator settings shared by every probe.
#[derive(Clone, Debug)]
pub struct FitOptions {
    /// The device memory (bytes).
    pub memory: u64,
    /// Memory kept free for the framework, kernels' workspaces, ... (bytes).
    pub reserve: u64,
    /// Arena offsets are multiples of this (bytes).
    pub align: u64,
    /// How hard the arenas placed here are searched (those of strategies planned without
    /// a budget; budget-aware ones place theirs at their `PlanOptions::arena_effort`).
    pub effort: ArenaEffort,
    /// Planner worker threads (`None`: all cores); results do not depend on it.
    pub workers: Option<usize>,
    /// The most a fitting plan may recompute, as a share of one step's cost (`None`: no
    /// limit). A budget-aware planner already picks the plan recomputing least within the
    /// memory, so a batch whose plan recomputes more does not fit.
    pub max_recompute: Option<f64>,
}

impl FitOptions {
    /// Heuristic allocation (`ArenaEffort::Fast`), 256-byte alignment, no reserve.
    pub fn new(memory: u64) -> FitOptions {
        FitOptions {
            memory,
            reserve: 0,
            align: 256,
            effort: ArenaEffort::Fast,
            workers: None,
            max_recompute: None,
        }
    }

    /// `memory - reserve`: what arena plus persistent bytes must fit in.
    pub fn limit(&self) -> u64 {
        self.memory.saturating_sub(self.reserve)
    }
}

/// Why a fit search could not run.
#[derive(Debug, Error)]
pub enum FitError {
    #[error(transparent)]
    Rescale(#[from] RescaleError),
    #[error("batch {batch}, strategy {strategy}: {source}")]
    Plan {
        batch: u64,
        strategy: String,
        source: PlanError,
    },
    /// The persistent bytes (what lives across steps: parameters, optimizer state) alone
    /// exceed the limit: no batch fits, whatever the strategy, and none is searched.
    #[error(
        "no batch fits: the persistent bytes alone ({}, what lives across steps) exceed the limit {}; give --memory more than that (plus --reserve) plus one sample's activations",
        sgc_ir::human_bytes(*persistent),
        sgc_ir::human_bytes(*limit)
    )]
    PersistentAboveLimit { persistent: u64, limit: u64 },
}

/// One batch tried under one strategy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    pub batch: u64,
    pub fits: bool,
    /// Peak of the plan (persistent bytes included); when no plan met the budget, the
    /// lowest peak the planner reached; when the lower bound already exceeds the limit, it.
    pub peak: u64,
    /// Arena of the plan's lifetimes (0 when no plan was made).
    pub arena: u64,
    pub persistent: u64,
    /// Recompute cost over the cost of one unplanned step.
    pub recompute_share: f64,
    /// Where those costs come from (the plan summary's `cost_source`; none without a plan).
    pub cost_source: Option<String>,
    /// Wall time of planning and allocation (all tries).
    pub plan_seconds: f64,
    /// Why it does not fit, when it does not.
    pub note: Option<String>,
}

/// The answer for one strategy.
#[derive(Clone, Debug, Serialize)]
pub struct StrategyFit {
    pub strategy: String,
    pub options: PlanOptions,
    /// The largest batch that fits (0: not even batch 1).
    pub batch: u64,
    /// The probe of `batch` (none when it is 0).
    pub fitting: Option<Probe>,
    /// The probe of `batch + 1`, which does not fit.
    pub next: Probe,
    /// Every batch probed, in increasing order.
    pub probes: Vec<Probe>,
    /// Probed batches that fit although a smaller probed batch did not.
    pub non_monotone: Vec<u64>,
    pub search_seconds: f64,
}

/// The whole answer.
#[derive(Clone, Debug, Serialize)]
pub struct FitReport {
    pub graph: Option<String>,
    /// The batch of the given graph.
    pub graph_batch: u64,
    pub memory: u64,
    pub reserve: u64,
    pub limit: u64,
    /// The recompute limit every fitting plan keeps (share of one step), if any.
    pub max_recompute: Option<f64>,
    pub persistent_bytes: u64,
    /// The largest batch whose per-op lower bound fits: no plan passes it.
    pub lower_bound_batch: u64,
    /// The lower bound at `lower_bound_batch + 1` (above the limit).
    pub lower_bound_next: u64,
    /// The largest batch whose least-peak lower bound, in device bytes, fits: no plan that
    /// keeps or recomputes (without offloading) passes it; at most `lower_bound_batch`.
    pub least_peak_batch: u64,
    /// The larger of the two bounds at `least_peak_batch + 1` (above the limit).
    pub least_peak_next: u64,
    /// The largest batch whose kept-outputs lower bound, in device bytes, fits: no plan
    /// that keeps or recomputes and keeps each graph output from when it is made (every
    /// strategy's but `optimal`'s, without offloading) passes it; at most `least_peak_batch`.
    pub kept_outputs_batch: u64,
    /// The largest of the three bounds at `kept_outputs_batch + 1` (above the limit).
    pub kept_outputs_next: u64,
    pub strategies: Vec<StrategyFit>,
}

/// Searches the largest fitting batch for each strategy's options (their `budget` is
/// replaced by the limit).
pub fn fit(
    graph: &Graph,
    strategies: &[PlanOptions],
    opts: &FitOptions,
    observe: &mut dyn FnMut(&str, &Probe),
) -> Result<FitReport, FitError> {
    let graph_batch = rescale::batch_size(graph)?;
    let persistent = graph.persistent_bytes();
    if persistent > opts.limit() {
        return Err(FitError::PersistentAboveLimit {
            persistent,
            limit: opts.limit(),
        });
    }
    let (lower_bound_batch, lower_bound_next) = lower_bound_limit(graph, opts.limit())?;
    let (least_peak_batch, least_peak_next) = bound_limit(
        graph,
        opts.limit(),
        (lower_bound_batch, lower_bound_next),
        crate::planner::least_device_bytes,
    )?;
    let (kept_outputs_batch, kept_outputs_next) = bound_limit(
        graph,
        opts.limit(),
        (least_peak_batch, least_peak_next),
        crate::planner::kept_device_bytes,
    )?;
    let mut start = 1;
    let mut results = Vec::new();
    for plan_opts in strategies {
        let mut tried = |b: u64| -> Result<Probe, FitError> {
            let p = probe(graph, b, plan_opts, opts)?;
            observe(plan_opts.strategy.as_str(), &p);
            Ok(p)
        };
        let t0 = Instant::now();
        let found = search(&mut tried, start.clamp(1, lower_bound_batch.max(1)))?;
        let sf = summarise(plan_opts, found, t0.elapsed().as_secs_f64());
        start = sf.batch.max(1);
        results.push(sf);
    }
    Ok(FitReport {
        graph: graph.name().map(str::to_string),
        graph_batch,
        memory: opts.memory,
        reserve: opts.reserve,
        limit: opts.limit(),
        max_recompute: opts.max_recompute,
        persistent_bytes: persistent,
        lower_bound_batch,
        lower_bound_next,
        least_peak_batch,
        least_peak_next,
        kept_outputs_batch,
        kept_outputs_next,
        strategies: results,
    })
}

/// The largest batch whose per-op lower bound is at most `limit` (0 if none), and the bound
/// one batch above it.
pub fn lower_bound_limit(graph: &Graph, limit: u64) -> Result<(u64, u64), FitError> {
    let bound = |b: u64| -> Result<Option<u64>, FitError> {
        match rescale::rescale(graph, b) {
            Ok(g) => Ok(Some(g.lower_bound().bytes)),
            Err(RescaleError::Overflow { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    };
    let fits = |b: u64| -> Result<bool, FitError> { Ok(bound(b)?.is_some_and(|x| x <= limit)) };
    if !fits(1)? {
        return Ok((0, bound(1)?.unwrap_or(u64::MAX)));
    }
    let (mut lo, mut hi) = (1u64, 2u64);
    while fits(hi)? {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, bound(lo + 1)?.unwrap_or(u64::MAX)))
}

/// The largest batch whose lower bound in device bytes (`device_bound` of the rescaled
/// graph: [`crate::planner::least_device_bytes`], [`crate::planner::kept_device_bytes`]) is
/// at most `limit` (0 if none), and the larger of it and `looser`'s bound one batch above
/// it, given the answer of a looser bound (`looser`: its batch and its bound one above):
/// the bound is at least the looser one, so the answer is at most the looser batch, which
/// is tried first (on most graphs the two agree); below it, an interpolation search
/// (`interpolate`).
pub fn bound_limit(
    graph: &Graph,
    limit: u64,
    looser: (u64, u64),
    device_bound: fn(&Graph) -> sgc_ir::LowerBound,
) -> Result<(u64, u64), FitError> {
    let (looser_batch, looser_next) = looser;
    let bound =
        |b: u64| -> Result<u64, FitError> { Ok(device_bound(&rescale::rescale(graph, b)?).bytes) };
    if looser_batch == 0 {
        return Ok((0, looser_next));
    }
    let at_most = bound(looser_batch)?;
    if at_most <= limit {
        let next = match rescale::rescale(graph, looser_batch + 1) {
            Ok(g) => device_bound(&g).bytes.max(looser_next),
            Err(RescaleError::Overflow { .. }) => u64::MAX,
            Err(e) => return Err(e.into()),
        };
        return Ok((looser_batch, next));
    }
    last_within(limit, looser_batch, at_most, bound)
}

/// The largest batch `b < hi` with `bound(b) <= limit` (0 if none) and `bound(b + 1)`, for a
/// nondecreasing `bound` with `bound(hi) = hi_bound > limit`, by interpolation search.
fn last_within<E>(
    limit: u64,
    hi: u64,
    hi_bound: u64,
    mut bound: impl FnMut(u64) -> Result<u64, E>,
) -> Result<(u64, u64), E> {
    // bound(lo) <= limit < bound(hi) (lo = 0 stands for "none fits", its bound taken as 0).
    let (mut lo, mut lo_bound, mut hi, mut hi_bound) = (0u64, 0u64, hi, hi_bound);
    let mut halve = false;
    while hi - lo > 1 {
        let width = hi - lo;
        let mid = if halve {
            lo + width / 2
        } else {
            interpolate((lo, lo_bound), (hi, hi_bound), limit)
        };
        let b = bound(mid)?;
        if b <= limit {
            (lo, lo_bound) = (mid, b);
        } else {
            (hi, hi_bound) = (mid, b);
        }
        halve = !halve && 2 * (hi - lo) > width;
    }
    Ok((lo, hi_bound))
}

/// Where the line through `lo` and `hi` (batch, bound) meets `limit`, strictly between the
/// two batches (`lo.1 <= limit < hi.1`, `hi.0 - lo.0 >= 2`). The bound is close to affine
/// in the batch (every storage is), so this lands on or next to the answer; a step that
/// does not halve the bracket is followed by a bisection, so the search takes at most
/// twice the steps of a bisection.
fn interpolate(lo: (u64, u64), hi: (u64, u64), limit: u64) -> u64 {
    let share = (limit - lo.1) as f64 / (hi.1 - lo.1) as f64;
    let at = lo.0 + (share * (hi.0 - lo.0) as f64) as u64;
    at.clamp(lo.0 + 1, hi.0 - 1)
}

/// Plans `graph` at `batch` under `plan_opts` (budget: the limit) and packs the arena.
pub fn probe(
    graph: &Graph,
    batch: u64,
    plan_opts: &PlanOptions,
    opts: &FitOptions,
) -> Result<Probe, FitError> {
    let g = rescale::rescale(graph, batch)?;
    let limit = opts.limit();
    let persistent = g.persistent_bytes();
    let mut p = Probe {
        batch,
        fits: false,
        peak: 0,
        arena: 0,
        persistent,
        recompute_share: 0.0,
        cost_source: None,
        plan_seconds: 0.0,
        note: None,
    };
    let lb = g.lower_bound().bytes;
    if lb > limit {
        p.peak = lb;
        p.note = Some("the per-op lower bound exceeds the limit".into());
        return Ok(p);
    }
    let t0 = Instant::now();
    // A budget-aware planner answers the limit itself, in device bytes (its arena at the
    // fit's alignment plus persistent bytes); the others plan without one (in-place
    // sharing can pack an arena below the live peak) and are placed here.
    let budget_aware = crate::strategies::of(plan_opts.strategy).searches_budget();
    let o = PlanOptions {
        budget: budget_aware.then_some(limit),
        align: opts.align,
        arena: budget_aware,
        ..plan_opts.clone()
    };
    let run = RunConfig {
        workers: opts.workers,
        progress: None,
    };
    let plan_err = |source| FitError::Plan {
        batch,
        strategy: o.strategy.to_string(),
        source,
    };
    let plan = match crate::planner::plan(&g, &o, &run) {
        Ok(plan) => plan,
        Err(PlanError::BudgetNotMet {
            best_peak,
            best_device,
            ..
        }) => {
            p.peak = best_peak;
            p.arena = best_device.map_or(0, |d| d.saturating_sub(persistent));
            p.note = Some("no plan's device bytes fit the limit".into());
            p.plan_seconds = t0.elapsed().as_secs_f64();
            return Ok(p);
        }
        Err(PlanError::BudgetBelowLowerBound {
            lower_bound, kind, ..
        }) => {
            p.peak = lower_bound;
            p.note = Some(match kind {
                LowerBoundKind::PerOp => "the per-op lower bound exceeds the limit",
                LowerBoundKind::LeastPeak => {
                    "the least-peak lower bound exceeds the limit (no plan that keeps or recomputes fits)"
                }
                LowerBoundKind::KeptOutputs => {
                    "the kept-outputs lower bound exceeds the limit (no plan that keeps or recomputes and keeps the graph outputs fits)"
                }
            }.into());
            p.plan_seconds = t0.elapsed().as_secs_f64();
            return Ok(p);
        }
        Err(source) => return Err(plan_err(source)),
    };
    let size = match &plan.arena {
        Some(layout) => layout.size,
        None => {
            let ops: Vec<_> = plan.steps.iter().map(|s| s.op).collect();
            crate::arena::assign(&g, &ops, &plan.lifetimes, opts.align, opts.effort.into())
                .map_err(plan_err)?
                .size
        }
    };
    p.peak = plan.summary.planned_peak;
    p.arena = size;
    p.recompute_share = plan.summary.recompute_share;
    p.cost_source = Some(plan.summary.cost_source.clone());
    let total = size.saturating_add(persistent);
    let too_slow = opts.max_recompute.filter(|&m| p.recompute_share > m);
    p.fits = total <= limit && too_slow.is_none();
    p.note = if total > limit {
        Some("the arena plus persistent bytes exceed the limit".into())
    } else {
        too_slow.map(|m| {
            format!(
                "recomputes {:.1}% of a step, above the limit of {:.1}%",
                100.0 * p.recompute_share,
                100.0 * m
            )
        })
    };
    p.plan_seconds = t0.elapsed().as_secs_f64();
    Ok(p)
}

type Probes = BTreeMap<u64, Probe>;

/// Galloping then bisection; returns the largest batch seen to fit whose successor was
/// seen not to (0 when batch 1 does not fit), and every probe made.
fn search(
    tried: &mut dyn FnMut(u64) -> Result<Probe, FitError>,
    start: u64,
) -> Result<(u64, Probes), FitError> {
    let mut probes = Probes::new();
    let mut at = |b: u64, probes: &mut Probes| -> Result<bool, FitError> {
        if let Some(p) = probes.get(&b) {
            return Ok(p.fits);
        }
        let p = tried(b)?;
        let fits = p.fits;
        probes.insert(b, p);
        Ok(fits)
    };
    let (mut lo, mut hi);
    if at(start, &mut probes)? {
        lo = start;
        hi = start.saturating_mul(2);
        while at(hi, &mut probes)? {
            lo = hi;
            hi = hi.saturating_mul(2);
        }
    } else {
        hi = start;
        lo = start / 2;
        while lo > 0 && !at(lo, &mut probes)? {
            hi = lo;
            lo /= 2;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if at(mid, &mut probes)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, probes))
}

/// The answer for one strategy from the search's result.
fn summarise(plan_opts: &PlanOptions, found: (u64, Probes), seconds: f64) -> StrategyFit {
    let (batch, probes) = found;
    let mut smallest_fail = u64::MAX;
    let mut non_monotone = Vec::new();
    for (&b, p) in &probes {
        if !p.fits {
            smallest_fail = smallest_fail.min(b);
        } else if b > smallest_fail {
            non_monotone.push(b);
        }
    }
    StrategyFit {
        strategy: plan_opts.strategy.to_string(),
        options: plan_opts.clone(),
        batch,
        fitting: probes.get(&batch).cloned(),
        next: probes[&(batch + 1)].clone(),
        probes: probes.into_values().collect(),
        non_monotone,
        search_seconds: seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interpolation search answers as a scan would, on affine, convex, concave and
    /// stepped bounds, at every limit from below the first batch's bound to the last's,
    /// within twice a bisection's evaluations.
    #[test]
    fn the_search_finds_the_last_batch_within_the_limit() {
        let shapes: [fn(u64) -> u64; 4] = [
            |b| 1000 + 37 * b,
            |b| 500 + b * b,
            |b| 4000 + 900 * (64 - 64 / b.max(1)),
            |b| 100 * (b / 7) + 3,
        ];
        for f in shapes {
            for hi in [1u64, 2, 3, 50, 200] {
                let top = f(hi);
                for limit in (0..top).step_by(((top / 97) as usize).max(1)) {
                    let mut calls = 0u32;
                    let got = last_within::<()>(limit, hi, top, |b| {
                        calls += 1;
                        Ok(f(b))
                    })
                    .unwrap();
                    let want = (1..hi).rev().find(|&b| f(b) <= limit).unwrap_or(0);
                    assert_eq!(got, (want, f(want + 1)), "hi {hi}, limit {limit}");
                    assert!(calls <= 2 * (64 - hi.leading_zeros()) + 2, "{calls} calls");
                }
            }
        }
    }
}
