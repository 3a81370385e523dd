"""Roofline `time_us` from the native module: the formula on hand-made ops, the profiles,
and every exported op costed (`sgc_trace.native`: one implementation, sgc-ir's `cost.rs`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import resnet_cnn
from sgc_trace import ExportError, InputSpec, export
from sgc_trace.native import module, parse_profile, profiles, with_times


def _t(name, dtype, shape, **extra):
    return {"name": name, "dtype": dtype, "shape": shape, **extra}


def _graph(ops, *tensors):
    """A valid graph of `tensors` (inputs unless produced) and `ops` (type `mm`)."""
    made = {o for op in ops for o in op["outputs"]}
    ts = [t if t["name"] in made or "kind" in t else {**t, "kind": "input"} for t in tensors]
    named = [{"name": f"op{i}", "op": "mm", **op} for i, op in enumerate(ops)]
    return {"format": "sgc-graph", "version": 1, "tensors": ts, "ops": named, "outputs": []}


def _time(op, *tensors, profile="a100"):
    graph = with_times(_graph([op], *tensors), parse_profile(profile))
    return graph["ops"][0]["time_us"]


X = _t("x", "f32", [4, 3])  # 48 B
W = _t("w", "f32", [3, 2], kind="param")  # 24 B
Y = _t("y", "f32", [4, 2])  # 32 B


def test_compute_bound_op_in_f32():
    wt = _t("wt", "f32", [2, 3], alias_of="w")
    view = {"inputs": ["w"], "outputs": ["wt"], "flops": 0}
    g = with_times(_graph([view, {"inputs": ["x", "wt"], "outputs": ["y"], "flops": 48_000_000_000}], X, W, wt, Y),
                   parse_profile("a100"))
    # flops / (19.5 TFLOP/s) = 2.4615 ms beats (48 + 24 + 32) B / 2039 GB/s
    assert g["ops"][1]["time_us"] == 48_000_000_000 / 19.5e12 * 1e6
    assert g["ops"][0]["time_us"] == 0.0  # a view op moves nothing


def test_memory_bound_op_counts_distinct_inputs_once():
    assert _time({"inputs": ["x", "x", "w"], "outputs": ["y"], "flops": 0}, X, W, Y) == (48 + 24 + 32) / 2039e9 * 1e6


def test_half_precision_rate_follows_the_first_output():
    h = _t("h", "f16", [1024, 1024])
    out = _t("o", "f16", [8])
    assert _time({"inputs": ["h"], "outputs": ["o"], "flops": 10**13}, h, out) == 10**13 / 312e12 * 1e6
    out32 = _t("o", "f32", [8])
    assert _time({"inputs": ["h"], "outputs": ["o"], "flops": 10**13}, h, out32) == 10**13 / 19.5e12 * 1e6


def test_bytes_field_overrides_the_shape():
    padded = _t("padded", "bf16", [10], bytes=64)
    s = _t("s", "f32", [8])
    assert _time({"inputs": ["padded"], "outputs": ["s"]}, padded, s) == (64 + 32) / 2039e9 * 1e6


def test_with_times_places_time_us_after_flops_and_records_the_source():
    graph = _graph([{"inputs": ["x", "w"], "outputs": ["y"], "flops": 48, "attrs": {}}], X, W, Y)
    with_times(graph, parse_profile("h100"))
    assert list(graph["ops"][0]) == ["name", "op", "inputs", "outputs", "flops", "time_us", "attrs"]
    assert graph["meta"]["time_us_source"] == {"method": "roofline", "device_profile": "h100", "f32_tflops": 67.0,
                                               "half_tflops": 989.0, "bandwidth_gbps": 3350.0}


@pytest.mark.parametrize("text,name,rates", [
    ("a100", "a100", (19.5, 312.0, 2039.0)),
    ("V100", "v100", (15.7, 125.0, 900.0)),
    ("t4", "t4", (8.1, 65.0, 320.0)),
    ("l4", "l4", (30.3, 121.0, 300.0)),
    ("h100", "h100", (67.0, 989.0, 3350.0)),
    ("rtx4090", "rtx4090", (82.6, 165.2, 1008.0)),
    ("19.5/312/2039", "19.5/312/2039", (19.5, 312.0, 2039.0)),
    (" 1e1 / 20.0 / 0.5 ", "10/20/0.5", (10.0, 20.0, 0.5)),
])
def test_profiles(text, name, rates):
    p = parse_profile(text)
    assert (p.name, p.f32_tflops, p.half_tflops, p.bandwidth_gbps) == (name, *rates)
    assert list(profiles()) == ["v100", "t4", "a100", "l4", "h100", "rtx4090"]


@pytest.mark.parametrize("text,message", [
    ("b200", 'unknown device profile "b200": use one of v100, t4, a100, l4, h100, rtx4090'),
    ("1/2", "2 numbers where 3 are needed"),
    ("1/x/3", '"x" is not a number'),
    ("1/0/3", "the half-precision rate is 0, not a finite number > 0"),
    ("1/2/inf", "the bandwidth is inf, not a finite number > 0"),
])
def test_bad_profiles(text, message):
    with pytest.raises(ExportError, match=message.replace("(", r"\(")):
        parse_profile(text)


def test_custom_profiles_cost_as_their_rates():
    graph = _graph([{"inputs": ["x", "w"], "outputs": ["y"], "flops": 0}], X, W, Y)
    by_name = with_times(dict(graph), parse_profile("19.5/312/2039"))["ops"][0]["time_us"]
    assert by_name == with_times(dict(graph), parse_profile("a100"))["ops"][0]["time_us"]


def test_every_exported_op_has_a_time_and_memory_bound_ops_are_not_free():
    graph = export(resnet_cnn.build, resnet_cnn.loss, resnet_cnn.inputs(4), update="sgd", device_profile="t4")
    times, source = module().roofline(graph, "t4")
    tensors = {t["name"]: t for t in graph["tensors"]}
    for op, t in zip(graph["ops"], times):
        assert isinstance(op["time_us"], float) and op["time_us"] >= 0
        assert op["time_us"] == t
        is_view = op["outputs"] and all("alias_of" in tensors[o] for o in op["outputs"])
        assert (op["time_us"] == 0) == bool(is_view), op["name"]
    relu = [op for op in graph["ops"] if op["op"] == "aten.relu.default"]
    assert relu and all(op["flops"] == 0 and op["time_us"] > 0 for op in relu)
    by_type = {op["op"] for op in graph["ops"]}
    assert {"aten.copy_.default", "aten.add_.Tensor", "sgc.batch_norm_update_stats"} <= by_type
    assert graph["meta"]["time_us_source"] == source and source["device_profile"] == "t4"


def test_linear_addmm_by_hand():
    graph = export(lambda: torch.nn.Linear(3, 2), F.mse_loss, [InputSpec("x", (4, 3)), InputSpec("y", (4, 2))])
    addmm = next(op for op in graph["ops"] if op["op"] == "aten.addmm.default")
    # bias 8 B + x 48 B + weight.t() 24 B in, 32 B out; 2*4*3*2 = 48 FLOPs
    assert addmm["flops"] == 48
    assert addmm["time_us"] == max(48 / 19.5e12, 112 / 2039e9) * 1e6
