//! Memory pictures as self-contained SVG (no fonts, scripts or external files needed).
//!
//! Two views, stacked in one image:
//! - **resident bytes over steps**: one line per schedule (e.g. unplanned and planned), with
//!   horizontal lines for the per-op lower bound and any budget. Each schedule is drawn on
//!   its own step axis scaled to the same width, since a planned schedule has more steps
//!   (recomputation) than the traced order.
//! - **the arena**: every storage lifetime as a rectangle over step (x) and address (y);
//!   recomputed tensors are drawn in a second colour.

use crate::units::human_bytes;
use std::fmt::Write;

/// One line of the resident-bytes view.
pub struct Series {
    pub label: String,
    pub color: &'static str,
    /// Bytes resident at each step (persistent bytes included).
    pub values: Vec<u64>,
}

/// A horizontal reference line (lower bound, budget).
pub struct Level {
    pub label: String,
    pub color: &'static str,
    pub bytes: u64,
}

/// One tensor lifetime in the arena view.
pub struct Block {
    /// First and last step (inclusive).
    pub start: usize,
    pub end: usize,
    pub offset: u64,
    pub size: u64,
    pub recomputed: bool,
}

/// Everything to draw.
pub struct Chart {
    pub title: String,
    pub series: Vec<Series>,
    pub levels: Vec<Level>,
    /// The arena view: blocks, arena size and number of steps.
    pub arena: Option<(Vec<Block>, u64, usize)>,
}

const W: f64 = 960.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const PANEL_H: f64 = 300.0;
const TOP: f64 = 64.0;
const GAP: f64 = 84.0;

/// Renders the chart as an SVG document.
pub fn render_svg(chart: &Chart) -> String {
    let panels = if chart.arena.is_some() { 2.0 } else { 1.0 };
    let height = TOP + panels * PANEL_H + (panels - 1.0) * GAP + 50.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="16">{}</text>"#,
        escape(&chart.title)
    );
    resident_panel(&mut s, chart, TOP);
    if let Some((blocks, arena, steps)) = &chart.arena {
        arena_panel(&mut s, blocks, *arena, *steps, TOP + PANEL_H + GAP);
    }
    s.push_str("</svg>\n");
    s
}

fn resident_panel(s: &mut String, chart: &Chart, y0: f64) {
    let max = chart
        .series
        .iter()
        .flat_map(|x| x.values.iter().copied())
        .chain(chart.levels.iter().map(|l| l.bytes))
        .max()
        .unwrap_or(1)
        .max(1);
    let ymax = max as f64 * 1.05;
    let plot_w = W - LEFT - RIGHT;
    let y = |b: u64| y0 + PANEL_H - (b as f64 / ymax) * PANEL_H;
    axes(
        s,
        y0,
        ymax as u64,
        "resident bytes (persistent included)",
        "share of each schedule's steps (a plan with recomputation has more steps)",
    );
    x_ticks(s, y0, |f| format!("{:.0}%", 100.0 * f));
    for level in &chart.levels {
        let yy = y(level.bytes);
        let _ = write!(
            s,
            r#"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{}" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="{}">{} {}</text>"#,
            W - RIGHT,
            level.color,
            W - RIGHT - 4.0,
            yy - 4.0,
            level.color,
            escape(&level.label),
            human_bytes(level.bytes)
        );
    }
    for (k, series) in chart.series.iter().enumerate() {
        let n = series.values.len().max(1) as f64;
        let mut path = String::new();
        for (i, &v) in series.values.iter().enumerate() {
            let x0 = LEFT + i as f64 / n * plot_w;
            let x1 = LEFT + (i + 1) as f64 / n * plot_w;
            let cmd = if i == 0 { 'M' } else { 'L' };
            let _ = write!(path, "{cmd}{x0:.1},{:.1}L{x1:.1},{:.1}", y(v), y(v));
        }
        let _ = write!(
            s,
            r#"<path d="{path}" fill="none" stroke="{}" stroke-width="1.5"/>"#,
            series.color
        );
        let peak = series.values.iter().copied().max().unwrap_or(0);
        // Legends sit above the panel, side by side, so they never hide data.
        let ly = y0 - 10.0;
        let lx = LEFT + 420.0 * k as f64;
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="3" fill="{}"/><text x="{:.1}" y="{ly:.1}">{} (peak {}, {} steps)</text>"#,
            lx,
            ly - 5.0,
            series.color,
            lx + 18.0,
            escape(&series.label),
            human_bytes(peak),
            series.values.len()
        );
    }
}

fn arena_panel(s: &mut String, blocks: &[Block], arena: u64, steps: usize, y0: f64) {
    let plot_w = W - LEFT - RIGHT;
    let amax = arena.max(1) as f64;
    let n = steps.max(1) as f64;
    axes(
        s,
        y0,
        arena,
        "arena address",
        "step of the planned schedule",
    );
    for b in blocks {
        let x = LEFT + b.start as f64 / n * plot_w;
        let w = ((b.end + 1 - b.start) as f64 / n * plot_w).max(0.5);
        let h = (b.size as f64 / amax * PANEL_H).max(0.5);
        let yy = y0 + PANEL_H - (b.offset + b.size) as f64 / amax * PANEL_H;
        let fill = if b.recomputed { "#e4572e" } else { "#4a90d9" };
        let _ = write!(
            s,
            r##"<rect x="{x:.2}" y="{yy:.2}" width="{w:.2}" height="{h:.2}" fill="{fill}" fill-opacity="0.75" stroke="#1d3557" stroke-width="0.3"/>"##
        );
    }
    let ly = y0 - 10.0;
    let _ = write!(
        s,
        r##"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="#4a90d9"/><text x="{:.1}" y="{ly:.1}">tensor lifetime (darker where an op writes in place)</text><rect x="{:.1}" y="{:.1}" width="10" height="10" fill="#e4572e"/><text x="{:.1}" y="{ly:.1}">recomputed tensor; arena {}</text>"##,
        LEFT,
        ly - 9.0,
        LEFT + 16.0,
        LEFT + 380.0,
        ly - 9.0,
        LEFT + 396.0,
        human_bytes(arena)
    );
    x_ticks(s, y0, |f| format!("{}", (f * n).round() as u64));
}

/// Five labelled ticks under a panel's x axis; `label` maps the fraction of the width.
fn x_ticks(s: &mut String, y0: f64, label: impl Fn(f64) -> String) {
    let yb = y0 + PANEL_H;
    for i in 0..=4 {
        let f = i as f64 / 4.0;
        let x = LEFT + f * (W - LEFT - RIGHT);
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{yb}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"##,
            yb + 4.0,
            yb + 16.0,
            escape(&label(f))
        );
    }
}

fn axes(s: &mut String, y0: f64, ymax: u64, ylabel: &str, xlabel: &str) {
    let x1 = W - RIGHT;
    let yb = y0 + PANEL_H;
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{y0}" x2="{LEFT}" y2="{yb}" stroke="#333"/><line x1="{LEFT}" y1="{yb}" x2="{x1}" y2="{yb}" stroke="#333"/>"##
    );
    for i in 0..=4 {
        let frac = i as f64 / 4.0;
        let yy = yb - frac * PANEL_H;
        let _ = write!(
            s,
            r##"<line x1="{:.1}" y1="{yy:.1}" x2="{x1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT,
            LEFT - 6.0,
            yy + 4.0,
            human_bytes((ymax as f64 * frac) as u64)
        );
    }
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">{}</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle" fill="#333">{}</text>"##,
        LEFT + (x1 - LEFT) / 2.0,
        yb + 32.0,
        escape(xlabel),
        y0 + PANEL_H / 2.0,
        y0 + PANEL_H / 2.0,
        escape(ylabel)
    );
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_one_rect_per_block_and_both_series() {
        let chart = Chart {
            title: "t <1>".into(),
            series: vec![
                Series {
                    label: "unplanned".into(),
                    color: "#888",
                    values: vec![1, 5, 3],
                },
                Series {
                    label: "planned".into(),
                    color: "#06c",
                    values: vec![1, 2, 2, 3],
                },
            ],
            levels: vec![Level {
                label: "lower bound".into(),
                color: "#2a2",
                bytes: 2,
            }],
            arena: Some((
                vec![
                    Block {
                        start: 0,
                        end: 1,
                        offset: 0,
                        size: 2,
                        recomputed: false,
                    },
                    Block {
                        start: 2,
                        end: 3,
                        offset: 0,
                        size: 3,
                        recomputed: true,
                    },
                ],
                3,
                4,
            )),
        };
        let svg = render_svg(&chart);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("t &lt;1&gt;"));
        assert_eq!(svg.matches("fill-opacity=\"0.75\"").count(), 2);
        assert!(svg.contains("unplanned (peak 5 B, 3 steps)"));
        assert!(svg.contains("planned (peak 3 B, 4 steps)"));
    }
}
