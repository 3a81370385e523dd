//! The plan-file tables of `docs/graph-format.md` and the plans `sgc plan` writes agree:
//! every field a written plan holds (over plans that set every optional field: a budget of
//! another kind, a device profile, an arena with in-place pairs, freed storages) has its row
//! in the table of its object, and every field a table marks as required is written. The
//! reader is strict (unknown fields are refused), so a field added to the plan without its
//! row fails here.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The objects of a plan: where they are in the JSON and the `###` heading of their table.
const OBJECTS: &[(&str, &str)] = &[
    ("", "Plan"),
    ("graph", "Graph reference"),
    ("options", "Options"),
    ("options.device_profile", "Device profile"),
    ("steps[]", "Step"),
    ("lifetimes[]", "Lifetime"),
    ("summary", "Summary"),
    ("arena", "Arena"),
];

/// Each table's rows: field name -> required.
fn spec_tables() -> BTreeMap<&'static str, BTreeMap<String, bool>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/graph-format.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let plans = &doc[doc.find("\n## Plan files").expect("a plan-file section")..];
    OBJECTS
        .iter()
        .map(|&(_, heading)| {
            let start = plans
                .find(&format!("\n### {heading}"))
                .unwrap_or_else(|| panic!("docs/graph-format.md has no `### {heading}` table"));
            let body = &plans[start + 1..];
            let body = &body[..body[1..].find("\n#").map_or(body.len(), |i| i + 1)];
            let rows = body
                .lines()
                .filter_map(|l| l.strip_prefix("| `"))
                .filter_map(|l| {
                    let (name, rest) = l.split_once('`')?;
                    let required = rest.split('|').nth(1)?.trim() == "yes";
                    Some((name.to_string(), required))
                })
                .collect();
            (heading, rows)
        })
        .collect()
}

/// The objects at `path` (`a.b`, `a[]` for every element of array `a`).
fn objects_at<'a>(v: &'a Value, path: &str) -> Vec<&'a serde_json::Map<String, Value>> {
    let mut here = vec![v];
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, each) = match part.strip_suffix("[]") {
            Some(k) => (k, true),
            None => (part, false),
        };
        here = here
            .into_iter()
            .filter_map(|v| v.get(key))
            .flat_map(|v| match (each, v) {
                (true, Value::Array(items)) => items.iter().collect::<Vec<_>>(),
                (false, v) => vec![v],
                _ => Vec::new(),
            })
            .collect();
    }
    here.into_iter().filter_map(Value::as_object).collect()
}

fn written_plan(graph: &str, extra: &[&str]) -> Value {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("plan_spec_{}.json", graph.replace(['/', '.'], "_")));
    let run = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["plan", graph, "-q", "-o"])
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "sgc plan {graph} {extra:?}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

#[test]
fn plan_files_hold_exactly_the_fields_the_spec_names() {
    let plans = [
        written_plan(
            "graphs/tiny_cnn.json",
            &[
                "--budget",
                "1GiB",
                "--budget-of",
                "peak",
                "--device-profile",
                "h100",
                "--host-memory",
                "1GiB",
            ],
        ),
        written_plan("graphs/tiny_transformer.json", &["--arena-effort", "fast"]),
        // `--time-limit` is the `optimal` strategy's; any plan records the options given.
        written_plan(
            "graphs/tiny_mlp.json",
            &["--strategy", "dtr", "--time-limit", "5"],
        ),
        // Offloads, their host pool and summary: at the lowest recompute plan's device
        // bytes, over a link fast enough for the tiny graph's sub-microsecond ops.
        written_plan(
            "graphs/tiny_transformer.json",
            &[
                "--budget",
                "68096",
                "--device-profile",
                "h100",
                "--host-link",
                "1000000,1000000,0",
                "--host-memory",
                "1MiB",
            ],
        ),
    ];
    let tables = spec_tables();
    let mut seen: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for plan in &plans {
        for &(path, heading) in OBJECTS {
            for object in objects_at(plan, path) {
                let keys: BTreeSet<String> = object.keys().cloned().collect();
                let table = &tables[heading];
                let undocumented: Vec<_> =
                    keys.iter().filter(|k| !table.contains_key(*k)).collect();
                assert!(
                    undocumented.is_empty(),
                    "`### {heading}`: plans write {undocumented:?}, which docs/graph-format.md \
                     does not name: add a row for each"
                );
                let missing: Vec<_> = table
                    .iter()
                    .filter(|(k, required)| **required && !keys.contains(*k))
                    .map(|(k, _)| k)
                    .collect();
                assert!(
                    missing.is_empty(),
                    "`### {heading}`: {missing:?} marked required but not written"
                );
                seen.entry(heading).or_default().extend(keys);
            }
        }
    }
    // Every table was exercised, and every row seen in some plan (the samples set every
    // optional field).
    for (heading, table) in &tables {
        let unseen: Vec<_> = table
            .keys()
            .filter(|k| !seen.get(heading).is_some_and(|s| s.contains(*k)))
            .collect();
        assert!(
            unseen.is_empty(),
            "`### {heading}`: no sample plan writes {unseen:?}: a row for a field plans never \
             hold, or a sample that should set it"
        );
    }
}
