"""The library surface docs/explain.md documents: ``drakit.allocator.explain(...)`` is the
function however often it is called and whatever was imported before; an Explanation prints
as ``drakit explain`` does."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import drakit.allocator
from drakit.plugin.ops.cli import main
from tests.allocator.alloc_helpers import claim, dclass, device, request, rslice

SLICES = [rslice([device("gpu-0"), device("gpu-1", taints=[
    {"key": "k", "value": "v", "effect": "NoExecute"}])])]


def test_explain_called_twice_and_after_importing_the_submodules() -> None:
    first = drakit.allocator.explain(claim(request()), SLICES, [dclass()], "node-1")
    second = drakit.allocator.explain(claim(request(count=2)), SLICES, [dclass()], "node-1")
    for sub in ("engine", "explanation", "celenv"):  # importing submodules shadows nothing
        importlib.import_module(f"drakit.allocator.{sub}")

    third = drakit.allocator.explain(claim(request()), SLICES, [dclass()], "node-1")
    assert callable(drakit.allocator.explain)
    assert (first.allocatable, second.allocatable, third.allocatable) == (True, False, True)
    assert second.reasons == ["request gpu needs 2 device(s), 1 match"]


def test_explain_twice_in_a_fresh_interpreter() -> None:
    """The first call imports the implementation; the second must still find the function."""
    script = textwrap.dedent("""
        import drakit.allocator as a
        from tests.allocator.alloc_helpers import claim, dclass, device, request, rslice
        s = [rslice([device("gpu-0")])]
        print(a.explain(claim(request()), s, [dclass()], "node-1").allocatable,
              a.explain(claim(request()), s, [dclass()], "node-1").allocatable)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_str_of_an_explanation_is_the_cli_text(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    c = claim(request(count=2))
    files = {"claim.json": c, "slices.json": SLICES, "classes.json": [dclass()]}
    for name, obj in files.items():
        (tmp_path / name).write_text(json.dumps(obj))
    assert main(["explain", "--node", "node-1", "-f", str(tmp_path / "claim.json"),
                 "--slices-file", str(tmp_path / "slices.json"),
                 "--classes-file", str(tmp_path / "classes.json"),
                 "--no-cluster-claims"]) == 1
    cli = capsys.readouterr().out
    e = drakit.allocator.explain(c, SLICES, [dclass()], "node-1")
    assert str(e) + "\n" == cli
    assert str(e).startswith("claim default/c1 on node node-1: NOT ALLOCATABLE\n")
    assert "gpu-1: taint: taint k=v:NoExecute is not tolerated" in str(e)
    assert "Explanation(" not in str(e) and "RequestExplanation(" not in str(e)


def test_quantities_print_as_published() -> None:
    """Counters and capacities in reasons read as the slice and claim wrote them: ``1000``,
    not the API server's canonical ``1k``; sums and what is left in the same style."""
    from drakit.plugin.slices.quantity import as_published, parse

    assert as_published(parse("1000"), "1000") == "1000"
    assert as_published(parse("1k"), "1000") == "1000"
    assert as_published(parse("1200"), "1000") == "1200"
    assert as_published(parse("1.5"), "1") == "1.5"
    assert as_published(parse("60Gi"), "20Gi") == "60Gi"
    assert as_published(parse("1000"), "1k") == "1k"
    assert as_published(parse("3G"), "2500M") == "3G"
    assert as_published(parse("1000"), None) == "1k"
    counters = rslice([], name="counters", count=2, sharedCounters=[
        {"name": "lanes", "counters": {"bandwidth": {"value": "1000"}}}])
    links = [device(f"link-{i}", consumesCounters=[{"counterSet": "lanes", "counters": {
        "bandwidth": {"value": "600"}}}]) for i in range(2)]
    e = drakit.allocator.explain(claim(request(count=2)),
                                 [counters, rslice(links, name="links", count=2)], [dclass()],
                                 "node-1")
    assert e.reasons[0].endswith("need counter bandwidth of counter set lanes: 1200 needed, "
                                 "1000 available")
    nic = device("nic-0", caps={"bandwidth": "1000"}, allowMultipleAllocations=True)
    other = claim(request(), name="other")
    other["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.example.com", "pool": "pool-a", "device": "nic-0",
         "shareID": "0b8c3e1c-0000-4000-8000-000000000001",
         "consumedCapacity": {"bandwidth": "800"}}]}}}
    e = drakit.allocator.explain(claim(request(capacity={"requests": {"bandwidth": "500"}})),
                                 [rslice([nic])], [dclass()], "node-1", [other])
    [u] = e.requests[0].unmatched
    assert u.detail == "capacity bandwidth: 500 requested, 200 of 1000 left"
