"""The native module `sgc` (crates/sgc-py): the same plans, reports and errors as the CLI.

Plans made through the bindings are compared key by key with what `sgc plan -o` writes for
the same graph and options (the binary is used for that comparison only); the other tests
use the module alone. Needs the module installed (`pip install ./python`); CI installs it
into its virtualenv on every run, from the commit's sources.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

sgc = pytest.importorskip("sgc", reason="the native module is not installed: pip install ./python")

REPO = Path(__file__).resolve().parents[2]


def _find_sgc():
    """`sgc_bin.find_sgc`, read from its file (this test runs without torch)."""
    spec = importlib.util.spec_from_file_location("_find_sgc", REPO / "python" / "tests" / "sgc_bin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.find_sgc


find_sgc = _find_sgc()
TINY = str(REPO / "graphs" / "tiny_mlp.json")
RESNET18 = str(REPO / "graphs" / "real" / "resnet18.json.gz")
DENSENET = str(REPO / "graphs" / "real" / "densenet121.json.gz")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(find_sgc()), *args], capture_output=True, text=True, check=True)


def cli_plan(tmp_path: Path, graph: str, *flags: str) -> dict:
    out = tmp_path / "plan.json"
    cli("plan", graph, "-q", "-o", str(out), *flags)
    return json.loads(out.read_text())


def assert_same(ours: dict, theirs: dict, where: str = "") -> None:
    """Equal key by key, naming the first key that differs."""
    assert list(ours) == list(theirs), f"{where}: keys {list(ours)} != {list(theirs)}"
    for key in theirs:
        if isinstance(theirs[key], dict) and isinstance(ours[key], dict):
            assert_same(ours[key], theirs[key], f"{where}.{key}")
        else:
            assert ours[key] == theirs[key], f"{where}.{key}: {ours[key]!r} != {theirs[key]!r}"


CASES = [
    (TINY, {}, []),
    (RESNET18, {}, []),
    (RESNET18, {"strategy": "chen-sqrt", "align": "512B"}, ["--strategy", "chen-sqrt", "--align", "512B"]),
    (RESNET18, {"budget": "1GiB", "genetic_iters": 5}, ["--budget", "1GiB", "--genetic-iters", "5"]),
    (RESNET18, {"goal": "balanced", "device_profile": "a100", "seed": 3},
     ["--goal", "balanced", "--device-profile", "a100", "--seed", "3"]),
    (RESNET18, {"strategy": "partition", "budget": "300MiB", "budget_of": "saved"},
     ["--strategy", "partition", "--budget", "300MiB", "--budget-of", "saved"]),
    (RESNET18, {"budget": "80%", "genetic_iters": 5}, ["--budget", "80%", "--genetic-iters", "5"]),
    (RESNET18, {"budget": "70%", "budget_of": "peak", "genetic_iters": 5},
     ["--budget", "70%", "--budget-of", "peak", "--genetic-iters", "5"]),
]


@pytest.mark.parametrize("graph,kwargs,flags", CASES, ids=lambda c: str(c)[-40:])
def test_plan_equals_the_cli_plan_file(tmp_path, graph, kwargs, flags):
    p = sgc.plan(graph, **kwargs)
    assert_same(p.to_dict(), cli_plan(tmp_path, graph, *flags), Path(graph).name)
    assert json.loads(p.to_json()) == p.to_dict()
    p.save(tmp_path / "ours.json")
    assert (tmp_path / "ours.json").read_text() == (tmp_path / "plan.json").read_text()


def test_report_is_the_cli_report_but_for_timings():
    ours = sgc.plan(RESNET18, workers=1).report().splitlines()
    theirs = cli("plan", RESNET18, "-q", "--workers", "1").stdout.splitlines()
    timed = ("plan time", "search")
    assert [line for line in ours if not line.startswith(timed)] == [
        line for line in theirs if not line.startswith(timed)
    ]
    assert len(ours) == len(theirs)


def test_graph_from_path_text_and_dict():
    g = sgc.load(Path(RESNET18))
    report = json.loads(cli("inspect", RESNET18, "--json").stdout)
    assert (g.name, g.num_ops, g.num_tensors) == ("resnet18", report["ops"], report["tensors"])
    for again in (sgc.load(g.to_json()), sgc.load(g.to_dict()), sgc.load(g.to_dict() | {})):
        assert again.fingerprint == g.fingerprint and again.path is None
    p = sgc.plan(g)
    assert p.to_dict()["graph"]["fingerprint"] == g.fingerprint == p.fingerprint
    assert p.to_dict()["graph"]["path"] == RESNET18
    assert "path" not in sgc.plan(g.to_dict()).to_dict()["graph"]


def test_summary_agrees_with_the_verifier():
    g = sgc.load(RESNET18)
    for strategy in ("none", "chen-sqrt", "sublinear", "dtr"):
        p = sgc.plan(g, strategy=strategy)
        s, v = p.summary, sgc.verify(g, p)
        assert s["planned_peak"] == v["peak_bytes"], strategy
        assert s["device_bytes"] == v["device_bytes"] == s["arena_bytes"] + s["persistent_bytes"]
        assert s["persistent_bytes"] == v["persistent_bytes"]
        assert s["steps"] == v["steps"] == len(p.steps)
        assert s["recompute_steps"] == sum(r for _, r in p.steps)
        assert s["lower_bound"] <= s["planned_peak"] <= s["unplanned_peak"]
        assert sgc.verify(g, p.to_dict())["peak_bytes"] == v["peak_bytes"]


def test_budgets_are_monotone():
    g = sgc.load(RESNET18)
    unplanned = sgc.plan(g, strategy="none").summary["device_bytes"]
    lb = sgc.plan(g).summary["lower_bound"]
    budgets = [lb + (unplanned - lb) * k // 4 for k in (1, 2, 3, 4)]
    last = None
    for budget in budgets:
        try:
            p = sgc.plan(g, budget=budget, genetic_iters=5)
        except sgc.BudgetNotMet as e:
            assert last is None, f"budget {budget} not met after a smaller one was: {e}"
            continue
        s = p.summary
        assert s["device_bytes"] <= budget
        if last is not None:
            assert s["recompute_cost"] <= last, f"budget {budget}: recompute rose"
        last = s["recompute_cost"]
    assert last == 0.0, "the unplanned device bytes as budget need no recompute"


def test_budget_below_the_lower_bound():
    g = sgc.load(RESNET18)
    lb = sgc.plan(g, strategy="none").summary["lower_bound"]
    with pytest.raises(sgc.BudgetNotMet) as e:
        sgc.plan(g, budget=lb - 1)
    assert (e.value.budget, e.value.lower_bound) == (lb - 1, lb)
    assert "below the per-op lower bound" in str(e.value) and str(e.value).startswith(RESNET18)
    assert isinstance(e.value, sgc.PlanError) and isinstance(e.value, sgc.SgcError)


def test_saved_budget_below_the_least_kept_carries_it():
    g = sgc.load(RESNET18)
    with pytest.raises(sgc.BudgetNotMet) as e:
        sgc.plan(g, strategy="partition", budget=1, budget_of="saved")
    least = e.value.lower_bound
    assert e.value.budget == 1 and least > 1 and "the least kept is" in str(e.value)
    p = sgc.plan(g, strategy="partition", budget=least, budget_of="saved")
    assert p.to_dict()["options"]["budget_of"] == "saved"


def test_budget_not_met_above_the_bound_carries_its_figures():
    g = sgc.load(RESNET18)
    lb = sgc.plan(g, strategy="none").summary["lower_bound"]
    # Between the per-op bound and the least-peak bound: refused before any plan is made,
    # the least-peak bound as its lower_bound.
    with pytest.raises(sgc.BudgetNotMet) as e:
        sgc.plan(g, strategy="chen-sqrt", budget=lb)
    floor = e.value.lower_bound
    assert e.value.budget == lb and floor > lb and e.value.best_device is None
    assert "least-peak lower bound" in str(e.value) and "host_link" in str(e.value)
    # The bound sgc.inspect reports (ResNet-18 has no in-place saving, so its device and
    # peak terms agree).
    info = sgc.inspect(RESNET18)
    assert floor == info["least_peak_bytes"]
    # The kept-outputs bound does not raise it here: ResNet-18's weight gradients come from
    # convolution backwards, which also make the input's gradient and so may run again.
    assert info["kept_outputs_bytes"] == info["least_peak_bytes"]
    # At that bound chen-sqrt plans and misses it: the figures of the lowest plan it made.
    with pytest.raises(sgc.BudgetNotMet) as e:
        sgc.plan(g, strategy="chen-sqrt", budget=floor)
    assert e.value.budget == floor and e.value.lower_bound == floor
    assert e.value.best_device is None or e.value.best_device > floor
    assert e.value.best_peak > floor


def test_malformed_graph_names_line_and_column():
    text = '{\n  "format": "sgc-graph",\n  "version": 1,,\n}'
    with pytest.raises(sgc.GraphError, match=r"invalid JSON at line 3, column 16"):
        sgc.load(text)
    with pytest.raises(sgc.GraphError, match=r"missing\.json"):
        sgc.load("missing.json")
    bad = sgc.load(TINY).to_dict()
    bad["ops"][0]["inputs"] = ["nowhere"]
    with pytest.raises(sgc.GraphError, match="tensor `nowhere`"):
        sgc.plan(bad)


def test_a_plan_for_another_graph_is_refused(tmp_path):
    tiny, resnet = sgc.load(TINY), sgc.load(RESNET18)
    p = sgc.plan(tiny)
    with pytest.raises(sgc.GraphMismatch, match=f"fingerprint {tiny.fingerprint}"):
        sgc.load_plan(p.to_dict(), resnet)
    p.save(tmp_path / "tiny.plan.json")
    with pytest.raises(sgc.PlanError, match="tiny.plan.json: this plan was made for graph"):
        sgc.load_plan(tmp_path / "tiny.plan.json", resnet)
    again = sgc.load_plan(tmp_path / "tiny.plan.json", tiny)
    assert again.to_dict() == p.to_dict() and again.summary == p.summary
    with pytest.raises(sgc.PlanRejected) as e:
        sgc.verify(resnet, p)
    assert len(e.value.violations) == 1 and tiny.fingerprint in e.value.violations[0]


def test_a_tampered_plan_is_rejected():
    g = sgc.load(TINY)
    d = sgc.plan(g).to_dict()
    d["steps"] = d["steps"][1:]
    with pytest.raises(sgc.PlanRejected) as e:
        sgc.verify(g, d)
    assert e.value.violations and "violation" in str(e.value)
    d = sgc.plan(g).to_dict()
    d["summary"]["step_cost"] += 1.0
    with pytest.raises(sgc.PlanRejected, match="summary does not match"):
        sgc.load_plan(d, g)


def test_bad_arguments_are_value_errors_naming_the_python_arguments():
    names = [s["name"] for s in sgc.strategies()]
    choices = ", ".join(names[:-1]) + " or " + names[-1]
    with pytest.raises(ValueError, match=f'unknown strategy "fastest": use {choices}'):
        sgc.plan(TINY, strategy="fastest")
    with pytest.raises(ValueError, match=r'invalid size "abc"'):
        sgc.plan(TINY, budget="abc")
    with pytest.raises(ValueError, match=r'budget: invalid share "0%"'):
        sgc.plan(TINY, budget="0%")
    with pytest.raises(ValueError, match="unknown goal"):
        sgc.plan(TINY, goal="fast")
    with pytest.raises(ValueError, match="workers"):
        sgc.plan(TINY, workers=0)
    # The library's message names the CLI's `--align`; Python's names the keyword argument.
    with pytest.raises(ValueError, match="invalid option: align must be at least 1") as caught:
        sgc.plan(TINY, align=0)
    assert "--" not in str(caught.value)
    with pytest.raises(ValueError, match=r"max_recompute=-1: expected a share"):
        sgc.fit(TINY, memory="1MiB", max_recompute=-1.0)
    with pytest.raises(TypeError):
        sgc.plan(TINY, budget=True)
    assert sgc.plan(TINY, budget="1.5GB").to_dict()["options"]["budget"] == 1_500_000_000
    # Counts: a negative one is a ValueError naming the argument (pyo3's own conversion
    # raised `OverflowError: can't convert negative int to unsigned`, naming nothing).
    # Each says what it takes as the CLI's flag does.
    for call, want in [
        (lambda: sgc.plan(TINY, genetic_iters=-5), "genetic_iters must be a whole number of 0 or more, got -5"),
        (lambda: sgc.fit(TINY, memory="1MiB", seed=-1), "seed must be a whole number of 0 or more, got -1"),
        (lambda: sgc.inspect(TINY, top=-3), "top must be a whole number of 0 or more, got -3"),
        (lambda: sgc.plan(TINY, workers=-1), "workers must be a whole number from 1 to 1024, got -1"),
        (lambda: sgc.fit(TINY, memory="1MiB", world_size=0), "world_size must be a whole number of 1 or more, got 0"),
        (lambda: sgc.plan(TINY, pool_size=2**70), f"pool_size must be a whole number of 0 or more, got {2**70}"),
    ]:
        with pytest.raises(ValueError) as caught:
            call()
        assert str(caught.value) == want
    with pytest.raises(TypeError, match="thresh_tries must be an int, not bool"):
        sgc.plan(TINY, thresh_tries=True)
    with pytest.raises(TypeError, match="pool_size must be an int, not str"):
        sgc.plan(TINY, pool_size="3")


def test_plan_takes_time_limit_s_as_the_cli_its_time_limit():
    theirs = json.loads(cli("plan", TINY, "--time-limit", "5", "--json", "-q").stdout)
    assert theirs["options"]["time_limit_s"] == 5
    assert sgc.plan(TINY, time_limit_s=5).to_dict()["options"]["time_limit_s"] == 5
    assert "time_limit_s" not in sgc.plan(TINY).to_dict()["options"]
    with pytest.raises(ValueError) as caught:
        sgc.plan(TINY, time_limit_s=0)
    assert str(caught.value) == "time_limit_s must be a whole number of 1 or more, got 0"


def test_fit_below_the_persistent_bytes_raises_naming_memory():
    graph = str(REPO / "graphs" / "tiny_cnn.json")
    with pytest.raises(sgc.BudgetNotMet) as caught:
        sgc.fit(graph, memory="1KiB")
    assert str(caught.value) == (
        f"{graph}: no batch fits: the persistent bytes alone (1.82 KiB, what lives across steps) "
        "exceed the limit 1.00 KiB; give memory more than that (plus reserve) plus one sample's activations"
    )
    assert caught.value.budget == 1024
    assert caught.value.lower_bound == sgc.plan(graph, strategy="none").summary["persistent_bytes"]


def test_inspect_and_fit_are_the_cli_json():
    assert sgc.inspect(RESNET18) == json.loads(cli("inspect", RESNET18, "--json").stdout)
    r = sgc.inspect(RESNET18)
    assert r["lower_bound_bytes"] < r["least_peak_bytes"] < r["unplanned_peak_bytes"]
    assert sgc.inspect(RESNET18, top=3, device_profile="h100") == json.loads(
        cli("inspect", RESNET18, "--json", "--top", "3", "--device-profile", "h100").stdout
    )
    graph = str(REPO / "graphs" / "tiny_cnn.json")
    ours = sgc.fit(graph, memory="64KiB", strategy="none,sublinear", genetic_iters=2)
    theirs = json.loads(cli("fit", graph, "--memory", "64KiB", "--strategy", "none,sublinear",
                            "--genetic-iters", "2", "--json", "-q").stdout)
    assert ours["max_recompute"] == theirs["max_recompute"] == pytest.approx(1 / 3)

    def untimed(report):
        for s in report["strategies"]:
            s.pop("search_seconds")
            for probe in [s["fitting"], s["next"], *s["probes"]]:
                if probe:
                    probe.pop("plan_seconds")
        return report

    assert untimed(ours) == untimed(theirs)
    assert ours["strategies"][1]["batch"] >= ours["strategies"][0]["batch"] > 0
    unlimited = sgc.fit(graph, memory="64KiB", strategy="none,sublinear", genetic_iters=2, max_recompute=None)
    assert untimed(unlimited) == untimed(json.loads(cli(
        "fit", graph, "--memory", "64KiB", "--strategy", "none,sublinear", "--genetic-iters", "2",
        "--max-recompute", "none", "--json", "-q").stdout))
    assert unlimited["max_recompute"] is None
    with pytest.raises(ValueError, match='unknown arena effort "max": use plan, default, thorough or fast'):
        sgc.fit(graph, memory="64KiB", arena_effort="max")


def test_fit_takes_plans_arena_effort_and_its_old_name():
    graph = str(REPO / "graphs" / "tiny_cnn.json")
    args = dict(memory="64KiB", strategy="none", genetic_iters=2)

    def batch(report):
        return report["strategies"][0]["batch"]

    plan_effort = sgc.fit(graph, arena_effort="plan", **args)
    assert batch(plan_effort) == json.loads(cli(
        "fit", graph, "--memory", "64KiB", "--strategy", "none", "--arena-effort", "plan",
        "--json", "-q").stdout)["strategies"][0]["batch"]
    with pytest.warns(DeprecationWarning, match="alloc_effort is deprecated: use arena_effort"):
        old = sgc.fit(graph, alloc_effort="default", **args)
    assert batch(old) == batch(sgc.fit(graph, arena_effort="default", **args))
    with pytest.raises(TypeError, match="alloc_effort is the old name of arena_effort"):
        sgc.fit(graph, arena_effort="thorough", alloc_effort="default", **args)


def test_planning_releases_the_gil():
    """Another Python thread keeps running while a plan is made (densenet121, ~1 s)."""
    g = sgc.load(DENSENET)
    done = threading.Event()
    took = []

    def work():
        start = time.perf_counter()
        sgc.plan(g, genetic_iters=40, workers=1)
        took.append(time.perf_counter() - start)
        done.set()

    beats = 0
    thread = threading.Thread(target=work)
    thread.start()
    while not done.is_set():
        beats += 1
        time.sleep(0.005)
    thread.join()
    # With the GIL held, this thread would get at most a beat or two in while planning.
    expected = took[0] / 0.005
    assert took[0] > 0.2, f"the plan took {took[0]:.3f} s: too short to tell"
    assert beats >= 0.2 * expected, f"{beats} beats in {took[0]:.2f} s: planning held the GIL"


def test_version_and_types():
    assert sgc.__version__ and isinstance(sgc.__version__, str)
    assert issubclass(sgc.GraphError, sgc.SgcError) and issubclass(sgc.PlanRejected, sgc.PlanError)
    assert Path(sgc.__file__).with_name("py.typed").exists()
