"""The real-model corpus: every model exports (at the small test size) into a graph that
`sgc inspect`, the reference memory model and `sgc plan --strategy chen-sqrt` (with its
verifier) accept; the committed `graphs/real/*.json.gz` are complete and current."""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys

import pytest
import torch

from sgc_trace.exporter.api import dumps, export, load, save
from sgc_trace.tools.corpus import BY_NAME, CORPUS, export_entry, library_version
from sgc_bin import REPO, run_sgc

REAL = REPO / "graphs" / "real"
MEMMODEL = REPO.parent / "shared" / "tools" / "memmodel.py"
pytest.importorskip("torchvision")
pytest.importorskip("transformers")
META_KEYS = ("model", "batch_size", "dtype", "exporter", "torch_version", "library", "time_us_source")


def _param_count(factory) -> int:
    """Parameters of the model as built for real on the meta device (no memory), else on the CPU."""
    try:
        with torch.device("meta"):
            model = factory()
    except Exception:  # constructors that read data (trunc_normal_) need real tensors
        model = factory()
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module", params=[e.name for e in CORPUS])
def small(request, tmp_path_factory):
    entry = BY_NAME[request.param]
    graph = export_entry(entry, small=True)
    path = tmp_path_factory.mktemp("corpus") / f"{entry.name}.json"
    save(graph, path)
    return entry, graph, path


def test_small_export_inspects_and_agrees_with_the_reference(small):
    entry, graph, path = small
    report = json.loads(run_sgc("inspect", "--json", str(path)).stdout)
    assert report["ops"] == len(graph["ops"]) and report["tensors"] == len(graph["tensors"])
    assert report["ops_per_phase"]["forward"] > 0 and report["ops_per_phase"]["backward"] > 0
    assert report["cost_sources"]["time_us"] == len(graph["ops"])
    assert report["unplanned_peak_bytes"] >= report["lower_bound_bytes"] > report["persistent_bytes"]
    if MEMMODEL.is_file():
        ref = json.loads(subprocess.run([sys.executable, str(MEMMODEL), str(path), "--json"],
                                        capture_output=True, text=True, check=True).stdout)
        assert (ref["peak"], ref["lower_bound"]) == (report["unplanned_peak_bytes"], report["lower_bound_bytes"])


def test_small_export_plans_with_chen_sqrt_and_verifies(small):
    _, _, path = small
    result = run_sgc("plan", "--strategy", "chen-sqrt", str(path), check=False)
    assert result.returncode == 0, result.stderr
    assert "plan verified" in result.stdout


def test_small_export_meta_and_parameters(small):
    entry, graph, _ = small
    meta = graph["meta"]
    assert all(k in meta for k in META_KEYS), [k for k in META_KEYS if k not in meta]
    assert meta["model"] == entry.model and meta["dtype"] == "f32"
    assert meta["batch_size"] == entry.make(True).inputs[0].shape[0]
    assert meta["param_count"] == _param_count(entry.make(True).factory)
    # Only copies into state and random draws are fixed in place.
    fixed = {op["op"] for op in graph["ops"] if op.get("recomputable") is False}
    assert fixed <= {"aten.copy_.default", "aten.native_dropout.default", "aten.bernoulli.p"}, fixed


def test_committed_corpus_is_complete():
    files = sorted(p.name for p in REAL.glob("*.json.gz"))
    assert files == sorted(f"{e.name}.json.gz" for e in CORPUS)
    for entry in CORPUS:
        graph = load(REAL / f"{entry.name}.json.gz")
        full = entry.make(False)
        assert graph["name"] == entry.name
        assert all(k in graph["meta"] for k in META_KEYS)
        assert graph["meta"]["batch_size"] == full.inputs[0].shape[0]
        inputs = {t["name"]: t["shape"] for t in graph["tensors"] if t.get("kind") == "input"}
        assert inputs == {spec.name: list(spec.shape) for spec in full.inputs}


def test_committed_corpus_inspects(tmp_path):
    for entry in CORPUS:
        path = tmp_path / f"{entry.name}.json"
        path.write_bytes(gzip.decompress((REAL / f"{entry.name}.json.gz").read_bytes()))
        report = json.loads(run_sgc("inspect", "--json", str(path)).stdout)
        assert report["unplanned_peak_bytes"] >= report["lower_bound_bytes"], entry.name


@pytest.mark.parametrize("name", ["resnet18", "unet"])
def test_committed_corpus_is_current(name, tmp_path):
    """Regenerating gives the committed bytes (with the same library versions)."""
    entry = BY_NAME[name]
    committed = load(REAL / f"{name}.json.gz")
    versions = (committed["meta"]["torch_version"], committed["meta"]["library"])
    here = (torch.__version__.split("+")[0], library_version(entry.library))
    if versions != here:
        pytest.skip(f"corpus made with {versions}, this is {here}")
    path = tmp_path / f"{name}.json.gz"
    save(export_entry(entry), path)
    assert path.read_bytes() == (REAL / f"{name}.json.gz").read_bytes(), (
        "stale: regenerate with `just real-corpus`"
        if dumps(load(path)) != dumps(committed) else "same graph, different gzip bytes")


def test_small_export_rescales_to_what_pytorch_traces_at_another_batch(small, tmp_path):
    """The typed batch rules agree with PyTorch itself: `sgc rescale` of the small graph to
    batch B+2 gives every tensor the shape, and every op the attributes, that a fresh trace
    of the model at B+2 has."""
    entry, graph, path = small
    batch = graph["meta"]["batch_size"]
    out = tmp_path / "rescaled.json"
    run_sgc("rescale", "--batch", str(batch + 2), "-o", str(out), str(path))
    rescaled = load(out)
    spec = entry.make(True)
    inputs = [
        dataclasses.replace(s, shape=tuple(d + 2 if i == s.batch_dim else d for i, d in enumerate(s.shape)))
        for s in spec.inputs
    ]
    traced = export(spec.factory, spec.loss, inputs, num_model_inputs=spec.num_model_inputs,
                    name=entry.name, raw_output=spec.raw_output, mark_batch=False)
    shapes = {t["name"]: t["shape"] for t in traced["tensors"]}
    assert {t["name"]: t["shape"] for t in rescaled["tensors"]} == shapes
    # Ops by position (module labels of a few ops differ between two traces).
    attrs = [(o["op"], o.get("attrs")) for o in traced["ops"]]
    assert [(o["op"], o.get("attrs")) for o in rescaled["ops"]] == attrs
