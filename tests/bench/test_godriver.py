"""The Go reference driver of ``make bench`` (bench/go) does the work it is compared on: it
registers with the fake kubelet, publishes the generated devices, and per claim writes the
checkpoint and one CDI spec, answers the CDI device IDs, applies and removes the claim's
AllocatedDeviceStatus (with ``-write-status``); ``python -m bench.run --quick --only go``
prints the side-by-side table. Skipped without a Go toolchain (the driver cannot be built)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from figure_checks import reported

from bench.env import NODE, BenchConfig, wait_until
from bench.figures import Result
from bench.godriver import GO_DRIVER, ensure_go_driver, go_agent
from bench.vsgo import (
    FIGURES,
    PUBLISH_FIGURE,
    Samples,
    _grpc_floor_notes,
    _results,
    _status_cost_notes,
    side_by_side,
)

pytestmark = pytest.mark.skipif(shutil.which("go") is None,
                                reason="no Go toolchain: the Go reference driver is not built")


@pytest.fixture(scope="module")
def binary() -> Path:
    path, reason = ensure_go_driver()
    assert path is not None, reason
    return path


def _status_devices(api: object, name: str) -> list[dict]:
    claim = api.get_object("resourceclaims", name, "bench")  # type: ignore[attr-defined]
    return (claim.get("status") or {}).get("devices") or []


@pytest.mark.parametrize("write_status", [True, False])
def test_go_driver_prepares_durably(tmp_path: Path, binary: Path, write_status: bool) -> None:
    cfg = BenchConfig(quick=True, workdir=tmp_path)
    with go_agent(cfg, binary, devices=130, write_status=write_status) as g:
        wait_until(lambda: len(g.devices()) >= 130, 30, "130 devices published")
        devices = g.devices()
        assert len(devices) == 130 and devices[5] == (NODE, "dev-5")
        assert sorted(len(s["spec"]["devices"]) for s in g.slices()) == [2, 128]  # type: ignore[index]
        (claim,) = g.bench.claims("one", [devices[5]])
        _, name, uid = claim
        got = g.bench.kubelet.node_prepare_resources(GO_DRIVER, [claim], 30)[uid]
        assert not got.error
        assert got.cdi_device_ids == [f"{GO_DRIVER}/device={uid}-dev-5"]
        spec = json.loads((g.cdi_dir / f"{GO_DRIVER}-device_{uid}.json").read_text())
        assert spec["kind"] == f"{GO_DRIVER}/device"
        assert [d["name"] for d in spec["devices"]] == [f"{uid}-dev-5"]
        checkpoint = json.loads(
            (g.root / "plugins" / GO_DRIVER / "checkpoint.json").read_text())
        assert checkpoint["claims"][uid]["phase"] == "PrepareCompleted"
        status = _status_devices(g.bench.apiserver, name)
        if write_status:
            assert [(d["driver"], d["device"], d["conditions"][0]["type"]) for d in status] \
                == [(GO_DRIVER, "dev-5", "Ready")]
        else:
            assert status == []
        # idempotent: a second prepare answers the same IDs
        again = g.bench.kubelet.node_prepare_resources(GO_DRIVER, [claim], 30)[uid]
        assert again.cdi_device_ids == got.cdi_device_ids
        assert g.bench.kubelet.node_unprepare_resources(GO_DRIVER, [claim], 30)[uid] == ""
        assert not (g.cdi_dir / f"{GO_DRIVER}-device_{uid}.json").exists()
        checkpoint = json.loads(
            (g.root / "plugins" / GO_DRIVER / "checkpoint.json").read_text())
        assert uid not in checkpoint["claims"]
        assert _status_devices(g.bench.apiserver, name) == []
        assert not list(g.cdi_dir.glob(".*tmp*")), "temporary files left behind"


def test_side_by_side_table() -> None:
    r = Result("vsgo_prepare_p50", samples=[0.9, 1.1])
    r.extra.update(drakit=[2.0, 2.2], go_status=[2.2, 2.0], go=[1.0, 1.1],
                   ratio_vs_go=[2.0, 2.0])
    skipped = Result("vsgo_throughput", skipped="no Go toolchain")
    text = side_by_side({r.name: r, skipped.name: skipped})
    lines = text.splitlines()
    assert lines[0].startswith("| figure") and "Go + status" in lines[0]
    assert "| prepare p50 (1 claim x 1 device)" in lines[2]
    assert "2.1 (2-2.2) ms" in lines[2] and "1 (0.900-1.1) x" in lines[2]
    assert "miss" not in lines[2] and "pass" in lines[2]
    assert "skipped: no Go toolchain" in lines[3]
    assert side_by_side({}) == ""
    assert "without AllocatedDeviceStatus" not in text  # no drakit_nostatus arm measured


def test_the_no_status_pairing_gets_its_own_table_and_status_costs() -> None:
    """Two rounds of four arms: the like-for-like ratio (drakit --no-device-status / Go
    without status) and what status adds to each side's own p50, per round."""
    samples = Samples()
    for arm, values in (("drakit", [3.0, 2.6]), ("go_status", [2.8, 2.6]), ("go", [1.6, 1.4]),
                        ("drakit_nostatus", [2.0, 1.96])):
        for v in values:
            samples.add("vsgo_unprepare_p50", arm, v)
    [r] = _results(samples, ["vsgo_unprepare_p50"], 2)
    assert r.samples == [3.0 / 2.8, 1.0]
    assert r.extra["nostatus_ratio_vs_go"] == [1.25, 1.4]
    _status_cost_notes([r])
    assert r.extra["status_cost_ms"] == {"drakit": [1.0, 0.64], "go": [1.2, 1.2]}
    assert "drakit +0.82 ms" in r.notes[0] and "Go +1.20 ms" in r.notes[0]
    text = side_by_side({r.name: r})
    tables = text.split("without AllocatedDeviceStatus on either side")
    assert len(tables) == 2
    assert "| unprepare p50" in tables[1] and "1.98 (1.96-2) ms" in tables[1]
    assert "1.32 (1.25-1.4) x" in tables[1]


def test_grpc_floor_notes_take_the_servers_difference_out_per_round() -> None:
    """Round 1: drakit 5.0 ms, Go 4.0 ms, GetInfo 0.6 against 0.3 ms: (5.0 - 0.3) / 4.0."""
    p50 = Result("vsgo_prepare_p50", samples=[1.25, 1.0])
    p50.extra.update(drakit=[5.0, 4.0], go_status=[4.0, 4.0])
    p99 = Result("vsgo_prepare_p99", samples=[1.0])
    samples = Samples()
    for arm, values in (("drakit", [0.6, 0.5]), ("go_status", [0.3, 0.3])):
        for v in values:
            samples.add("grpc_floor", arm, v)
    _grpc_floor_notes([p50, p99], samples)
    assert p50.extra["ratio_without_grpc_difference"] == [1.175, 0.95]
    assert p50.extra["grpc_floor_ms"] == {"drakit": [0.6, 0.5], "go_status": [0.3, 0.3]}
    assert "0.55 ms on drakit's server" in p50.notes[0] and "0.30 ms on the Go" in p50.notes[0]
    assert "ratio is 1.06 (0.95-1.18)" in p50.notes[0]
    assert not p99.notes and "ratio_without_grpc_difference" not in p99.extra
    untouched = Result("vsgo_prepare_p50", samples=[1.0])
    _grpc_floor_notes([untouched], Samples())  # no probes: nothing claimed
    assert not untouched.notes and not untouched.extra


@pytest.mark.slow
def test_quick_go_groups(tmp_path: Path) -> None:
    """``--quick --only go,go_publish``: one round of every arm, the side-by-side table."""
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "go,go_publish", "--out",
         str(out), "--workdir", str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "drakit vs the Go reference driver" in proc.stdout
    figures = {f["name"]: f for f in json.loads(out.read_text())["figures"]}
    assert set(figures) == {*FIGURES, PUBLISH_FIGURE}
    for name, f in figures.items():
        assert f["skipped"] is None, (name, f["skipped"])
        assert reported(f["median"]), name
        for arm in ("drakit", "go_status", "go"):
            assert len(f["extra"][arm]) == 1 and reported(f["extra"][arm][0]), (name, arm)
    assert not list(tmp_path.glob("drakit-bench-*")), "temporary directories left behind"
    floors = figures["vsgo_prepare_p50"]["extra"]["grpc_floor_ms"]
    assert all(len(floors[arm]) == 1 and reported(floors[arm][0])
               for arm in ("drakit", "go_status"))
