//! Snapshot tests of what each command prints: the reports users read, and the errors
//! they get. Every command runs on a small shipped input; times, rates and paths are
//! masked (`<t>`, `<n>`, `<repo>`, `<tmp>`), everything else must match the snapshot in
//! `tests/snapshots/` exactly. After a deliberate change of wording, refresh them with
//! `SGC_BLESS=1 cargo test --test snapshots` and review the diff.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn tmp() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("snapshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `sgc args` in the repository root; stdout, stderr and the exit status as one text.
fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    let mut text = format!("$ sgc {}\n", args.join(" "));
    text += &String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    if !err.is_empty() {
        text += "--- stderr\n";
        text += &err;
    }
    text += &format!("--- exit {}\n", out.status.code().unwrap_or(-1));
    mask(&text)
}

/// Masks what changes from run to run: wall times (`0.123s`, `12 ms`), rates (`4567/s`) and
/// the repository and scratch paths.
fn mask(text: &str) -> String {
    let text = text
        .replace(&tmp().display().to_string(), "<tmp>")
        .replace(repo(), "<repo>");
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'));
        if starts_number {
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
                j += 1;
            }
            let rest: String = chars[j..chars.len().min(j + 3)].iter().collect();
            let before: String = chars[i.saturating_sub(5)..i].iter().collect();
            let line_end = chars[j..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |k| j + k);
            let tail: String = chars[j..line_end].iter().collect();
            // Measured: a time ratio or share ("time 3.49x", "time 4.2%"), the worker
            // count (the machine's cores), a markdown table's last column (plan time).
            if before == "time " || rest.starts_with(" wo") || tail == " |" {
                out += "<t>";
                i = j;
                continue;
            }
            let word_ends = |k: usize| k >= chars.len() || !chars[k].is_alphanumeric();
            if rest.starts_with("/s") {
                out += "<n>";
                i = j;
                continue;
            }
            if (rest.starts_with('s') && word_ends(j + 1))
                || (rest.starts_with(" s") && word_ends(j + 2))
                || (rest.starts_with("ms") && word_ends(j + 2))
                || (rest.starts_with(" ms") && word_ends(j + 3))
            {
                out += "<t>";
                i = j;
                continue;
            }
            out.extend(&chars[i..j]);
            i = j;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

fn snapshot(name: &str, commands: &[&[&str]]) {
    let got: String = commands.iter().map(|c| run(c) + "\n").collect();
    let path = Path::new(repo())
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("SGC_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "no snapshot {}: run `SGC_BLESS=1 cargo test --test snapshots`",
            path.display()
        )
    });
    if got != want {
        let first = got
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(got.lines().count().min(want.lines().count()));
        panic!(
            "{name}: the output differs from {} at line {}:\n got: {:?}\nwant: {:?}\n\
             (after a deliberate change: SGC_BLESS=1 cargo test --test snapshots)",
            path.display(),
            first + 1,
            got.lines().nth(first),
            want.lines().nth(first)
        );
    }
}

fn out(name: &str) -> String {
    tmp().join(name).display().to_string()
}

#[test]
fn inspect() {
    snapshot(
        "inspect",
        &[
            &["inspect", "graphs/tiny_cnn.json"],
            &[
                "inspect",
                "graphs/tiny_transformer.json",
                "--device-profile",
                "a100",
            ],
            &["inspect", "graphs/missing.json"],
        ],
    );
}

#[test]
fn plan() {
    let p = out("cnn.plan.json");
    snapshot(
        "plan",
        &[
            &["plan", "graphs/tiny_cnn.json", "-q", "-o", &p],
            &["plan", "graphs/tiny_cnn.json", "--check", &p],
            &["plan", "graphs/tiny_cnn.json", "-q", "--budget", "13KiB"],
            &["plan", "graphs/tiny_cnn.json", "-q", "--budget", "9KiB"],
            &["plan", "graphs/tiny_cnn.json", "-q", "--budget", "1KiB"],
            &[
                "plan",
                "graphs/tiny_cnn.json",
                "-q",
                "--strategy",
                "chen-sqrt",
            ],
            &["plan", "graphs/tiny_cnn.json", "-q", "--strategy", "dtr"],
            &[
                "plan",
                "graphs/tiny_cnn.json",
                "-q",
                "-o",
                "graphs/tiny_cnn.json",
            ],
        ],
    );
}

#[test]
fn run_and_plot() {
    let p = out("mlp.plan.json");
    let svg = out("mlp.svg");
    snapshot(
        "run",
        &[
            &["plan", "graphs/tiny_mlp.json", "-q", "-o", &p],
            &["run", "graphs/tiny_mlp.json", "--plan", &p, "--steps", "2"],
            &[
                "run",
                "graphs/tiny_cnn.json",
                "--strategy",
                "sublinear",
                "--steps",
                "1",
                "--compare",
            ],
            &["run", "graphs/tiny_cnn.json", "--plan", &p],
            &["plot", &p, "-o", &svg],
        ],
    );
}

#[test]
fn fit_compare_and_files() {
    let rescaled = out("cnn8.json");
    let costed = out("cnn.cost.json");
    snapshot(
        "fit_compare_files",
        &[
            &["fit", "graphs/tiny_cnn.json", "--memory", "1MiB", "-q"],
            &["compare", "graphs/tiny_mlp.json", "--no-exec", "-q"],
            &[
                "rescale",
                "graphs/tiny_cnn.json",
                "--batch",
                "8",
                "-o",
                &rescaled,
            ],
            &[
                "cost",
                "graphs/tiny_cnn.json",
                "--device-profile",
                "a100",
                "-o",
                &costed,
            ],
        ],
    );
}

#[test]
fn alloc() {
    let placed = out("a.offsets.csv");
    snapshot(
        "alloc",
        &[
            &["alloc", "benches/data/dsa/input.12.csv"],
            &["alloc", "benches/data/dsa/A.1048576.csv", "-o", &placed],
            &[
                "alloc",
                "tests/fixtures/bad_inputs/csv/reversed_lifetime.csv",
            ],
        ],
    );
}

/// The masking itself: times and rates go, figures that are not times stay.
#[test]
fn mask_hides_times_and_rates_only() {
    assert_eq!(
        mask("plan time 0.012s on 2 workers (3984 candidates, 59807/s), 12 ms, 1.5 s"),
        "plan time <t>s on <t> workers (3984 candidates, <n>/s), <t> ms, <t> s"
    );
    assert_eq!(
        mask("peak 1.47 GiB, 26.7%, x2 v100"),
        "peak 1.47 GiB, 26.7%, x2 v100"
    );
    assert_eq!(
        mask(
            "on 2 workers; time 3.488x, recompute time 4.2% (plan predicted 21.2%)\n| a | 0.009 |"
        ),
        "on <t> workers; time <t>x, recompute time <t>% (plan predicted 21.2%)\n| a | <t> |"
    );
}

#[test]
fn dtr() {
    let svg = out("sweep.svg");
    snapshot(
        "dtr",
        &[
            &[
                "run",
                "graphs/tiny_cnn.json",
                "--dtr",
                "--eviction-threshold",
                "9KiB",
                "--evictee-min-size",
                "0",
                "--steps",
                "2",
                "--compare",
            ],
            &["run", "graphs/tiny_cnn.json", "--dtr", "--memory", "6KiB"],
            &[
                "dtr-sweep",
                "graphs/tiny_cnn.json",
                "--memory",
                "20kB",
                "--thresholds",
                "8kB..16kB:2kB",
                "--evictee-min-size",
                "0",
                "--genetic-iters",
                "2",
                "--plot",
                &svg,
            ],
            &[
                "dtr-sweep",
                "graphs/tiny_cnn.json",
                "--memory",
                "20kB",
                "--thresholds",
                "16kB..8kB",
            ],
        ],
    );
}
