//! The roofline estimate on a hand-made graph, term by term: a view op moves nothing,
//! repeated inputs count once, views count at their own logical size, an explicit `bytes`
//! wins, an f16 output takes the half-precision rate, `time_us` is kept; and
//! `with_estimated_times` writes estimates that survive a save and load.

use sgc_ir::cost::{bytes_moved, with_estimated_times, CostSources};
use sgc_ir::{format, CostSource, DeviceProfile, Graph, OpId, Roofline};

const GRAPH: &str = r#"{"format": "sgc-graph", "version": 1, "name": "roofline",
  "tensors": [
    {"name": "x",  "dtype": "f32", "shape": [8, 4], "kind": "input"},
    {"name": "w",  "dtype": "f32", "shape": [4, 4], "kind": "param"},
    {"name": "h",  "dtype": "f32", "shape": [8, 4]},
    {"name": "hv", "dtype": "f32", "shape": [32], "alias_of": "h"},
    {"name": "s",  "dtype": "f32", "shape": [8, 4]},
    {"name": "hh", "dtype": "f16", "shape": [8, 4]},
    {"name": "p",  "dtype": "u8",  "shape": [3], "bytes": 1000},
    {"name": "hs", "dtype": "f32", "shape": [4, 4], "alias_of": "h"},
    {"name": "t",  "dtype": "f32", "shape": [8, 4]}
  ],
  "ops": [
    {"name": "mm",      "op": "matmul",  "inputs": ["x", "w"], "outputs": ["h"], "flops": 256},
    {"name": "view",    "op": "reshape", "inputs": ["h"], "outputs": ["hv"]},
    {"name": "add",     "op": "add",     "inputs": ["h", "h"], "outputs": ["s"]},
    {"name": "cast",    "op": "to_f16",  "inputs": ["s"], "outputs": ["hh"], "flops": 2e12},
    {"name": "pack",    "op": "pack",    "inputs": ["hv", "h"], "outputs": ["p"], "flops": 0},
    {"name": "split",   "op": "split",   "inputs": ["h"], "outputs": ["hs", "t"]},
    {"name": "timed",   "op": "relu",    "inputs": ["s"], "outputs": []},
    {"name": "nothing", "op": "barrier", "inputs": [], "outputs": [], "flops": 99}
  ],
  "outputs": ["hh", "p", "t"]}"#;

fn graph() -> Graph {
    let text = GRAPH.replace(r#""outputs": []}"#, r#""outputs": [], "time_us": 7.5}"#);
    format::from_str(&text).expect("the hand-made graph is valid")
}

fn op(g: &Graph, name: &str) -> OpId {
    g.op_by_name(name).expect("op exists")
}

fn a100() -> DeviceProfile {
    "a100".parse().expect("a named profile")
}

#[test]
fn bytes_moved_follow_the_rule() {
    let g = graph();
    let moved = |name: &str| bytes_moved(&g, op(&g, name));
    assert_eq!(moved("mm"), 128 + 64 + 128);
    assert_eq!(moved("view"), 0, "every output is a view");
    assert_eq!(moved("add"), 128 + 128, "h read twice counts once");
    assert_eq!(moved("cast"), 128 + 64);
    // The view counts at its own logical size beside its base; `bytes` wins over the shape.
    assert_eq!(moved("pack"), 128 + 128 + 1000);
    // One output is not a view: not a view op; the view output counts at its own size.
    assert_eq!(moved("split"), 128 + 64 + 128);
    assert_eq!(moved("nothing"), 0);
}

#[test]
fn the_estimate_is_the_larger_term_at_the_right_rate() {
    let g = graph();
    let d = a100();
    let est = |name: &str| g.op_cost_with(op(&g, name), Some(&d));
    // f32 matmul: bandwidth-bound here (320 B at 2039 GB/s beats 256 flops at 19.5 TFLOP/s).
    let mm = est("mm");
    assert_eq!(mm.1, CostSource::Roofline);
    assert_eq!(mm.0, (320.0 / 2039e9_f64).max(256.0 / 19.5e12) * 1e6);
    assert!(Roofline::of(&g, op(&g, "mm"), &d).memory_bound());
    assert_eq!(est("view"), (0.0, CostSource::Roofline));
    // f16 output: the half rate (312 TFLOP/s), not the f32 one; compute-bound.
    let cast = Roofline::of(&g, op(&g, "cast"), &d);
    assert_eq!(cast.compute_s, 2e12 / 312e12);
    assert!(!cast.memory_bound());
    assert_eq!(est("cast").0, 2e12 / 312e12 * 1e6);
    assert_eq!(est("pack").0, 1256.0 / 2039e9 * 1e6);
    // time_us is kept; no inputs and no outputs take no time, whatever the flops.
    assert_eq!(est("timed"), (7.5, CostSource::TimeUs));
    assert_eq!(est("nothing"), (0.0, CostSource::Roofline));
    // Another device gives other numbers; no device keeps the format's rule.
    let t4: DeviceProfile = "t4".parse().expect("named");
    assert_eq!(
        g.op_cost_with(op(&g, "cast"), Some(&t4)).0,
        2e12 / 65e12 * 1e6
    );
    for o in g.op_ids() {
        assert_eq!(g.op_cost_with(o, None), g.op_cost(o));
    }
}

#[test]
fn the_half_rate_follows_the_first_input_when_there_is_no_output() {
    let text = r#"{"format": "sgc-graph", "version": 1,
      "tensors": [{"name": "a", "dtype": "bf16", "shape": [1024], "kind": "input"},
                  {"name": "b", "dtype": "f32", "shape": [1024], "kind": "input"}],
      "ops": [{"name": "sink", "op": "sink", "inputs": ["a", "b"], "outputs": [], "flops": 1e15}],
      "outputs": []}"#;
    let g = format::from_str(text).expect("valid");
    let d = DeviceProfile::custom(10.0, 100.0, 1000.0).expect("valid rates");
    assert_eq!(d.name(), "10/100/1000");
    let r = Roofline::of(&g, OpId::new(0), &d);
    assert_eq!(r.compute_s, 1e15 / 100e12);
    assert_eq!(r.bytes_moved, 2048 + 4096);
}

#[test]
fn estimated_times_are_written_with_their_source_and_reload() {
    let g = graph();
    let d = a100();
    let (filled, estimated) = with_estimated_times(&g, &d).expect("valid");
    assert_eq!(estimated, g.num_ops() - 1);
    let path = std::env::temp_dir().join(format!("sgc-cost-{}.json.gz", std::process::id()));
    format::save(&filled, &path).expect("saves");
    let back = sgc_ir::load_any(&path).expect("loads");
    assert_eq!(back, filled);
    for o in back.op_ids() {
        let (cost, source) = back.op_cost(o);
        assert_eq!(source, CostSource::TimeUs);
        assert_eq!(cost, g.op_cost_with(o, Some(&d)).0, "{}", back.op(o).name);
    }
    let meta = back.meta().expect("meta written");
    assert_eq!(
        meta["time_us_source"],
        serde_json::json!({"method": "roofline", "device_profile": "a100",
                           "f32_tflops": 19.5, "half_tflops": 312.0, "bandwidth_gbps": 2039.0})
    );
    // Nothing left to estimate: the graph (and its meta) stay as they are.
    let (again, n) = with_estimated_times(&back, &"h100".parse().expect("named")).expect("valid");
    assert_eq!((n, &again), (0, &back));
}

#[test]
fn cost_sources_are_described_for_reports() {
    let d = a100();
    let describe = |s: &[CostSource]| {
        s.iter()
            .copied()
            .collect::<CostSources>()
            .describe(Some(&d))
    };
    assert_eq!(describe(&[]), "none");
    assert_eq!(describe(&[CostSource::Flops]), "flops");
    assert_eq!(
        describe(&[CostSource::Roofline]),
        "roofline estimate (a100)"
    );
    assert_eq!(
        describe(&[CostSource::Roofline, CostSource::TimeUs]),
        "time_us and roofline estimate (a100)"
    );
    assert_eq!(describe(&[CostSource::Flops, CostSource::Bytes]), "mixed");
}

#[test]
fn the_estimate_summary_splits_memory_bound_time() {
    let g = graph();
    let d = a100();
    let s = sgc_ir::EstimateSummary::of(&g, &d);
    assert_eq!(
        s.estimated_ops,
        g.num_ops() - 1,
        "`timed` keeps its time_us"
    );
    let mut total = 0.0;
    let mut memory = 0.0;
    let mut memory_ops = 0;
    for o in g.op_ids().filter(|&o| g.op(o).time_us.is_none()) {
        let r = Roofline::of(&g, o, &d);
        total += r.time_us();
        if r.memory_bound() {
            memory += r.time_us();
            memory_ops += 1;
        }
    }
    // mm, add, pack, split move bytes with (almost) no flops; cast is compute-bound; the
    // view and the empty op take no time and are neither.
    assert_eq!(memory_ops, 4);
    assert_eq!(
        (s.estimated_time_us, s.memory_bound_time_us),
        (total, memory)
    );
    assert_eq!(s.memory_bound_ops, memory_ops);
    assert!(s.memory_bound_share() > 0.0 && s.memory_bound_share() < 1.0);
}
