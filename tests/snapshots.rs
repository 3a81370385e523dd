//! Snapshot tests of what each command prints: the reports users read, and the errors
//! they get. Every command runs on a small shipped input; times, rates and paths are
//! masked (`<t>`, `<n>`, `<repo>`, `<tmp>`), everything else must match the snapshot in
//! `tests/snapshots/` exactly. After a deliberate change of wording, refresh them with
//! `SGC_BLESS=1 cargo test --test snapshots` and review the diff.
//!
//! The same holds for the generated sections of README.md and docs/ (the session, `sgc
//! --help`, the peak-memory table): `just docs` rewrites them, and a stale one fails.

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
            &[
                "inspect",
                "graphs/tiny_cnn.json",
                "--device",
                "cuda",
                "--top",
                "1",
            ],
            &[
                "inspect",
                "graphs/real/unet.json.gz",
                "--device",
                "cpu",
                "--top",
                "1",
            ],
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
            // Refused with the option that reaches lower, then met with it.
            &[
                "plan",
                "graphs/tiny_cnn.json",
                "-q",
                "--strategy",
                "dtr",
                "--budget",
                "11KiB",
                "--budget-of",
                "peak",
            ],
            &[
                "plan",
                "graphs/tiny_cnn.json",
                "-q",
                "--strategy",
                "dtr",
                "--budget",
                "11KiB",
                "--budget-of",
                "peak",
                "--evictee-min-size",
                "0",
            ],
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

// -- the generated sections of README.md and docs/ -------------------------------------

/// One generated section: the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->`
/// in `file`, made from the output of `sgc` commands.
struct Section {
    file: &'static str,
    name: &'static str,
    body: String,
}

/// Commands' outputs as a transcript: each command after `$ `, what it printed; the exit
/// line of a command that succeeded is left out.
fn transcript(commands: &[&[&str]]) -> String {
    let mut s = String::from("```text\n");
    for c in commands {
        s += &run(c).replace("--- exit 0\n", "");
    }
    s + "```\n"
}

/// `graphs/*.json` and `benches/data/checkmate/*.json`, sorted, as the shell expands them.
fn compare_inputs() -> Vec<String> {
    let mut files = Vec::new();
    for dir in ["graphs", "benches/data/checkmate"] {
        let mut names: Vec<String> = std::fs::read_dir(Path::new(repo()).join(dir))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".json"))
            .map(|n| format!("{dir}/{n}"))
            .collect();
        names.sort();
        files.extend(names);
    }
    files
}

/// Every generated section, made afresh.
fn docs_sections() -> Vec<Section> {
    let inputs = compare_inputs();
    let mut compare: Vec<&str> = vec!["compare"];
    compare.extend(inputs.iter().map(String::as_str));
    let compared = run(&compare);
    let table = compared
        .lines()
        .filter(|l| l.starts_with('|') || l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    vec![
        Section {
            file: "README.md",
            name: "session",
            body: transcript(&[
                &[
                    "plan",
                    "graphs/resnet50.json",
                    "--genetic-iters",
                    "20",
                    "-o",
                    "out/resnet50.plan.json",
                ],
                &[
                    "fit",
                    "graphs/real/resnet50.json.gz",
                    "--memory",
                    "11GiB",
                    "--strategy",
                    "none,sublinear",
                    "-q",
                ],
                &[
                    "run",
                    "graphs/tiny_cnn.json",
                    "--strategy",
                    "sublinear",
                    "--compare",
                ],
            ]),
        },
        Section {
            file: "docs/commands.md",
            name: "help",
            body: transcript(&[&["--help"]]),
        },
        Section {
            file: "docs/benchmarks.md",
            name: "compare",
            body: table.trim().to_string() + "\n",
        },
    ]
}

/// `text` with section `name` holding `body`; `None` when it has no such markers.
fn with_section(text: &str, name: &str, body: &str) -> Option<String> {
    let (begin, end) = (
        format!("<!-- {name}:begin -->\n"),
        format!("<!-- {name}:end -->"),
    );
    let (head, rest) = text.split_once(&begin)?;
    let (_, tail) = rest.split_once(&end)?;
    Some(format!("{head}{begin}{body}{end}{tail}"))
}

/// `text` with every run of spaces folded to one: a masked time keeps its column's padding,
/// which depends on the time's width (`9.8s`, `10.2s`).
fn squeeze(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if !(c == ' ' && out.ends_with(' ')) {
            out.push(c);
        }
    }
    out
}

/// The generated sections are what the commands print now: `just docs` (`SGC_BLESS=1`)
/// rewrites them; otherwise a stale one fails, naming its file and section. A copy of
/// README with one figure of its session changed must fail the same comparison.
#[test]
fn docs_sections_are_current() {
    let mut stale = Vec::new();
    for s in docs_sections() {
        let path = Path::new(repo()).join(s.file);
        let text = std::fs::read_to_string(&path).unwrap();
        let fresh = with_section(&text, s.name, &s.body)
            .unwrap_or_else(|| panic!("{}: no `{}` section markers", s.file, s.name));
        if s.name == "session" {
            let digit = fresh.find("planned peak").unwrap()
                + fresh[fresh.find("planned peak").unwrap()..]
                    .find(|c: char| c.is_ascii_digit())
                    .unwrap();
            let mut edited = fresh.clone();
            let changed = if &fresh[digit..=digit] == "9" {
                "8"
            } else {
                "9"
            };
            edited.replace_range(digit..=digit, changed);
            assert_ne!(
                with_section(&edited, s.name, &s.body).as_deref(),
                Some(edited.as_str()),
                "an edited figure must make the section stale"
            );
        }
        if std::env::var_os("SGC_BLESS").is_some() {
            std::fs::write(&path, &fresh).unwrap();
        } else if squeeze(&fresh) != squeeze(&text) {
            stale.push(format!("{} (section `{}`)", s.file, s.name));
        }
    }
    assert!(
        stale.is_empty(),
        "generated sections differ from what the commands print now: {}; run `just docs` \
         (SGC_BLESS=1 cargo test --test snapshots docs_sections) and review the diff",
        stale.join(", ")
    );
}
