//! Progress for commands that can run for seconds (`plan`, `run`, `fit`, `compare`): a bar on
//! stderr, drawn only when stderr is a terminal and `--quiet` is not given, so pipes, files
//! and tests see only the report.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// A bar of `len` units with `template` (indicatif's syntax), or `None` when nothing is to
/// be drawn.
pub fn bar(quiet: bool, len: u64, template: &str) -> Option<ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    Some(bar)
}

/// Clears a bar, if there is one.
pub fn done(bar: &Option<ProgressBar>) {
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}
