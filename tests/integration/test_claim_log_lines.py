"""The claim path logs one line per claim and outcome: with ``-v 2`` a
prepared and an unprepared claim one V(2) line each; a failed claim exactly one WARNING line,
its error in ``err``; a vendor hook that raised its traceback once, in that line, and the
error names the plugin, the hook and the device. Read from ``drakit run``'s JSON log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drakit.plugin.testing.harness import DriverHarness

HERE = Path(__file__).resolve().parent


def _uid(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])


def test_one_line_per_claim_and_outcome(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(subprocess=True, discovery=["claim_log_plugin:BuggyHooks"],
                        plugin_options={"buggy": {"generate": {"count": 3, "prefix": "dev"}}},
                        env={"PYTHONPATH": str(HERE)},
                        extra_args=["--log-format", "json", "-v", "2"])
    pool = h.devices()[0][0]
    ok = h.allocate("ok", [(pool, "dev-0")])
    buggy = h.allocate("buggy", [(pool, "dev-1")])
    sticky = h.allocate("sticky", [(pool, "dev-2")])
    absent = h.allocate("absent", [(pool, "no-such-device")])
    got = h.prepare(ok, buggy, sticky, absent)  # one call, four claims
    assert got[_uid(ok)].error == "" and got[_uid(sticky)].error == ""
    hook_error = got[_uid(buggy)].error
    assert hook_error == (f"ResourceClaim default/buggy: the prepare hook of plugin buggy for "
                          f"device {pool}/dev-1 failed: KeyError: 'nope'"), hook_error
    assert got[_uid(absent)].error
    assert h.prepare(ok)[_uid(ok)].error == ""  # the kubelet's retry: from the checkpoint
    assert h.unprepare(ok) == {_uid(ok): ""}
    unprepare_error = h.unprepare(sticky)[_uid(sticky)]
    assert (f"the unprepare hook of plugin buggy for device {pool}/dev-2 failed: RuntimeError: "
            "card did not reset") in unprepare_error, unprepare_error
    h.stop_plugin()

    docs = [json.loads(line) for line in h.log_path.read_text().splitlines()]
    by_claim: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        if "claim" in doc:
            by_claim.setdefault(doc["claim"], []).append(doc)

    def lines(name: str) -> list[tuple[Any, ...]]:
        return [(d["msg"], d.get("v"), d.get("severity"), d.get("err"), "stacktrace" in d)
                for d in by_claim.get(f"default/{name}", [])]

    assert lines("ok") == [
        ("prepared claim with 1 device(s)", 2, None, None, False),
        ("claim already prepared; answered from its checkpoint record", 2, None, None, False),
        ("unprepared claim", 2, None, None, False),
    ]
    assert lines("buggy") == [("prepare failed", 0, "warning", hook_error, True)]
    assert lines("absent") == [("prepare failed", 0, "warning", got[_uid(absent)].error,
                                False)]
    assert lines("sticky") == [
        ("prepared claim with 1 device(s)", 2, None, None, False),
        ("unprepare failed", 0, "warning", unprepare_error, True),
    ]
    for doc in (*by_claim["default/buggy"], *by_claim["default/sticky"]):
        assert doc["claimUID"] in {_uid(buggy), _uid(sticky)}
    # each hook's traceback once in the whole log, in its claim's failure line, down to the
    # vendor's own line
    [prepare_trace] = [d["stacktrace"] for d in docs if "KeyError: 'nope'" in
                       d.get("stacktrace", "")]
    assert "claim_log_plugin.py" in prepare_trace and '["nope"]' in prepare_trace
    [unprepare_trace] = [d["stacktrace"] for d in docs if "card did not reset" in
                         d.get("stacktrace", "")]
    assert "claim_log_plugin.py" in unprepare_trace
    # no other line of the claim path says these claims failed (the kubelet servicer's or the
    # call's own lines name no claim that the node service answered)
    for doc in docs:
        if "claim" not in doc:
            text = json.dumps(doc)
            for c in (buggy, sticky, absent):
                assert _uid(c) not in text and f"default/{c['metadata']['name']}" not in text, doc
