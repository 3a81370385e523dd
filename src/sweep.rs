//! `sgc dtr-sweep`: run-time DTR simulated at a range of eviction thresholds on one device,
//! beside the static plan (`sgc plan --budget`) at the same device bytes.
//!
//! For each threshold the DTR engine runs in simulation ([`crate::exec::dtr::Simulator`]:
//! the executor's code path, op times from the graph's cost) in a pool of the device's
//! bytes, and reports the live peak, the pool bytes touched (the highest address the
//! allocator handed out: what the device had to give), evictions, recomputations,
//! defragmentations and the step's cost against the unplanned step. OOM or thrashing is a
//! row's outcome, not an error. Beside it, the static planner (`sublinear`, every budget
//! planned from one search) at two budgets: the threshold itself (what `sgc plan --budget
//! THRESHOLD` gives), and the bytes DTR actually touched (the same device bytes, to compare
//! recompute at equal memory).
//!
//! [`markdown`] prints the table; [`svg`] draws the two curves of MegEngine's DTR guide,
//! step cost and peak against the threshold, with the static plans as points.

use crate::chart::{escape, legend, line, panel, points, GAP, LEFT, PANEL_H, RIGHT, TOP, W};
use crate::exec::dtr::{DtrOptions, DtrReport, Simulator};
use crate::ir::{DeviceProfile, Graph};
use crate::plan::{PlanOptions, Strategy};
use crate::units::human_bytes;
use serde::Serialize;
use std::fmt::Write;

/// What to sweep.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// Device bytes (the DTR pool).
    pub memory: u64,
    pub thresholds: Vec<u64>,
    pub evictee_min_size: u64,
    pub sqrt_sampling: bool,
    pub seed: u64,
    /// Op times (and the copy bandwidth of defragmentation).
    pub device_profile: Option<DeviceProfile>,
    /// Plan the static comparison too.
    pub static_plans: bool,
    pub genetic_iters: usize,
    pub workers: Option<usize>,
}

/// One static plan: device bytes (arena + persistent) and recompute share.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StaticPoint {
    pub budget: u64,
    pub device_bytes: u64,
    pub recompute_share: f64,
    pub strategy: String,
}

/// One threshold's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct SweepRow {
    pub threshold: u64,
    /// The DTR simulation, or why it stopped (out of memory, thrashing).
    pub dtr: Result<DtrReport, String>,
    /// The static plan at the threshold as budget, or why there is none.
    pub static_at_threshold: Option<Result<StaticPoint, String>>,
    /// The static plan at the bytes DTR touched.
    pub static_at_touched: Option<Result<StaticPoint, String>>,
}

/// The whole sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Sweep {
    pub graph: String,
    pub memory: u64,
    pub evictee_min_size: u64,
    pub sqrt_sampling: bool,
    pub cost_source: String,
    /// Bandwidth at which compaction copies are timed (the profile's), in GB/s; `None`:
    /// copies take no time (no profile, costs in the graph's own unit).
    pub copy_gbps: Option<f64>,
    pub unplanned_peak: u64,
    pub lower_bound: u64,
    pub persistent_bytes: u64,
    /// Cost of one unplanned step.
    pub step_cost: f64,
    pub rows: Vec<SweepRow>,
}

impl SweepRow {
    /// DTR's step cost over the unplanned step's (recomputation and modelled copies).
    pub fn dtr_step_ratio(&self, step_cost: f64) -> Option<f64> {
        let r = self.dtr.as_ref().ok()?;
        let c = &r.counters;
        let steps = c.steps.max(1) as f64;
        Some((c.compute + c.recompute + c.defrag) / steps / step_cost.max(f64::MIN_POSITIVE))
    }
}

/// Parses `A..B` (nine evenly spaced thresholds from A to B), `A..B:STEP`, or a list
/// `A,B,C`; sizes as `sgc::units::parse_size` reads them.
pub fn parse_thresholds(text: &str) -> Result<Vec<u64>, String> {
    let size = crate::units::parse_size;
    if let Some((a, rest)) = text.split_once("..") {
        let (b, step) = match rest.split_once(':') {
            Some((b, s)) => (b, Some(size(s)?)),
            None => (rest, None),
        };
        let (a, b) = (size(a)?, size(b)?);
        if b < a {
            return Err(format!("invalid range {text:?}: it ends below its start"));
        }
        let step = step.unwrap_or((b - a) / 8).max(1);
        let mut v: Vec<u64> = (0..)
            .map(|i| a + i * step)
            .take_while(|&t| t <= b)
            .collect();
        if v.len() > 1000 {
            return Err(format!("invalid range {text:?}: more than 1000 thresholds"));
        }
        if v.last() != Some(&b) {
            v.push(b);
        }
        return Ok(v);
    }
    text.split(',').map(|s| size(s.trim())).collect()
}

/// Runs the sweep; `progress(done, total)` after each threshold.
pub fn sweep(
    graph: &Graph,
    options: &SweepOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<Sweep, Box<dyn std::error::Error>> {
    let mut rows = Vec::new();
    for (k, &threshold) in options.thresholds.iter().enumerate() {
        let dtr = DtrOptions {
            memory: options.memory,
            eviction_threshold: Some(threshold),
            evictee_min_size: options.evictee_min_size,
            sqrt_sampling: options.sqrt_sampling,
            seed: options.seed,
            device_profile: options.device_profile.clone(),
            ..DtrOptions::new(options.memory)
        };
        let outcome = Simulator::new(graph, &dtr).and_then(|mut s| s.step().map(|_| s.report()));
        rows.push(SweepRow {
            threshold,
            dtr: outcome.map_err(|e| e.to_string()),
            static_at_threshold: None,
            static_at_touched: None,
        });
        progress(k + 1, options.thresholds.len());
    }
    if options.static_plans {
        plan_static(graph, options, &mut rows)?;
    }
    let profile = graph.memory_profile();
    let first = rows.iter().find_map(|r| r.dtr.as_ref().ok());
    let probe;
    let report = match first {
        Some(r) => r,
        None => {
            probe = crate::exec::dtr::simulate(
                graph,
                &DtrOptions {
                    device_profile: options.device_profile.clone(),
                    ..DtrOptions::new(u64::MAX / 2)
                },
                0,
            )?;
            &probe
        }
    };
    Ok(Sweep {
        graph: graph.name().unwrap_or("graph").to_string(),
        memory: options.memory,
        evictee_min_size: options.evictee_min_size,
        sqrt_sampling: options.sqrt_sampling,
        cost_source: report.cost_source.clone(),
        copy_gbps: options.device_profile.as_ref().map(|d| d.bandwidth_gbps()),
        unplanned_peak: profile.peak,
        lower_bound: graph.lower_bound().bytes,
        persistent_bytes: graph.persistent_bytes(),
        step_cost: report.step_cost,
        rows,
    })
}

/// The static plans of every row, from one search.
fn plan_static(
    graph: &Graph,
    options: &SweepOptions,
    rows: &mut [SweepRow],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut budgets: Vec<u64> = rows.iter().map(|r| r.threshold).collect();
    budgets.extend(
        rows.iter()
            .filter_map(|r| r.dtr.as_ref().ok().map(|d| d.pool.touched_bytes)),
    );
    budgets.sort_unstable();
    budgets.dedup();
    let plan_options = PlanOptions {
        strategy: Strategy::Sublinear,
        seed: options.seed,
        genetic_iters: options.genetic_iters,
        device_profile: options.device_profile.clone(),
        ..Default::default()
    };
    let run = crate::plan::RunConfig {
        workers: options.workers,
        progress: None,
    };
    let plans = crate::plan::plan_budgets(graph, &plan_options, &budgets, &run)?;
    let persistent = graph.persistent_bytes();
    let point = |b: u64| -> Result<StaticPoint, String> {
        let i = budgets
            .binary_search(&b)
            .map_err(|_| "not planned".to_string())?;
        match &plans[i] {
            Ok(p) => Ok(StaticPoint {
                budget: b,
                device_bytes: p.arena.as_ref().map_or(0, |a| a.size) + persistent,
                recompute_share: p.summary.recompute_share,
                strategy: p.options.strategy.to_string(),
            }),
            Err(e) => Err(short_plan_error(e)),
        }
    };
    for r in rows.iter_mut() {
        r.static_at_threshold = Some(point(r.threshold));
        r.static_at_touched = r.dtr.as_ref().ok().map(|d| point(d.pool.touched_bytes));
    }
    Ok(())
}

/// A planner refusal in a few words for a table cell.
fn short_plan_error(e: &crate::plan::PlanError) -> String {
    use crate::plan::PlanError as E;
    match e {
        E::BudgetNotMet {
            best_device,
            best_peak,
            ..
        } => format!(
            "does not fit (lowest {})",
            gb(best_device.unwrap_or(*best_peak))
        ),
        E::BudgetBelowLowerBound { lower_bound, .. } => {
            format!("below the lower bound {}", gb(*lower_bound))
        }
        e => e.to_string(),
    }
}

/// Bytes in decimal units, as thresholds are typed: `812 B`, `16.38 kB`, `2.00 GB`.
fn gb(bytes: u64) -> String {
    const UNITS: [(&str, f64); 4] = [("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)];
    let b = bytes as f64;
    match UNITS.iter().find(|(_, scale)| b >= *scale) {
        Some((unit, scale)) => format!("{:.2} {unit}", b / scale),
        None => format!("{bytes} B"),
    }
}

fn pct(share: f64) -> String {
    format!("{:.1}%", 100.0 * share)
}

/// A row's DTR outcome in a few words, when it did not finish.
fn failure(msg: &str) -> String {
    if msg.starts_with("out of memory") {
        let at = msg.split('`').nth(1).unwrap_or("?");
        format!("OOM at `{at}`")
    } else if msg.contains("thrashes") {
        "thrashes (recompute limit)".to_string()
    } else {
        msg.to_string()
    }
}

/// The sweep as a markdown table, with the bounds above it.
pub fn markdown(s: &Sweep) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "`{}` on a {} device (decimal units): unplanned peak {}, per-op lower bound {}, persistent {}; op times: {}; compaction copies {}; evictee min size {}{}.",
        s.graph,
        gb(s.memory),
        gb(s.unplanned_peak),
        gb(s.lower_bound),
        gb(s.persistent_bytes),
        s.cost_source,
        s.copy_gbps.map_or("untimed (no device profile)".to_string(), |b| format!(
            "read and written at {b} GB/s"
        )),
        human_bytes(s.evictee_min_size),
        if s.sqrt_sampling { ", sqrt sampling" } else { "" }
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| threshold | DTR live peak | DTR pool touched | evictions | recomputes | defrags (moved) | DTR recompute | DTR step / unplanned | static @ touched: device, recompute | static @ threshold: device, recompute |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
    let cell = |p: &Option<Result<StaticPoint, String>>| match p {
        None => "-".to_string(),
        Some(Ok(p)) => format!("{}, {}", gb(p.device_bytes), pct(p.recompute_share)),
        Some(Err(e)) => e.clone(),
    };
    for r in &s.rows {
        match &r.dtr {
            Ok(d) => {
                let c = &d.counters;
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} ({}) | {} | {:.3}x | {} | {} |",
                    gb(r.threshold),
                    gb(d.pool.peak_live_bytes),
                    gb(d.pool.touched_bytes),
                    c.evictions,
                    c.recomputes,
                    c.defrags,
                    gb(c.moved_bytes),
                    pct(d.recompute_share),
                    r.dtr_step_ratio(s.step_cost).unwrap_or(0.0),
                    cell(&r.static_at_touched),
                    cell(&r.static_at_threshold)
                );
            }
            Err(e) => {
                let _ = writeln!(
                    out,
                    "| {} | {} | | | | | | | - | {} |",
                    gb(r.threshold),
                    failure(e),
                    cell(&r.static_at_threshold)
                );
            }
        }
    }
    out
}

/// Per threshold where DTR fits: whether the static plan at DTR's touched bytes fits them
/// at lower (or equal) recompute; `(threshold, verdict)`.
pub fn verdicts(s: &Sweep) -> Vec<(u64, Result<(), String>)> {
    s.rows
        .iter()
        .filter_map(|r| {
            let d = r.dtr.as_ref().ok()?;
            let v = match &r.static_at_touched {
                Some(Ok(p)) if p.recompute_share <= d.recompute_share => Ok(()),
                Some(Ok(p)) => Err(format!(
                    "the static plan at {} recomputes {} against DTR's {}",
                    gb(d.pool.touched_bytes),
                    pct(p.recompute_share),
                    pct(d.recompute_share)
                )),
                Some(Err(e)) => Err(format!(
                    "no static plan fits DTR's {}: {e}",
                    gb(d.pool.touched_bytes)
                )),
                None => Err("not planned".into()),
            };
            Some((r.threshold, v))
        })
        .collect()
}

/// The two curves of MegEngine's guide as a self-contained SVG: step cost (over the
/// unplanned step) and peak bytes against the threshold; the static plan at each threshold
/// as a point; out-of-memory thresholds marked.
pub fn svg(s: &Sweep) -> String {
    let height = TOP + 2.0 * PANEL_H + GAP + 60.0;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = write!(
        o,
        r#"<text x="{LEFT}" y="24" font-size="16">{}: run-time DTR on a {} device vs the static plan</text>"#,
        escape(&s.graph),
        gb(s.memory)
    );
    let _ = write!(
        o,
        r##"<text x="{LEFT}" y="42" fill="#555">op times: {}; evictee min size {}</text>"##,
        escape(&s.cost_source),
        human_bytes(s.evictee_min_size)
    );
    let xs: Vec<u64> = s.rows.iter().map(|r| r.threshold).collect();
    let (xmin, xmax) = (
        xs.iter().copied().min().unwrap_or(0),
        xs.iter().copied().max().unwrap_or(1),
    );
    let x = |t: u64| {
        let span = (xmax - xmin).max(1) as f64;
        LEFT + (t - xmin) as f64 / span * (W - LEFT - RIGHT)
    };
    // Panel 1: step cost.
    let dtr_time: Vec<(u64, f64)> = s
        .rows
        .iter()
        .filter_map(|r| r.dtr_step_ratio(s.step_cost).map(|v| (r.threshold, v)))
        .collect();
    let static_time: Vec<(u64, f64)> = s
        .rows
        .iter()
        .filter_map(|r| match &r.static_at_threshold {
            Some(Ok(p)) => Some((r.threshold, 1.0 + p.recompute_share)),
            _ => None,
        })
        .collect();
    // Step cost on a log2 axis from 1x (thrashing reaches tens of times the step).
    let top = dtr_time
        .iter()
        .chain(&static_time)
        .map(|p| p.1)
        .fold(2.0f64, f64::max)
        .log2()
        .ceil();
    let y0 = TOP;
    let ticks: Vec<(f64, String)> = (0..=top as i32)
        .map(|k| (f64::from(k) / top, format!("{}x", 1u64 << k)))
        .collect();
    panel(&mut o, y0, "step cost / unplanned step (log scale)", &ticks);
    let ty = |v: f64| y0 + PANEL_H - v.max(1.0).log2() / top * PANEL_H;
    line(
        &mut o,
        &dtr_time
            .iter()
            .map(|&(t, v)| (x(t), ty(v)))
            .collect::<Vec<_>>(),
        "#e4572e",
    );
    points(
        &mut o,
        &static_time
            .iter()
            .map(|&(t, v)| (x(t), ty(v)))
            .collect::<Vec<_>>(),
        "#2a7f62",
    );
    legend(
        &mut o,
        y0 - 8.0,
        &[
            (
                "#e4572e",
                "run-time DTR (recompute + defragmentation copies)",
            ),
            ("#2a7f62", "static plan at the threshold as budget"),
        ],
    );
    // Panel 2: peak bytes.
    let y1 = TOP + PANEL_H + GAP;
    let dtr_series = |pick: fn(&DtrReport) -> u64| -> Vec<(u64, u64)> {
        s.rows
            .iter()
            .filter_map(|r| r.dtr.as_ref().ok().map(|d| (r.threshold, pick(d))))
            .collect()
    };
    let live = dtr_series(|d| d.pool.peak_live_bytes);
    let touched = dtr_series(|d| d.pool.touched_bytes);
    let stat: Vec<(u64, u64)> = s
        .rows
        .iter()
        .filter_map(|r| match &r.static_at_threshold {
            Some(Ok(p)) => Some((r.threshold, p.device_bytes)),
            _ => None,
        })
        .collect();
    let bmax = (live
        .iter()
        .chain(&touched)
        .chain(&stat)
        .map(|p| p.1)
        .max()
        .unwrap_or(1))
    .max(xmax)
    .max(s.memory) as f64
        * 1.05;
    let ticks: Vec<(f64, String)> = (0..=4)
        .map(|i| {
            let f = f64::from(i) / 4.0;
            (f, gb((f * bmax) as u64))
        })
        .collect();
    panel(&mut o, y1, "bytes", &ticks);
    let by = |b: u64| y1 + PANEL_H - b as f64 / bmax * PANEL_H;
    // The threshold itself and the device.
    line(
        &mut o,
        &[(x(xmin), by(xmin)), (x(xmax), by(xmax))],
        "#bbbbbb",
    );
    let _ = write!(
        o,
        r##"<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}" text-anchor="end">device {}</text>"##,
        by(s.memory),
        W - RIGHT,
        by(s.memory),
        W - RIGHT - 4.0,
        by(s.memory) - 4.0,
        gb(s.memory)
    );
    line(
        &mut o,
        &live.iter().map(|&(t, v)| (x(t), by(v))).collect::<Vec<_>>(),
        "#e4572e",
    );
    line(
        &mut o,
        &touched
            .iter()
            .map(|&(t, v)| (x(t), by(v)))
            .collect::<Vec<_>>(),
        "#7b2cbf",
    );
    points(
        &mut o,
        &stat.iter().map(|&(t, v)| (x(t), by(v))).collect::<Vec<_>>(),
        "#2a7f62",
    );
    for r in s.rows.iter().filter(|r| r.dtr.is_err()) {
        let _ = write!(
            o,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#c00">{}</text>"##,
            x(r.threshold),
            y1 + PANEL_H - 6.0,
            if r.dtr
                .as_ref()
                .err()
                .is_some_and(|e| e.starts_with("out of memory"))
            {
                "OOM"
            } else {
                "thrash"
            }
        );
    }
    legend(
        &mut o,
        y1 - 8.0,
        &[
            ("#e4572e", "DTR live peak"),
            ("#7b2cbf", "DTR pool bytes touched"),
            ("#2a7f62", "static plan: device bytes"),
            ("#bbbbbb", "threshold"),
        ],
    );
    // X axis labels.
    for &t in &xs {
        for yb in [y0 + PANEL_H, y1 + PANEL_H] {
            let _ = write!(
                o,
                r##"<line x1="{:.1}" y1="{yb}" x2="{:.1}" y2="{:.1}" stroke="#333"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                x(t),
                x(t),
                yb + 4.0,
                x(t),
                yb + 16.0,
                gb(t)
            );
        }
    }
    let _ = write!(
        o,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">eviction threshold</text>"##,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        y1 + PANEL_H + 36.0
    );
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_as_ranges_and_lists() {
        let g = 1_000_000_000;
        assert_eq!(
            parse_thresholds("2GB..10GB").unwrap(),
            (2..=10).map(|i| i * g).collect::<Vec<_>>()
        );
        assert_eq!(
            parse_thresholds("1GB..2GB:400MB").unwrap(),
            vec![g, 1_400_000_000, 1_800_000_000, 2 * g]
        );
        assert_eq!(parse_thresholds("1GB, 3GB").unwrap(), vec![g, 3 * g]);
        assert!(parse_thresholds("3GB..1GB").is_err());
        assert!(parse_thresholds("1GB..x").is_err());
    }
}
