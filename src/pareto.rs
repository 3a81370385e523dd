//! `sgc pareto FILE`: the memory/recompute front of each strategy, and how far below it
//! any plan could go.
//!
//! Budgets are spread evenly in device bytes from the lowest the default planner reaches
//! under a budget to the unplanned step's device bytes. That low end is the least device
//! bytes of `sublinear`'s budget candidates ([`BudgetSweep::lowest_device_bytes`]): below
//! its unbudgeted plan only eviction plans (and on some graphs partition's kept sets) fit,
//! and the front there is where a budget that the unbudgeted plan misses lands. Each
//! strategy that answers a budget ([`Strategy::searches_budget`]) is planned at every
//! budget (`sublinear` from that one search: [`BudgetSweep`]); the others give the one plan
//! they make. Every plan is an ordinary verified plan, placed in its arena; its point is
//! its device bytes (arena plus persistent bytes, what `sgc run` allocates) and its
//! recompute as a share of one step. Plans keep or recompute; the front does not offload
//! (no host link).
//!
//! Beside each plan, the best lower bound sgc proves on the recompute of any plan within
//! its peak ([`crate::plan::bound()`]: the cut bound, and for small graphs the integer
//! program's linear relaxation): the gap between a point and its bound is how far from
//! optimal that plan can be. Below every plan, the least-peak lower bound in device bytes
//! ([`crate::plan::least_device_bytes`]): how far left the front could reach at all.
//!
//! [`markdown`] prints the table; [`svg`] draws every strategy's points as a line against
//! device bytes, the bounds beside them and the least-peak bound as a dotted line.
//!
//! [`Strategy::searches_budget`]: crate::plan::strategies::Strategy::searches_budget
//! [`BudgetSweep`]: crate::plan::BudgetSweep
//! [`BudgetSweep::lowest_device_bytes`]: crate::plan::BudgetSweep::lowest_device_bytes

use crate::chart::{escape, legend, line, panel, points, LEFT, PANEL_H, RIGHT, TOP, W};
use crate::ir::{DeviceProfile, Graph};
use crate::plan::{strategies, BudgetSweep, Plan, PlanError, PlanOptions, RunConfig, Strategy};
use crate::units::human_bytes;
use serde::Serialize;
use std::fmt::Write;

/// What to sweep.
#[derive(Clone, Debug)]
pub struct ParetoOptions {
    /// The strategies, in the table's order.
    pub strategies: Vec<Strategy>,
    /// Budgets between the lowest and the unplanned device bytes (at least 2).
    pub budgets: usize,
    pub seed: u64,
    /// `sublinear`: generations of genetic refinement.
    pub genetic_iters: usize,
    pub workers: Option<usize>,
    pub device_profile: Option<DeviceProfile>,
    /// `optimal`: seconds per budget.
    pub time_limit_s: Option<u64>,
    /// Prove a lower bound beside every plan.
    pub bound: bool,
}

/// One plan of the front.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub strategy: String,
    /// The lowest budget it was planned for (`None`: a strategy that plans without one).
    pub budget: Option<u64>,
    /// How many budgets in a row gave this same plan.
    pub budgets: usize,
    /// Arena plus persistent bytes.
    pub device_bytes: u64,
    /// The memory model's peak.
    pub peak: u64,
    /// Recompute as a share of one step.
    pub recompute_share: f64,
    /// The least recompute any plan within `peak` can have (traced first-run order), and
    /// how it was proved.
    pub bound: Option<f64>,
    pub bound_method: Option<String>,
    /// The rules the plan follows when they are another strategy's (a `sublinear` budget
    /// met by eviction follows `dtr`'s).
    pub follows: Option<String>,
}

/// A budget a strategy could not meet, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Refusal {
    pub strategy: String,
    pub budget: Option<u64>,
    pub reason: String,
}

/// The front of every strategy.
#[derive(Clone, Debug, Serialize)]
pub struct Front {
    pub graph: String,
    /// Device bytes of the unplanned step (the baseline of every point).
    pub unplanned_device: u64,
    pub unplanned_peak: u64,
    /// The per-op lower bound on any plan's peak.
    pub lower_bound: u64,
    /// The least-peak lower bound in device bytes ([`crate::plan::least_device_bytes`]):
    /// no plan that keeps or recomputes, as every plan here does, needs fewer.
    pub least_device: u64,
    pub persistent_bytes: u64,
    pub cost_source: String,
    pub budgets: Vec<u64>,
    pub points: Vec<Point>,
    pub refused: Vec<Refusal>,
}

/// Plans `graph` with every strategy at every budget.
pub fn sweep(graph: &Graph, o: &ParetoOptions) -> Result<Front, PlanError> {
    let run = RunConfig {
        workers: o.workers,
        progress: None,
    };
    let base = PlanOptions {
        seed: o.seed,
        genetic_iters: o.genetic_iters,
        device_profile: o.device_profile.clone(),
        time_limit_s: o.time_limit_s,
        ..PlanOptions::default()
    };
    let with = |strategy| PlanOptions {
        strategy,
        ..base.clone()
    };
    let unplanned = crate::plan::plan(graph, &with(Strategy::None), &run)?;
    let sublinear = BudgetSweep::new(graph, &with(Strategy::Sublinear), &run)?;
    let high = device_bytes(graph, &unplanned);
    let low = sublinear.lowest_device_bytes().unwrap_or(high);
    let budgets = spread(low, high, o.budgets);
    let mut front = Front {
        graph: graph.name().unwrap_or("graph").to_string(),
        unplanned_device: device_bytes(graph, &unplanned),
        unplanned_peak: unplanned.summary.unplanned_peak,
        lower_bound: unplanned.summary.lower_bound,
        least_device: crate::plan::least_device_bytes(graph).bytes,
        persistent_bytes: graph.persistent_bytes(),
        cost_source: unplanned.summary.cost_source.clone(),
        budgets: budgets.clone(),
        points: Vec::new(),
        refused: Vec::new(),
    };
    for &s in &o.strategies {
        let plans = plans_of(graph, &with(s), &budgets, &sublinear, &run)?;
        for (budget, result) in plans {
            match result {
                Ok(p) => {
                    let same = front.points.last().is_some_and(|q: &Point| {
                        q.strategy == s.as_str()
                            && q.device_bytes == device_bytes(graph, &p)
                            && q.recompute_share == p.summary.recompute_share
                    });
                    match front.points.last_mut() {
                        Some(q) if same => q.budgets += 1,
                        _ => front.points.push(point(graph, s, budget, &p, o.bound)),
                    }
                }
                Err(e) => front.refused.push(Refusal {
                    strategy: s.to_string(),
                    budget,
                    reason: short(&e),
                }),
            }
        }
    }
    Ok(front)
}

/// `n` budgets evenly spaced from `low` to `high` (both included), without repeats.
fn spread(low: u64, high: u64, n: usize) -> Vec<u64> {
    let n = n.max(2) as u64;
    let mut out: Vec<u64> = (0..n)
        .map(|i| low + ((high.saturating_sub(low)) as u128 * i as u128 / (n - 1) as u128) as u64)
        .collect();
    out.dedup();
    out
}

fn device_bytes(graph: &Graph, p: &Plan) -> u64 {
    p.arena.as_ref().map_or(0, |a| a.size) + graph.persistent_bytes()
}

type Planned = Vec<(Option<u64>, Result<Plan, PlanError>)>;

/// The plans of one strategy: at every budget when it answers one (`sublinear`'s from its
/// candidate set, built once), else its one plan. A strategy that cannot run at all
/// here (its solver not built, the graph too large for it) is one refusal, not one per
/// budget.
fn plans_of(
    graph: &Graph,
    options: &PlanOptions,
    budgets: &[u64],
    sublinear: &BudgetSweep<'_>,
    run: &RunConfig<'_>,
) -> Result<Planned, PlanError> {
    let s = strategies::of(options.strategy);
    if !s.searches_budget() && !s.needs_budget() {
        return Ok(vec![(None, crate::plan::plan(graph, options, run))]);
    }
    if options.strategy == Strategy::Sublinear {
        return Ok(budgets
            .iter()
            .map(|&b| (Some(b), sublinear.plan(b)))
            .collect());
    }
    let mut out = Vec::new();
    for &b in budgets {
        let o = PlanOptions {
            budget: Some(b),
            ..options.clone()
        };
        let result = crate::plan::plan(graph, &o, run);
        let stop = matches!(
            result,
            Err(PlanError::Solver(_) | PlanError::InvalidOption(_) | PlanError::NotAChain(_))
        );
        out.push((Some(b), result));
        if stop {
            break;
        }
    }
    Ok(out)
}

fn point(graph: &Graph, s: Strategy, budget: Option<u64>, p: &Plan, bound: bool) -> Point {
    let proved = bound.then(|| crate::plan::bound(graph, p).ok()).flatten();
    Point {
        strategy: s.to_string(),
        budget,
        budgets: 1,
        device_bytes: device_bytes(graph, p),
        peak: p.summary.planned_peak,
        recompute_share: p.summary.recompute_share,
        bound: proved.as_ref().map(|b| b.recompute),
        bound_method: proved.map(|b| method(b.method).to_string()),
        follows: (p.options.strategy != s).then(|| p.options.strategy.to_string()),
    }
}

/// A bound's method in a few words.
fn method(m: crate::plan::BoundMethod) -> &'static str {
    match m {
        crate::plan::BoundMethod::Cut => "cut",
        crate::plan::BoundMethod::Relaxation => "LP relaxation",
        crate::plan::BoundMethod::Solver => "dual bound",
    }
}

/// A planner refusal in a few words for a table cell.
fn short(e: &PlanError) -> String {
    match e {
        PlanError::BudgetNotMet {
            best_device,
            best_peak,
            ..
        } => format!(
            "does not fit (lowest {})",
            human_bytes(best_device.unwrap_or(*best_peak))
        ),
        PlanError::BudgetBelowLowerBound { lower_bound, .. } => {
            format!("below the lower bound {}", human_bytes(*lower_bound))
        }
        e => e.to_string(),
    }
}

fn pct(share: f64) -> String {
    format!("{:.2}%", 100.0 * share)
}

/// The front as a markdown table, one row per plan, with each plan's bound and gap.
pub fn markdown(f: &Front) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: unplanned {} device bytes (peak {}), per-op lower bound {}, least-peak lower bound {} in device bytes (no plan that keeps or recomputes needs less), persistent {}; op costs: {}\n",
        f.graph,
        human_bytes(f.unplanned_device),
        human_bytes(f.unplanned_peak),
        human_bytes(f.lower_bound),
        human_bytes(f.least_device),
        human_bytes(f.persistent_bytes),
        f.cost_source
    );
    let _ = writeln!(
        o,
        "| strategy | budget | device bytes | vs unplanned | recompute | bound at its peak | within |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|");
    for p in &f.points {
        let name = match &p.follows {
            Some(rules) => format!("{} (as {rules})", p.strategy),
            None => p.strategy.clone(),
        };
        let (bound, gap) = match (p.bound, &p.bound_method) {
            (Some(b), Some(m)) => (
                format!("{} ({m})", pct(b)),
                pct((p.recompute_share - b).max(0.0)),
            ),
            _ => ("-".to_string(), "-".to_string()),
        };
        let budget = match (p.budget, p.budgets) {
            (None, _) => "-".to_string(),
            (Some(b), 1) => human_bytes(b),
            (Some(b), n) => format!("{} (and the next {})", human_bytes(b), n - 1),
        };
        let _ = writeln!(
            o,
            "| {name} | {budget} | {} | {:.3} | {} | {bound} | {gap} |",
            human_bytes(p.device_bytes),
            p.device_bytes as f64 / f.unplanned_device.max(1) as f64,
            pct(p.recompute_share),
        );
    }
    let mut refused: Vec<(&str, &str, Vec<Option<u64>>)> = Vec::new();
    for r in &f.refused {
        match refused
            .iter_mut()
            .find(|(s, why, _)| *s == r.strategy && *why == r.reason)
        {
            Some((_, _, at)) => at.push(r.budget),
            None => refused.push((&r.strategy, &r.reason, vec![r.budget])),
        }
    }
    for (strategy, why, at) in refused {
        let at: Vec<String> = at
            .iter()
            .map(|b| b.map_or("no budget".to_string(), human_bytes))
            .collect();
        let _ = writeln!(o, "\n{strategy} refused at {}: {why}", at.join(", "));
    }
    o
}

const COLORS: [&str; 7] = [
    "#555555", "#8e44ad", "#2a7f62", "#e4572e", "#1f77b4", "#d4a017", "#17becf",
];

/// Every strategy's points against device bytes as one SVG, bounds as grey points, the
/// unplanned device bytes as a vertical line.
pub fn svg(f: &Front) -> String {
    let height = TOP + PANEL_H + 70.0;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = write!(
        o,
        r#"<text x="{LEFT}" y="24" font-size="16">{}: recompute against device bytes, per strategy</text>"#,
        escape(&f.graph)
    );
    let xs = f.points.iter().map(|p| p.device_bytes);
    let xmin = xs
        .clone()
        .min()
        .unwrap_or(0)
        .min(f.unplanned_device)
        .min(f.least_device);
    let xmax = xs.max().unwrap_or(1).max(f.unplanned_device);
    let ymax = f
        .points
        .iter()
        .map(|p| p.recompute_share)
        .fold(0.01f64, f64::max)
        * 1.1;
    let x = |b: u64| LEFT + (b - xmin) as f64 / (xmax - xmin).max(1) as f64 * (W - LEFT - RIGHT);
    let y = |v: f64| TOP + PANEL_H - v / ymax * PANEL_H;
    let ticks: Vec<(f64, String)> = (0..=4)
        .map(|k| (f64::from(k) / 4.0, pct(ymax * f64::from(k) / 4.0)))
        .collect();
    panel(&mut o, TOP, "recompute / one step", &ticks);
    let ux = x(f.unplanned_device);
    let _ = write!(
        o,
        r##"<line x1="{ux:.1}" y1="{TOP}" x2="{ux:.1}" y2="{:.1}" stroke="#999" stroke-dasharray="4 3"/>"##,
        TOP + PANEL_H
    );
    let lx = x(f.least_device);
    let _ = write!(
        o,
        r##"<line x1="{lx:.1}" y1="{TOP}" x2="{lx:.1}" y2="{:.1}" stroke="#999" stroke-dasharray="1 3"/>"##,
        TOP + PANEL_H
    );
    let mut keys: Vec<(&str, String)> = Vec::new();
    let mut names: Vec<&str> = f.points.iter().map(|p| p.strategy.as_str()).collect();
    names.dedup();
    for (i, name) in names.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(u64, f64)> = f
            .points
            .iter()
            .filter(|p| p.strategy == *name)
            .map(|p| (p.device_bytes, p.recompute_share))
            .collect();
        pts.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let drawn: Vec<(f64, f64)> = pts.iter().map(|&(b, v)| (x(b), y(v))).collect();
        line(&mut o, &drawn, color);
        keys.push((color, name.to_string()));
    }
    let bounds: Vec<(f64, f64)> = f
        .points
        .iter()
        .filter_map(|p| p.bound.map(|b| (x(p.device_bytes), y(b))))
        .collect();
    if !bounds.is_empty() {
        points(&mut o, &bounds, "#bbbbbb");
        keys.push(("#bbbbbb", "bound at each plan's peak".to_string()));
    }
    let items: Vec<(&str, &str)> = keys.iter().map(|(c, l)| (*c, l.as_str())).collect();
    legend(&mut o, TOP - 12.0, &items);
    for (frac, label) in [(0.0, xmin), (0.5, (xmin + xmax) / 2), (1.0, xmax)] {
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + frac * (W - LEFT - RIGHT),
            TOP + PANEL_H + 18.0,
            escape(&human_bytes(label))
        );
    }
    let _ = write!(
        o,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">device bytes (arena + persistent); dashed: unplanned; dotted: the least-peak lower bound</text>"##,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        TOP + PANEL_H + 40.0
    );
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_spread_evenly_with_both_ends() {
        assert_eq!(spread(100, 200, 3), vec![100, 150, 200]);
        assert_eq!(spread(100, 100, 5), vec![100]);
        assert_eq!(spread(0, u64::MAX, 2), vec![0, u64::MAX]);
    }
}
