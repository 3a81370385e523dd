//! `sgc::fit`: the reported batch fits and the next one does not (probed afresh, same
//! options), no strategy passes the lower-bound limit, memory below the persistent bytes
//! fits nothing, the least-peak bound's batch is where that bound crosses the limit and no
//! strategy passes it either, the CLI prints the same answer as JSON, and a recompute limit caps the
//! batch at the plans that recompute at most that share of a step.

use sgc::fit::{fit, lower_bound_limit, probe, FitOptions, FitReport};
use sgc::ir::{format, rescale, Graph};
use sgc::plan::{PlanOptions, Strategy};
use std::path::PathBuf;
use std::process::Command;

fn zoo_file(name: &str) -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("graphs/{name}.json"));
    format::load(path).unwrap()
}

fn strategies() -> Vec<PlanOptions> {
    [Strategy::None, Strategy::ChenSqrt, Strategy::Sublinear]
        .into_iter()
        .map(|strategy| PlanOptions {
            strategy,
            genetic_iters: 2,
            ..PlanOptions::default()
        })
        .collect()
}

fn run_fit(g: &Graph, opts: &FitOptions) -> FitReport {
    fit(g, &strategies(), opts, &mut |_, _| {}).unwrap()
}

/// Memory that an unplanned step at `batch` just fits (arena plus persistent bytes).
fn memory_for(g: &Graph, batch: u64, align: u64) -> u64 {
    let mut opts = FitOptions::new(u64::MAX / 4);
    opts.align = align;
    let none = PlanOptions {
        strategy: Strategy::None,
        ..PlanOptions::default()
    };
    let p = probe(g, batch, &none, &opts).unwrap();
    p.arena + p.persistent
}

fn assert_monotone_answer(g: &Graph, opts: &FitOptions, report: &FitReport, what: &str) {
    for (sf, plan_opts) in report.strategies.iter().zip(strategies()) {
        let b = sf.batch;
        if b > 0 {
            let at = probe(g, b, &plan_opts, opts).unwrap();
            assert!(
                at.fits,
                "{what} {}: batch {b} reported but does not fit",
                sf.strategy
            );
            assert!(at.arena + at.persistent <= opts.limit(), "{what}");
            let mut reported = sf.fitting.clone().unwrap();
            reported.plan_seconds = at.plan_seconds; // the one figure that is wall time
            assert_eq!(reported, at, "{what}: not deterministic");
        }
        let next = probe(g, b + 1, &plan_opts, opts).unwrap();
        assert!(
            !next.fits,
            "{what} {}: batch {} fits too",
            sf.strategy,
            b + 1
        );
        // Every strategy here keeps its graph outputs, so the tightest bound covers it.
        assert!(
            b <= report.kept_outputs_batch,
            "{what}: past the kept-outputs bound"
        );
    }
    assert!(
        report.kept_outputs_batch <= report.least_peak_batch
            && report.least_peak_batch <= report.lower_bound_batch,
        "{what}"
    );
    assert_bound_limits(g, opts.limit(), report, what);
}

/// The least-peak and kept-outputs batches are where those bounds, in device bytes, cross
/// the limit, computed afresh on the rescaled graphs; the figures reported above them are
/// above the limit.
fn assert_bound_limits(g: &Graph, limit: u64, r: &FitReport, what: &str) {
    let least = |g: &Graph| sgc::plan::least_device_bytes(g).bytes;
    let kept = |g: &Graph| sgc::plan::kept_device_bytes(g).bytes;
    for (name, bound, (b, next), looser) in [
        (
            "least-peak",
            &least as &dyn Fn(&Graph) -> u64,
            (r.least_peak_batch, r.least_peak_next),
            r.lower_bound_batch,
        ),
        (
            "kept-outputs",
            &kept,
            (r.kept_outputs_batch, r.kept_outputs_next),
            r.least_peak_batch,
        ),
    ] {
        let what = format!("{what}, {name}");
        let at = |b: u64| bound(&rescale::rescale(g, b).unwrap());
        if b > 0 {
            assert!(at(b) <= limit, "{what}: batch {b} above the bound");
        }
        assert!(next > limit, "{what}");
        if b < looser {
            assert!(at(b + 1) > limit, "{what}: batch {} under it too", b + 1);
            assert_eq!(next, at(b + 1), "{what}");
        }
    }
}

#[test]
fn reported_batches_fit_and_the_next_ones_do_not() {
    for (name, target) in [("tiny_cnn", 9), ("tiny_mlp", 40), ("tiny_transformer", 5)] {
        let g = zoo_file(name);
        for (align, reserve) in [(256, 0), (1, 2048)] {
            let mut opts = FitOptions::new(memory_for(&g, target, align) + reserve);
            opts.align = align;
            opts.reserve = reserve;
            let report = run_fit(&g, &opts);
            let none = &report.strategies[0];
            assert_eq!(none.strategy, "none");
            assert!(none.batch >= target, "{name}: none fits {}", none.batch);
            assert_monotone_answer(&g, &opts, &report, name);
        }
    }
}

#[test]
fn the_lower_bound_limit_is_exact() {
    let g = zoo_file("tiny_cnn");
    let limit = 40 << 10;
    let (b, next) = lower_bound_limit(&g, limit).unwrap();
    let at = |n: u64| rescale::rescale(&g, n).unwrap().lower_bound().bytes;
    assert!(b > 1);
    assert!(at(b) <= limit);
    assert_eq!(at(b + 1), next);
    assert!(next > limit);
}

/// Memory below the persistent bytes alone is an error of its own (typed, with the figures),
/// not a report of batch 0 for every strategy.
#[test]
fn memory_below_the_persistent_bytes_is_an_error() {
    let g = zoo_file("tiny_mlp");
    let persistent = g.persistent_bytes();
    let mut opts = FitOptions::new(persistent + 100);
    opts.reserve = 200;
    let err = fit(&g, &strategies(), &opts, &mut |_, _| {}).unwrap_err();
    assert!(
        matches!(
            err,
            sgc::fit::FitError::PersistentAboveLimit { persistent: p, limit }
                if p == persistent && limit == persistent - 100
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("no batch fits: the persistent bytes alone ("),
        "{err}"
    );
}

#[test]
fn a_graph_that_cannot_be_rescaled_is_an_error() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_tiny_resnet.json");
    let mut def = sgc::ir::load_any(path).unwrap().to_def();
    let conv = def
        .ops
        .iter_mut()
        .find(|o| o.op == "aten.convolution.default")
        .unwrap();
    conv.op = "mylib.conv".into();
    let g = Graph::from_def(def).unwrap();
    let err = fit(&g, &strategies(), &FitOptions::new(1 << 30), &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("mylib.conv"), "{err}");
}

/// The question a user asks of the model they have: on an 11 GB card, the real PyTorch
/// ResNet-50 export fits at least 3x the batch with `sublinear` than without planning.
#[test]
fn sublinear_fits_three_times_the_batch_of_the_real_resnet50_on_11_gb() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/real/resnet50.json.gz");
    let g = sgc::ir::load_any(path).unwrap();
    let strategies: Vec<PlanOptions> = [Strategy::None, Strategy::Sublinear]
        .into_iter()
        .map(|strategy| PlanOptions {
            strategy,
            genetic_iters: 20,
            ..PlanOptions::default()
        })
        .collect();
    let opts = FitOptions::new(11_000_000_000);
    let report = fit(&g, &strategies, &opts, &mut |_, _| {}).unwrap();
    let (none, sub) = (report.strategies[0].batch, report.strategies[1].batch);
    assert!(none > 0 && sub >= 3 * none, "none {none}, sublinear {sub}");
    let at = probe(&g, sub, &strategies[1], &opts).unwrap();
    assert!(at.fits && at.arena + at.persistent <= opts.limit());
    // Here the least-peak bound is the tighter one (batch 911 against the per-op 1215,
    // README): it stops below the per-op batch and above every strategy's.
    assert!(
        sub <= report.least_peak_batch && report.least_peak_batch < report.lower_bound_batch,
        "{sub} <= {} < {}",
        report.least_peak_batch,
        report.lower_bound_batch
    );
    assert_bound_limits(&g, opts.limit(), &report, "resnet50");
}

#[test]
fn cli_reports_the_same_answer_as_json() {
    let g = zoo_file("tiny_cnn");
    let memory = memory_for(&g, 6, 256);
    let run = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(["fit", "--json", "--genetic-iters", "2", "--memory"])
        .arg(memory.to_string())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_cnn.json"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    // The command line's default recompute limit.
    let mut opts = FitOptions::new(memory);
    opts.max_recompute = Some(sgc::defaults::FIT_MAX_RECOMPUTE);
    assert_eq!(json["max_recompute"], opts.max_recompute.unwrap());
    let report = run_fit(&g, &opts);
    for (i, sf) in report.strategies.iter().enumerate() {
        assert_eq!(json["strategies"][i]["strategy"], sf.strategy.as_str());
        assert_eq!(json["strategies"][i]["batch"], sf.batch);
    }
    assert_eq!(json["lower_bound_batch"], report.lower_bound_batch);
    let table = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(["fit", "--strategy", "none", "--memory"])
        .arg(memory.to_string())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_cnn.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    let row = format!("{:<11} {:>7}", "none", report.strategies[0].batch);
    assert!(text.contains(&row), "{text}");
    assert!(text.contains("per-op lower bound: batch"), "{text}");
}

fn real_resnet50() -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/real/resnet50.json.gz");
    sgc::ir::load_any(path).unwrap()
}

#[test]
fn a_recompute_limit_caps_the_batch_at_that_share_of_a_step() {
    let g = real_resnet50();
    let sublinear = [PlanOptions {
        strategy: Strategy::Sublinear,
        genetic_iters: 20,
        ..PlanOptions::default()
    }];
    let free = fit(
        &g,
        &sublinear,
        &FitOptions::new(11_000_000_000),
        &mut |_, _| {},
    )
    .unwrap();
    let mut opts = FitOptions::new(11_000_000_000);
    opts.max_recompute = Some(1.0 / 3.0);
    let capped = fit(&g, &sublinear, &opts, &mut |_, _| {}).unwrap();
    let (f, c) = (&free.strategies[0], &capped.strategies[0]);
    let at = c.fitting.as_ref().expect("some batch fits");
    assert!(at.recompute_share <= 1.0 / 3.0, "{at:?}");
    // The limit binds here: the largest batch that fits the memory recomputes more.
    let unlimited = f.fitting.as_ref().unwrap();
    assert!(
        unlimited.recompute_share > 1.0 / 3.0 && c.batch < f.batch,
        "{} {}",
        c.batch,
        f.batch
    );
    // The next batch fits the memory, but its plan recomputes too much, probed afresh.
    let next = probe(&g, c.batch + 1, &sublinear[0], &opts).unwrap();
    assert!(!next.fits && next.recompute_share > 1.0 / 3.0, "{next:?}");
    assert!(
        next.note
            .as_deref()
            .unwrap()
            .contains("above the limit of 33.3%"),
        "{next:?}"
    );
}

#[test]
fn the_cli_limits_recompute_to_a_third_by_default_and_shows_the_trade() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/real/resnet50.json.gz");
    let run = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args([
            "fit",
            "--memory",
            "11GiB",
            "--strategy",
            "none,sublinear",
            "-q",
        ])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        text.contains("recomputes at most 33.3% of a step"),
        "{text}"
    );
    assert!(
        text.contains("sublinear: batch against recompute"),
        "{text}"
    );
    let share = |line: &str| -> f64 {
        line.split_whitespace()
            .nth(5)
            .unwrap()
            .trim_end_matches('%')
            .parse()
            .unwrap()
    };
    let row = text.lines().find(|l| l.starts_with("sublinear ")).unwrap();
    assert!(share(row) <= 33.3, "{row}");
}

/// On tiny_transformer the weight gradients weigh beside one sample's activations, so the
/// kept-outputs bound stops below the least-peak one: the report and the CLI say where, and
/// where it alone refuses batch 1, the CLI fails naming it.
#[test]
fn the_kept_outputs_bound_stops_the_batch_below_the_least_peak_bound() {
    let g = zoo_file("tiny_transformer");
    let opts = FitOptions::new(70_000);
    let report = run_fit(&g, &opts);
    assert!(
        report.kept_outputs_batch > 0 && report.kept_outputs_batch < report.least_peak_batch,
        "kept {} least {}",
        report.kept_outputs_batch,
        report.least_peak_batch
    );
    assert_monotone_answer(&g, &opts, &report, "tiny_transformer");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_transformer.json");
    let fit_cli = |memory: &str| {
        Command::new(env!("CARGO_BIN_EXE_sgc"))
            .args(["fit", "-q", "--genetic-iters", "2", "--memory", memory])
            .arg(&path)
            .output()
            .unwrap()
    };
    let run = fit_cli("70000");
    let out = String::from_utf8_lossy(&run.stdout);
    let line = format!(
        "kept-outputs lower bound: batch {} at most; at batch {} no plan that keeps or recomputes and keeps each graph output",
        report.kept_outputs_batch,
        report.kept_outputs_batch + 1
    );
    assert!(out.contains(&line), "{out}");
    // At batch 1 the kept-outputs bound is 55.88 KiB in device bytes, the least-peak one
    // 30.75 KiB.
    let run = fit_cli("50KiB");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(
        err.contains("at batch 1 no plan that keeps or recomputes and keeps each graph output from when it is made (every strategy's but optimal's) needs less than 55.88 KiB (the kept-outputs lower bound; limit 50.00 KiB)"),
        "{err}"
    );
}

/// `sgc fit` where nothing fits prints its table and then fails, saying why: the per-op
/// lower bound at batch 1.
#[test]
fn the_cli_fails_when_no_batch_fits_and_says_why() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_cnn.json");
    let run = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(["fit", "-q", "--memory", "3KiB"])
        .arg(&path)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert_eq!(run.status.code(), Some(1), "{out}{err}");
    let why = "no batch fits: at batch 1 the per-op lower bound alone is 4.88 KiB (limit 3.00 KiB)";
    assert!(err.contains(why), "{err}");
    assert!(
        out.contains("a batch fits when its arena plus the persistent bytes"),
        "{out}"
    );
    // Between the two bounds at batch 1 (the real ResNet-18, whose least-peak bound is the
    // higher), the least-peak bound is the reason.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/real/resnet18.json.gz");
    let one = rescale::rescale(&sgc::ir::load_any(&path).unwrap(), 1).unwrap();
    let (per_op, least) = (
        one.lower_bound().bytes,
        sgc::plan::least_device_bytes(&one).bytes,
    );
    assert!(per_op < least, "{per_op} against {least}");
    let run = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(["fit", "-q", "--strategy", "sublinear", "--memory"])
        .arg(((per_op + least) / 2).to_string())
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    let why = "no batch fits: at batch 1 no plan that keeps or recomputes needs less than";
    assert!(
        err.contains(why) && err.contains("(the least-peak lower bound;"),
        "{err}"
    );
}

/// `sgc fit` under the persistent bytes alone fails at once (no table of batch 0 for every
/// strategy), saying so in the units of the report and what to do, with or without --json.
#[test]
fn the_cli_fails_when_the_persistent_bytes_alone_exceed_the_limit() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_cnn.json");
    for json in [false, true] {
        let run = Command::new(env!("CARGO_BIN_EXE_sgc"))
            .args(["fit", "--memory", "1KiB"])
            .args(json.then_some("--json"))
            .arg(&path)
            .output()
            .unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr),
        );
        assert_eq!(run.status.code(), Some(1), "{out}{err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(
            err.trim_end(),
            format!(
                "error: {}: no batch fits: the persistent bytes alone (1.82 KiB, what lives across steps) exceed the limit 1.00 KiB; give --memory more than that (plus --reserve) plus one sample's activations",
                path.display()
            )
        );
    }
}

/// The table says which of its two byte columns `--memory` limits: the arena (with the
/// persistent bytes), not the memory model's peak, shown for reference.
#[test]
fn the_table_says_which_column_is_held_against_the_limit() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_cnn.json");
    let run = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(["fit", "-q", "--memory", "64KiB", "--strategy", "none"])
        .arg(&path)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].starts_with("a batch fits when its arena plus the persistent bytes are within the limit and its plan"),
        "{out}"
    );
    assert_eq!(lines[2], "arena: held against the limit (plus the persistent bytes); model peak: the memory model's peak (persistent bytes included), for reference, not compared");
    assert!(
        lines[3].starts_with("strategy      batch  vs none  model peak       arena  recompute"),
        "{out}"
    );
}

/// `fit --arena-effort` takes plan's values (one type); `--alloc-effort`, its old name, is
/// hidden and still works, with a warning; the two together are refused.
#[test]
fn fit_takes_plans_arena_effort_and_its_old_name() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs/tiny_cnn.json");
    let fit = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sgc"))
            .args([
                "fit",
                "-q",
                "--json",
                "--memory",
                "64KiB",
                "--strategy",
                "none",
            ])
            .args(extra)
            .arg(&path)
            .output()
            .unwrap()
    };
    let batch = |out: &std::process::Output| {
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        r["strategies"][0]["batch"].as_u64().unwrap()
    };
    for effort in ["fast", "plan", "default", "thorough"] {
        let new = fit(&["--arena-effort", effort]);
        assert!(new.status.success(), "{effort}: {:?}", new);
        assert!(new.stderr.is_empty(), "{effort}");
        if effort != "plan" {
            let old = fit(&["--alloc-effort", effort]);
            assert_eq!(batch(&old), batch(&new), "{effort}");
            let err = String::from_utf8_lossy(&old.stderr);
            assert_eq!(
                err,
                "warning: --alloc-effort is deprecated: use --arena-effort (the same values)\n"
            );
        }
    }
    let both = fit(&["--alloc-effort", "fast", "--arena-effort", "default"]);
    assert_eq!(both.status.code(), Some(2));
    let help = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args(["fit", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("The default here is `fast`")
            && help.contains("[possible values: fast, plan, default, thorough]")
            && !help.contains("alloc-effort"),
        "{help}"
    );
}
