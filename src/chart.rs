//! Chart primitives for the self-contained SVGs of `sgc dtr-sweep` and `sgc pareto` (no
//! fonts, scripts or external files): a panel's axes, a polyline with its points, a
//! legend, all on one layout (a 960-pixel-wide image, panels 260 pixels high).

use std::fmt::Write;

pub const W: f64 = 960.0;
pub const LEFT: f64 = 90.0;
pub const RIGHT: f64 = 20.0;
pub const PANEL_H: f64 = 260.0;
pub const TOP: f64 = 70.0;
pub const GAP: f64 = 90.0;

/// Axes of one panel; `ticks` are (fraction of the height, label).
pub fn panel(o: &mut String, y0: f64, ylabel: &str, ticks: &[(f64, String)]) {
    let yb = y0 + PANEL_H;
    let x1 = W - RIGHT;
    let _ = write!(
        o,
        r##"<line x1="{LEFT}" y1="{y0}" x2="{LEFT}" y2="{yb}" stroke="#333"/><line x1="{LEFT}" y1="{yb}" x2="{x1}" y2="{yb}" stroke="#333"/>"##
    );
    for (f, label) in ticks {
        let yy = yb - f * PANEL_H;
        let _ = write!(
            o,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{x1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT - 6.0,
            yy + 4.0,
            escape(label)
        );
    }
    let _ = write!(
        o,
        r##"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle" fill="#333">{}</text>"##,
        y0 + PANEL_H / 2.0,
        y0 + PANEL_H / 2.0,
        escape(ylabel)
    );
}

pub fn line(o: &mut String, pts: &[(f64, f64)], color: &str) {
    if pts.is_empty() {
        return;
    }
    let d: String = pts
        .iter()
        .enumerate()
        .map(|(i, (x, y))| format!("{}{x:.1},{y:.1}", if i == 0 { 'M' } else { 'L' }))
        .collect();
    let _ = write!(
        o,
        r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="2"/>"#
    );
    points(o, pts, color);
}

pub fn points(o: &mut String, pts: &[(f64, f64)], color: &str) {
    for (x, y) in pts {
        let _ = write!(
            o,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{color}"/>"#
        );
    }
}

pub fn legend(o: &mut String, y: f64, items: &[(&str, &str)]) {
    let mut lx = LEFT;
    for (color, label) in items {
        let _ = write!(
            o,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="4" fill="{color}"/><text x="{:.1}" y="{y:.1}">{}</text>"#,
            y - 5.0,
            lx + 16.0,
            escape(label)
        );
        lx += 24.0 + 6.6 * label.len() as f64;
    }
}

pub fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
