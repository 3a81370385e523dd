//! Memory pictures as self-contained SVG (no fonts, scripts or external files needed).
//!
//! Two views, stacked in one image:
//! - **resident bytes over steps**: one line per schedule (e.g. unplanned and planned), with
//!   horizontal lines for the per-op lower bound and any budget. Each schedule is drawn on
//!   its own step axis scaled to the same width, since a planned schedule has more steps
//!   (recomputation) than the traced order.
//! - **the arena**: every storage lifetime as a rectangle over step (x) and address (y);
//!   recomputed tensors are drawn in a second colour, offloaded ones (the device part of a
//!   storage copied to host memory and back) in a third.
//! - **the copy lanes** (plans with offloads): beside the compute stream, one lane for the
//!   copies to host and one for the copies back, on the arena's step axis, each copy a bar
//!   from where it starts to where it ends (a caller maps the replay's times to steps);
//!   the compute lane marks the steps that waited for a copy.

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

/// What a lifetime in the arena view is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    Kept,
    Recomputed,
    /// One of the two device instances of an offloaded storage.
    Offloaded,
}

impl BlockKind {
    fn color(self) -> &'static str {
        match self {
            BlockKind::Kept => "#4a90d9",
            BlockKind::Recomputed => "#e4572e",
            BlockKind::Offloaded => "#8e44ad",
        }
    }
}

/// One tensor lifetime in the arena view.
pub struct Block {
    /// First and last step (inclusive).
    pub start: usize,
    pub end: usize,
    pub offset: u64,
    pub size: u64,
    pub kind: BlockKind,
}

/// The copy lanes, on the step axis of the arena view.
pub struct Lanes {
    /// Steps of the schedule (the x axis).
    pub steps: usize,
    /// Each copy to host as (start, end), in steps (fractional: within a step).
    pub to_host: Vec<(f64, f64)>,
    /// Each copy back to the device, the same way.
    pub to_device: Vec<(f64, f64)>,
    /// Steps the compute stream waited for a copy before.
    pub stalls: Vec<usize>,
    /// What the copies cost, shown above the lanes.
    pub note: String,
}

/// Everything to draw.
pub struct Chart {
    pub title: String,
    pub series: Vec<Series>,
    pub levels: Vec<Level>,
    /// The arena view: blocks, arena size and number of steps.
    pub arena: Option<(Vec<Block>, u64, usize)>,
    /// The copy lanes (plans with offloads).
    pub lanes: Option<Lanes>,
}

const W: f64 = 960.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const PANEL_H: f64 = 300.0;
const TOP: f64 = 64.0;
const GAP: f64 = 84.0;
const LANE_H: f64 = 22.0;
/// Compute, to host, to device.
const LANES: [&str; 3] = ["compute", "to host", "to device"];
const TO_HOST: &str = "#f4a261";
const TO_DEVICE: &str = "#2a9d8f";
const STALL: &str = "#c1121f";

/// Renders the chart as an SVG document.
pub fn render_svg(chart: &Chart) -> String {
    let panels = if chart.arena.is_some() { 2.0 } else { 1.0 };
    let lanes_y = TOP + panels * PANEL_H + panels * GAP;
    let lanes_h = chart
        .lanes
        .as_ref()
        .map_or(0.0, |_| GAP + LANES.len() as f64 * LANE_H);
    let height = TOP + panels * PANEL_H + (panels - 1.0) * GAP + lanes_h + 50.0;
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
    if let Some(lanes) = &chart.lanes {
        lanes_panel(&mut s, lanes, lanes_y);
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
        let fill = b.kind.color();
        let _ = write!(
            s,
            r##"<rect x="{x:.2}" y="{yy:.2}" width="{w:.2}" height="{h:.2}" fill="{fill}" fill-opacity="0.75" stroke="#1d3557" stroke-width="0.3"/>"##
        );
    }
    let ly = y0 - 10.0;
    let _ = write!(
        s,
        r##"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="#4a90d9"/><text x="{:.1}" y="{ly:.1}">tensor lifetime (darker where an op writes in place)</text><rect x="{:.1}" y="{:.1}" width="10" height="10" fill="#e4572e"/><text x="{:.1}" y="{ly:.1}">recomputed tensor</text><rect x="{:.1}" y="{:.1}" width="10" height="10" fill="#8e44ad"/><text x="{:.1}" y="{ly:.1}">offloaded (before its copy to host, after its fetch); arena {}</text>"##,
        LEFT,
        ly - 9.0,
        LEFT + 16.0,
        LEFT + 330.0,
        ly - 9.0,
        LEFT + 346.0,
        LEFT + 470.0,
        ly - 9.0,
        LEFT + 486.0,
        human_bytes(arena)
    );
    x_ticks(s, y0, |f| format!("{}", (f * n).round() as u64));
}

/// The compute lane and the two copy lanes (see the module docs).
fn lanes_panel(s: &mut String, lanes: &Lanes, y0: f64) {
    let plot_w = W - LEFT - RIGHT;
    let n = lanes.steps.max(1) as f64;
    let x = |step: f64| LEFT + step / n * plot_w;
    let _ = write!(
        s,
        r#"<text x="{LEFT}" y="{:.1}">copies beside compute: {}</text>"#,
        y0 - 10.0,
        escape(&lanes.note)
    );
    for (row, label) in LANES.iter().enumerate() {
        let yy = y0 + row as f64 * LANE_H;
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ddd"/>"##,
            LEFT - 6.0,
            yy + LANE_H * 0.65,
            yy + LANE_H,
            W - RIGHT,
            yy + LANE_H
        );
    }
    let bar = |s: &mut String, row: usize, (a, b): (f64, f64), fill: &str| {
        let _ = write!(
            s,
            r##"<rect x="{:.2}" y="{:.1}" width="{:.2}" height="{:.1}" fill="{fill}" stroke="#333" stroke-width="0.3"/>"##,
            x(a),
            y0 + row as f64 * LANE_H + 3.0,
            (x(b) - x(a)).max(1.0),
            LANE_H - 6.0
        );
    };
    bar(s, 0, (0.0, n), "#cccccc");
    for &step in &lanes.stalls {
        bar(s, 0, (step as f64, step as f64), STALL);
    }
    for &span in &lanes.to_host {
        bar(s, 1, span, TO_HOST);
    }
    for &span in &lanes.to_device {
        bar(s, 2, span, TO_DEVICE);
    }
    let yb = y0 + LANES.len() as f64 * LANE_H;
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">step of the planned schedule (red: the compute stream waits for a copy)</text>"##,
        LEFT + plot_w / 2.0,
        yb + 16.0
    );
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
                        kind: BlockKind::Kept,
                    },
                    Block {
                        start: 2,
                        end: 3,
                        offset: 0,
                        size: 3,
                        kind: BlockKind::Recomputed,
                    },
                ],
                3,
                4,
            )),
            lanes: None,
        };
        let svg = render_svg(&chart);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("t &lt;1&gt;"));
        assert_eq!(svg.matches("fill-opacity=\"0.75\"").count(), 2);
        assert!(svg.contains("unplanned (peak 5 B, 3 steps)"));
        assert!(svg.contains("planned (peak 3 B, 4 steps)"));
        assert!(!svg.contains("copies beside compute"));
    }

    #[test]
    fn lanes_draw_one_bar_per_copy_and_the_stalls() {
        let chart = Chart {
            title: "t".into(),
            series: Vec::new(),
            levels: Vec::new(),
            arena: None,
            lanes: Some(Lanes {
                steps: 10,
                to_host: vec![(1.0, 2.5), (3.0, 3.2)],
                to_device: vec![(7.0, 8.0)],
                stalls: vec![8],
                note: "exposed 1 µs".into(),
            }),
        };
        let svg = render_svg(&chart);
        assert_eq!(svg.matches(&format!("fill=\"{TO_HOST}\"")).count(), 2);
        assert_eq!(svg.matches(&format!("fill=\"{TO_DEVICE}\"")).count(), 1);
        assert_eq!(svg.matches(&format!("fill=\"{STALL}\"")).count(), 1);
        for label in LANES {
            assert!(svg.contains(&format!(">{label}</text>")), "{label}");
        }
        assert!(svg.contains("copies beside compute: exposed 1 µs"));
    }
}
