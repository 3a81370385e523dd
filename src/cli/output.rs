//! Writing a command's output file: never over one of its inputs, always whole.
//!
//! Every command that writes a file (`plan -o`, `rescale -o`, `cost -o`, `profile -o`, `alloc -o`,
//! `plot -o`, `compare --write-baseline`) first refuses an output path that names one of its inputs (the same file by
//! any path: it would lose the input), then writes through `sgc_ir::file::write_atomic`:
//! a temporary file beside the output, renamed into place, so an interrupted run leaves the
//! old file. A missing folder of the output is made.

use super::CliResult;
use std::path::Path;

/// Whether two paths name the same file (the output may not exist yet).
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Refuses `output` when it names any of `inputs`.
pub fn refuse_input(output: &Path, inputs: &[&Path]) -> CliResult {
    match inputs.iter().find(|i| same_file(i, output)) {
        Some(input) => Err(format!(
            "{}: the output path names the input file {}; write the output to another path",
            output.display(),
            input.display()
        )
        .into()),
        None => Ok(()),
    }
}

/// Writes `bytes` to `output` atomically, making its folder first when it is missing
/// (`-o out/plan.json` in a fresh clone); the error names the file.
pub fn write(output: &Path, bytes: &[u8]) -> CliResult {
    let cannot = |e: std::io::Error| format!("{}: cannot write: {e}", output.display());
    if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(cannot)?;
    }
    sgc::ir::file::write_atomic(output, bytes).map_err(|e| cannot(e).into())
}
