//! One rank's step (`--world-size`, `--shard fsdp2`, `--optimizer`; `sgc_ir::distributed`):
//! the persistent bytes of GPT-2 at world size 8 are the documented terms, computed here
//! from the graph's parameters by hand; the rank's graph plans and fits like any other; and
//! what cannot be sharded is refused by name.

use sgc::ir::distributed::{per_rank, Distribution, Optimizer, Shard};
use sgc::ir::{Graph, TensorKind};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn gpt2() -> Graph {
    sgc::ir::load_any(repo("graphs/real/gpt2.json.gz")).expect("the corpus graph loads")
}

/// Parameter bytes, and the largest block's (a block: the name up to its first number).
fn parameters(g: &Graph) -> (u64, u64) {
    let mut blocks: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0;
    for t in g.tensors() {
        if t.kind != TensorKind::Param || t.alias_of.is_some() {
            continue;
        }
        total += t.size;
        let parts: Vec<&str> = t.name.split('.').collect();
        let block = match parts.iter().position(|p| p.parse::<u64>().is_ok()) {
            Some(k) => parts[..=k].join("."),
            None => "root".to_string(),
        };
        *blocks.entry(block).or_default() += t.size;
    }
    (total, blocks.values().copied().max().unwrap_or(0))
}

#[test]
fn gpt2_at_world_size_8_holds_a_rank_of_params_grads_and_adam_plus_three_blocks() {
    let g = gpt2();
    let (p, largest) = parameters(&g);
    // Parameters, their gradients and Adam's two buffers, over 8 ranks, plus the unsharded
    // term: the block computing, the one prefetched, one block's gradients reduce-scattered.
    let expected = (4 * p) as f64 / 8.0 + 3.0 * largest as f64;
    let out = Command::new(env!("CARGO_BIN_EXE_sgc"))
        .args([
            "plan",
            "graphs/real/gpt2.json.gz",
            "--world-size",
            "8",
            "--shard",
            "fsdp2",
        ])
        .args(["--optimizer", "adam", "--strategy", "none", "--json", "-q"])
        .current_dir(repo(""))
        .output()
        .expect("sgc runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let persistent = report["persistent_bytes"].as_u64().unwrap() as f64;
    assert!(
        (persistent - expected).abs() <= 0.01 * expected,
        "per-rank persistent {persistent} B, expected {expected} B"
    );
    let r = &report["per_rank"];
    assert_eq!(r["world_size"], 8);
    assert_eq!(r["parameter_bytes"].as_u64(), Some(p));
    assert_eq!(r["unsharded_bytes"].as_u64(), Some(3 * largest));
    // GPT-2's root (the tied embedding and head) is its largest unit.
    assert_eq!(r["largest_unit"][0], "");
    assert_eq!(r["units"], 13);
}

#[test]
fn a_rank_graph_drops_the_gradients_from_the_outputs_and_keeps_the_activations() {
    let g = gpt2();
    let d = Distribution {
        world_size: 4,
        shard: Shard::Fsdp2,
        optimizer: Optimizer::Momentum,
    };
    let (rank, r) = per_rank(&g, &d).unwrap();
    assert_eq!(rank.num_ops(), g.num_ops());
    assert_eq!(rank.outputs().len(), 1, "only the loss stays an output");
    assert_eq!(r.optimizer_bytes, r.rank_parameter_bytes);
    assert_eq!(r.gradient_bytes, r.rank_parameter_bytes);
    let (p, _) = parameters(&g);
    assert_eq!(
        r.rank_parameter_bytes,
        g.tensors()
            .iter()
            .filter(|t| t.kind == TensorKind::Param && t.alias_of.is_none())
            .map(|t| t.size.div_ceil(4))
            .sum::<u64>()
    );
    assert!(r.rank_parameter_bytes * 4 >= p && r.rank_parameter_bytes * 4 < p + 4 * 200);
    // Without sharding, Adam's state is two of the whole parameters.
    let (_, adam) = per_rank(
        &g,
        &Distribution {
            world_size: 1,
            shard: Shard::None,
            optimizer: Optimizer::Adam,
        },
    )
    .unwrap();
    assert_eq!(adam.optimizer_bytes, 2 * p);
    assert_eq!(adam.persistent_bytes, g.persistent_bytes() + 2 * p);
}

#[test]
fn fit_at_world_size_8_fits_more_per_rank_than_one_process() {
    let batch = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sgc"))
            .args([
                "fit",
                "graphs/real/gpt2.json.gz",
                "--memory",
                "40GiB",
                "--strategy",
                "none",
            ])
            .args(["--optimizer", "adam", "--json", "-q"])
            .args(extra)
            .current_dir(repo(""))
            .output()
            .expect("sgc runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["strategies"][0]["batch"].as_u64().unwrap()
    };
    let one = batch(&[]);
    let eight = batch(&["--world-size", "8", "--shard", "fsdp2"]);
    assert!(
        eight >= one,
        "world size 8 fits batch {eight} per rank, one process {one}"
    );
}

#[test]
fn what_cannot_be_sharded_is_refused_by_name() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sgc"))
            .args(args)
            .current_dir(repo(""))
            .output()
            .expect("sgc runs")
    };
    let out = run(&[
        "plan",
        "graphs/real/gpt2.json.gz",
        "--world-size",
        "8",
        "-q",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shard fsdp2"));
    // The zoo's graphs update their parameters in place: FSDP2 updates shards after the step.
    let out = run(&[
        "plan",
        "graphs/tiny_mlp.json",
        "--world-size",
        "2",
        "--shard",
        "fsdp2",
        "-q",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("graphs/tiny_mlp.json") && err.contains("updates its parameters in place"),
        "{err}"
    );
    let out = run(&["plan", "graphs/tiny_mlp.json", "--optimizer", "lamb", "-q"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("adam"));
}
