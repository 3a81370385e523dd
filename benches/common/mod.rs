//! What the benchmarks share: the graph files they plan.

use std::path::PathBuf;

/// Every zoo graph (`graphs/*.json`) and Checkmate graph (`benches/data/checkmate`)
/// there is, sorted by path.
#[allow(dead_code)] // not every bench reads the zoo
pub fn graph_files() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [root.join("graphs"), root.join("benches/data/checkmate")] {
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

/// A real graph's name: its file name without `.json.gz`.
#[allow(dead_code)] // not every bench reads the real corpus
pub fn real_name(p: &std::path::Path) -> String {
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    name.trim_end_matches(".json.gz").to_string()
}

/// Every real traced graph (`graphs/real/*.json.gz`), sorted by path.
#[allow(dead_code)] // not every bench reads the real corpus
pub fn real_graph_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/real");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".json.gz"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}
