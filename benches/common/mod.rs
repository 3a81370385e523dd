//! What the benchmarks share: the graph files they plan.

use std::path::PathBuf;

/// Every zoo graph (`graphs/*.json`) and Checkmate graph (`../shared/data/checkmate`)
/// there is, sorted by path.
pub fn graph_files() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [root.join("graphs"), root.join("../shared/data/checkmate")] {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            files.extend(
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "json")),
            );
        }
    }
    files.sort();
    files
}
