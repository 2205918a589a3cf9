"""``make bench`` works: the statistics, goal verdicts, figure selection and table are right,
and ``python -m bench.run --quick`` runs the real agent end to end and writes the JSON file.
No timing is asserted (machines are shared): only shapes and that figures were measured."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from figure_checks import reported

from bench.env import byte_compile_drakit
from bench.figures import SPECS, Goal, Result
from bench.pydra import pydra_dir
from bench.run import _groups, ratios, select, table
from bench.runtime import runtime_python
from bench.stats import percentile, summarize

REPO = Path(__file__).resolve().parents[2]


def test_percentile_and_summary() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([5.0], 99) == 5.0
    assert percentile(list(map(float, range(101))), 99) == pytest.approx(99.0)
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert (s.n, s.median, s.min, s.max) == (4, 2.5, 1.0, 4.0)
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_agent_modules_byte_compiled() -> None:
    """The bench's agents load drakit from byte code, as the image's do (also behind the
    ``drakit/plugin`` link, which compileall does not follow by itself)."""
    import drakit.discovery.builtin.example
    import drakit.plugin.kubelet.server

    modules = (drakit.plugin.kubelet.server, drakit.discovery.builtin.example)
    for module in modules:
        pyc = Path(importlib.util.cache_from_source(module.__file__ or ""))
        pyc.unlink(missing_ok=True)
    byte_compile_drakit()
    for module in modules:
        pyc = Path(importlib.util.cache_from_source(module.__file__ or ""))
        assert pyc.is_file(), pyc
        assert os.stat(pyc).st_mtime >= os.stat(module.__file__ or "").st_mtime


def test_agents_run_on_runtime_dependencies_only() -> None:
    """The bench's agents run on an interpreter with drakit from this checkout and none of
    the dev extras (``kubernetes.dynamic`` would load kubernetes_validate, ~3 MB of RSS no
    deployed agent has), at the dev venv's versions of the runtime dependencies."""
    python, note = runtime_python()
    assert note == "", note
    assert python != sys.executable
    probe = ("import importlib.util as u, importlib.metadata as m, drakit, kubernetes; "
             "print(drakit.__path__[0]); print(m.version('grpcio'), m.version('kubernetes')); "
             "print(u.find_spec('kubernetes_validate'), u.find_spec('pytest'))")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True,
                         timeout=60).stdout.splitlines()
    assert Path(out[0]).resolve() == (REPO / "src" / "drakit").resolve()
    from importlib.metadata import version
    assert out[1] == f"{version('grpcio')} {version('kubernetes')}"
    assert out[2] == "None None"


def test_goal_verdicts() -> None:
    s = summarize([2.0, 3.0, 4.0])
    assert Goal("<=", 3).verdict(s) == "pass"
    assert Goal("<=", 2.9).verdict(s) == "miss"
    assert Goal(">=", 3).verdict(s) == "pass"
    assert Goal(">=", 3.1).verdict(s) == "miss"
    assert Goal("report").verdict(s) == "report"
    assert Goal("==", 0).verdict(summarize([0.0, 0.0])) == "pass"
    assert Goal("==", 0).verdict(summarize([0.0, 1.0, 0.0])) == "miss"  # any repeat counts


def test_result_json_and_skips() -> None:
    r = Result("prepare_p50", samples=[1.0, 2.0, 9.0])
    doc = r.to_json()
    assert doc["median"] == 2.0 and doc["verdict"] == "pass"
    assert doc["spread"] == {"p10": 1.2, "p90": 7.6, "min": 1.0, "max": 9.0}
    assert doc["goal"] == "≤ 3 ms"
    skipped = Result("hotplug", skipped="needs root")
    assert skipped.verdict == "skipped" and skipped.to_json()["median"] is None
    assert "skipped: needs root" in table([r, skipped])


def test_select_by_figure_or_group() -> None:
    groups = _groups()
    covered = {f for g in groups for f in g.figures}
    assert covered | {"ratio_prepare_p50", "ratio_throughput"} == set(SPECS)
    assert [g.name for g in select(groups, ["prepare_p99"])] == ["claims"]
    assert [g.name for g in select(groups, ["start", "hotplug"])] == ["start", "hotplug"]
    assert select(groups, []) == groups
    with pytest.raises(ValueError, match="nope"):
        select(groups, ["nope"])


def test_ratios_need_both_sides() -> None:
    got = ratios({"prepare_p50": Result("prepare_p50", samples=[2.0]),
                  "pydra_prepare_p50": Result("pydra_prepare_p50", samples=[3.0])})
    assert [(r.name, r.samples) for r in got] == [("ratio_prepare_p50", [1.5])]
    assert ratios({"prepare_p50": Result("prepare_p50", samples=[2.0])}) == []


def _run_bench(tmp_path: Path, *only: str, timeout: float) -> dict:
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "bench.run", "--quick", "--out", str(out),
           "--workdir", str(tmp_path)]
    for name in only:
        cmd += ["--only", name]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| figure" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    return {f["name"]: f for f in doc["figures"]}


def test_quick_discovery_group(tmp_path: Path) -> None:
    figures = _run_bench(tmp_path, "discovery_4096", timeout=120)
    assert list(figures) == ["discovery_4096"]
    f = figures["discovery_4096"]
    assert reported(f["median"]) and f["verdict"] in ("pass", "miss")
    assert f["extra"]["devices"] == 256
    assert not list(tmp_path.glob("drakit-bench-*")), "temporary directories left behind"


def test_quick_explain_group(tmp_path: Path) -> None:
    figures = _run_bench(tmp_path, "explain_1000", timeout=120)
    f = figures["explain_1000"]
    assert reported(f["median"]) and f["verdict"] in ("pass", "miss")
    assert f["extra"]["devices"] == 100


def test_cel_choice_measures_both_libraries() -> None:
    from bench.celchoice import measure

    res = measure(n=20)
    assert set(res) == {"cel-python", "cel-expr-python"}
    for r in res.values():
        assert 0 < r["conformance"] <= r["of"]
        assert reported(r["us_per_eval"]) and reported(r["rss_mb"])
    assert res["cel-expr-python"]["conformance"] > res["cel-python"]["conformance"]


@pytest.mark.slow
def test_quick_bench_end_to_end(tmp_path: Path) -> None:
    """Every group against the real ``drakit run`` (pydra only when already installed:
    installing it needs the package index)."""
    only = ["claims", "start", "publish", "hotplug"]
    if (pydra_dir() / "pydra").is_dir():
        only.append("pydra")
    figures = _run_bench(tmp_path, *only, timeout=600)
    for name in ("prepare_p50", "unprepare_p99", "fsync_floor", "grpc_floor", "claim_get_floor",
                 "claim_cpu",
                 "prepare_throughput", "rss_loaded", "start_to_registered", "rss_idle",
                 "publish_cold_10k", "resync_writes"):
        f = figures[name]
        assert f["skipped"] is None, (name, f["skipped"])
        assert reported(f["median"]), name
    assert figures["resync_writes"]["samples"], "no resync observed"
    hot = figures["hotplug"]
    assert hot["median"] is not None or hot["skipped"]
    if "pydra" in only:
        assert figures["pydra_prepare_p50"]["median"] is not None
        assert "ratio_prepare_p50" in figures


def test_quick_explain_cluster_group(tmp_path: Path) -> None:
    """The cluster-wide explain figure is measured and reported (50 nodes in quick mode)."""
    figures = _run_bench(tmp_path, "explain_cluster", timeout=120)
    f = figures["explain_cluster_1000"]
    assert f["median"] is not None and f["verdict"] in ("pass", "miss")
    assert f["extra"] == {"nodes": 50, "devices": 500}
