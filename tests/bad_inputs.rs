//! The corpus of crashing and lying inputs (issue 15): every file of
//! `tests/fixtures/bad_inputs` is refused by its loader without a panic, with a message that
//! contains what `expected.txt` says (the line and column, the op, tensor, node or line, the
//! field), both from the library and from the `sgc` binary; the binary exits with 1, names
//! the file and writes nothing (its `-o` output does not appear, the input is unchanged).

use sgc::ir::file::{max_input_bytes, set_max_input_bytes};
use sgc::plan::alloc::csv;
use sgc::plan::Plan;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The graph the plan files are checked against.
const PLAN_GRAPH: &str = "plan/for_graph.json";

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_inputs")
}

/// One line of `expected.txt`.
#[derive(Debug)]
struct Case {
    /// Relative to the corpus folder; its first folder is the loader.
    file: String,
    /// Extra arguments for the binary.
    args: Vec<String>,
    /// What the message must contain.
    parts: Vec<String>,
}

impl Case {
    fn kind(&self) -> &str {
        self.file.split('/').next().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.file.rsplit('/').next().unwrap_or_default()
    }

    /// The `--max-input` of the extra arguments, in bytes.
    fn max_input(&self) -> Option<u64> {
        let at = self.args.iter().position(|a| a == "--max-input")?;
        Some(sgc::units::parse_size(&self.args[at + 1]).expect("a size"))
    }
}

fn manifest() -> Vec<Case> {
    let text = std::fs::read_to_string(corpus().join("expected.txt")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut fields = l.split(" | ").map(str::trim);
            let mut head = fields.next().unwrap().split_whitespace();
            let file = head.next().unwrap().to_string();
            let parts: Vec<String> = fields.map(str::to_string).collect();
            assert!(!parts.is_empty(), "{file}: no expected parts");
            Case {
                file,
                args: head.map(str::to_string).collect(),
                parts,
            }
        })
        .collect()
}

/// Every file of the corpus has a line, every line a file, every loader a section.
#[test]
fn the_manifest_lists_every_file_once() {
    let cases = manifest();
    let mut listed: Vec<&str> = cases.iter().map(|c| c.file.as_str()).collect();
    listed.sort();
    let before = listed.len();
    listed.dedup();
    assert_eq!(before, listed.len(), "a file is listed twice");
    let mut files = Vec::new();
    for kind in ["graph", "checkmate", "csv", "plan"] {
        for e in std::fs::read_dir(corpus().join(kind)).unwrap() {
            let name = format!("{kind}/{}", e.unwrap().file_name().to_string_lossy());
            if name != PLAN_GRAPH {
                files.push(name);
            }
        }
        assert!(cases.iter().any(|c| c.kind() == kind), "no {kind} case");
    }
    files.sort();
    assert_eq!(files, listed);
}

/// The library's message for a case, or `None` if the loader accepted the file.
fn library_error(case: &Case) -> Option<String> {
    let path = corpus().join(&case.file);
    match case.kind() {
        "graph" | "checkmate" => sgc::ir::load_any(&path).err().map(|e| e.to_string()),
        "csv" => csv::read(&path).err().map(|e| e.to_string()),
        "plan" => {
            let graph = sgc::ir::load_any(corpus().join(PLAN_GRAPH)).expect("the plan graph");
            let text = match sgc::ir::file::read_limited(&path) {
                Ok(t) => t,
                Err(e) => return Some(format!("{}: {e}", path.display())),
            };
            let plan = match Plan::from_json(&text) {
                Ok(p) => p,
                Err(e) => return Some(e.to_string()),
            };
            if let Err(e) = plan.check_graph(&graph) {
                return Some(e.to_string());
            }
            sgc::plan::check(&graph, &plan).err().map(|e| e.to_string())
        }
        other => panic!("{}: unknown loader {other}", case.file),
    }
}

fn missing_parts<'a>(case: &'a Case, message: &str) -> Vec<&'a str> {
    case.parts
        .iter()
        .map(String::as_str)
        .filter(|p| !message.contains(p))
        .collect()
}

/// The loaders, called as a library: no panic, an error, every expected part. One test, so
/// the input limit (a process-wide setting) is changed and restored with nothing running
/// beside it.
#[test]
fn the_loaders_refuse_every_case_naming_where() {
    let mut failures = Vec::new();
    let default_limit = max_input_bytes();
    for case in manifest() {
        set_max_input_bytes(case.max_input().unwrap_or(default_limit));
        let result = catch_unwind(AssertUnwindSafe(|| library_error(&case)));
        set_max_input_bytes(default_limit);
        match result {
            Err(_) => failures.push(format!("{}: the loader panicked", case.file)),
            Ok(None) => failures.push(format!("{}: accepted", case.file)),
            Ok(Some(message)) => {
                let missing = missing_parts(&case, &message);
                if !missing.is_empty() {
                    failures.push(format!("{}: {message:?} lacks {missing:?}", case.file));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// The `sgc` binary on a copy of every file, in a folder of its own: exit status 1 (not a
/// panic's 101), one `error:` message naming the file with every expected part (after the
/// list of violations, for `--check`), nothing on stdout, no output file, the input unchanged.
#[test]
fn the_binary_refuses_every_case_and_writes_nothing() {
    let scratch = std::env::temp_dir().join(format!("sgc-bad-inputs-{}", std::process::id()));
    let mut failures = Vec::new();
    for (i, case) in manifest().iter().enumerate() {
        let dir = scratch.join(i.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join(case.name());
        std::fs::copy(corpus().join(&case.file), &input).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sgc"));
        cmd.current_dir(&dir);
        match case.kind() {
            "graph" | "checkmate" => cmd.args(["plan", case.name(), "-o", "out.json"]),
            "csv" => cmd.args(["alloc", case.name(), "-o", "out.csv"]),
            "plan" => {
                std::fs::copy(corpus().join(PLAN_GRAPH), dir.join("graph.json")).unwrap();
                cmd.args(["plan", "graph.json", "--check", case.name()])
            }
            other => panic!("unknown loader {other}"),
        };
        let out = cmd.args(&case.args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut wrong = Vec::new();
        if out.status.code() != Some(1) {
            wrong.push(format!("exit status {:?}", out.status.code()));
        }
        // `--check` lists every violation above its one-line error.
        let last = stderr.trim_end().lines().last().unwrap_or_default();
        if !last.starts_with("error: ") || stderr.contains("panicked") {
            wrong.push("not one error message".to_string());
        }
        if !stderr.contains(case.name()) {
            wrong.push("the file is not named".to_string());
        }
        let missing = missing_parts(case, &stderr);
        if !missing.is_empty() {
            wrong.push(format!("lacks {missing:?}"));
        }
        if !out.stdout.is_empty() {
            wrong.push("wrote to stdout".to_string());
        }
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != case.name() && n != "graph.json")
            .collect();
        left.sort();
        if !left.is_empty() {
            wrong.push(format!("wrote {left:?}"));
        }
        if std::fs::read(&input).unwrap() != std::fs::read(corpus().join(&case.file)).unwrap() {
            wrong.push("changed its input".to_string());
        }
        if !wrong.is_empty() {
            failures.push(format!("{}: {} ({stderr:?})", case.file, wrong.join("; ")));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// A device that never ends is read up to the input limit and refused, by every loader.
#[test]
fn an_endless_input_is_refused_at_the_limit() {
    if !Path::new("/dev/zero").exists() {
        return;
    }
    let graph = corpus().join(PLAN_GRAPH);
    let graph = graph.to_str().unwrap();
    for args in [
        vec!["inspect", "/dev/zero"],
        vec!["alloc", "/dev/zero"],
        vec!["plan", graph, "--check", "/dev/zero"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sgc"))
            .args(&args)
            .args(["--max-input", "64KiB"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("/dev/zero") && stderr.contains("larger than the input limit"),
            "{args:?}: {stderr}"
        );
    }
}
