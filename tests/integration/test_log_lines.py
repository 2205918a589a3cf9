"""Every line ``drakit run`` writes parses, in both log formats: a prepare / unprepare /
failure run and a run of hostile gRPC requests (random bytes, a newline in a namespace, huge
fields, 10,000-claim calls). Nothing a request carries reaches the log raw: no line is forged,
no line is unbounded, and the whole run writes a bounded number of lines."""

from __future__ import annotations

import contextlib
import json
import random
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from drakit.plugin.kubelet.protocol import DRA_MODULES, DRA_V1
from drakit.plugin.ops.logs import LINE_MAX, MSG_MAX, VALUE_MAX
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.kubelet.calls import KubeletCallError, KubeletCheckError

DRIVER = "drakit.example.com"
TEXT_LINE = re.compile(
    r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 (INFO|WARNING|ERROR|CRITICAL|V[1-7]) '
    r'\S+ \S+:\d+\] "(?:[^"\\]|\\.)*"(?: [A-Za-z][\w.…-]*=\S.*)?$')
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
FORGED = "INFO fake log line driver=forged"
CLAIM_PATH = ("plugin/kubelet/dra.py", "plugin/claims/node.py", "plugin/claims/prepare.py",
              "plugin/claims/unprepare.py")


def _uid() -> str:
    return str(uuid.uuid4())


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _call_quietly(call: Callable[[], object]) -> None:
    # the agent may refuse a hostile call: its log is what is under test
    with contextlib.suppress(KubeletCallError, KubeletCheckError, grpc.RpcError):
        call()


def _run_claims(h: DriverHarness) -> None:
    """A prepare, its unprepare, a claim on a device this node lacks, a missing claim."""
    ok = h.allocate("c1", [("node-1", "gpu-0")])
    assert h.prepare(ok)[ok["metadata"]["uid"]].error == ""
    assert h.unprepare(ok) == {ok["metadata"]["uid"]: ""}
    bad = h.allocate("bad1", [("node-1", "no-such-device")])
    assert h.prepare(bad)[bad["metadata"]["uid"]].error
    missing = ("default", "missing", _uid())
    assert h.prepare(missing)[missing[2]].error


def _run_hostile(h: DriverHarness) -> None:
    """Bounded: 60 undecodable requests, 6 hostile claim fields, two 10,000-claim calls."""
    sock = h.kubelet.registered_plugins(DRIVER)[0].endpoint
    service = f"/{DRA_MODULES[DRA_V1][0].DESCRIPTOR.package}.DRAPlugin/"
    rng = random.Random(33)
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        for method in ("NodePrepareResources", "NodeUnprepareResources"):
            raw = channel.unary_unary(service + method, request_serializer=lambda x: x,
                                      response_deserializer=lambda x: x)
            for _ in range(30):
                _call_quietly(lambda r=raw: r(rng.randbytes(rng.randint(1, 64)), timeout=10))  # type: ignore[misc]
    hostile = [
        (f"default\n{FORGED}", "c1", _uid()),
        ("default", f"x\r\n{FORGED}\x1b[2J", _uid()),
        ("default", "n" * (1 << 20), _uid()),
        ("ns\u2028" * 5000, "c", _uid()),
        ("default", "c2", f"{_uid()}\n{FORGED}"),
        ("default", "c3", "u" * (1 << 20)),
    ]
    for claim in hostile:
        _call_quietly(lambda c=claim: h.prepare(c, timeout=30))  # type: ignore[misc]
        _call_quietly(lambda c=claim: h.unprepare(c, timeout=30))  # type: ignore[misc]
    many = [("default", f"n{i}\n{FORGED}", _uid()) for i in range(10_000)]
    _call_quietly(lambda: h.kubelet.node_prepare_resources(DRIVER, many, timeout=60))
    _call_quietly(lambda: h.kubelet.node_unprepare_resources(DRIVER, many, timeout=60))


def _check_json(lines: list[str]) -> list[dict[str, Any]]:
    docs = []
    for line in lines:
        doc = json.loads(line)
        assert isinstance(doc, dict), line[:200]
        assert isinstance(doc["ts"], float) and re.fullmatch(r"\S+:\d+", doc["caller"]), doc
        assert isinstance(doc["msg"], str) and len(doc["msg"]) <= MSG_MAX, line[:200]
        for key, value in doc.items():
            if key in ("stacktrace", "settings"):
                continue
            if isinstance(value, str):
                assert len(value) <= max(MSG_MAX, VALUE_MAX), (key, len(value))
        for text in _strings({k: v for k, v in doc.items() if k != "stacktrace"}):
            assert not CONTROL.search(text), (text[:200], line[:300])
        for text in doc.get("stacktrace", "").split("\n"):
            assert not CONTROL.search(text), text[:200]
        docs.append(doc)
    return docs


def _check_text(lines: list[str]) -> None:
    for line in lines:
        if line.startswith("\t"):  # a traceback line, indented
            assert not CONTROL.search(line[1:]), line[:200]
            continue
        assert TEXT_LINE.match(line), line[:300]
        assert not CONTROL.search(line), line[:300]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_every_log_line_parses(fmt: str, harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(subprocess=True, extra_args=["--log-format", fmt, "-v", "7"])
    _run_claims(h)
    _run_hostile(h)
    h.stop_plugin()
    raw = h.log_path.read_bytes()
    text = raw.decode("utf-8")  # strict: no broken UTF-8 either
    lines = text.splitlines()
    assert raw.endswith(b"\n")
    assert all(len(line) <= LINE_MAX for line in lines), max(map(len, lines))
    # bounded as a whole: the hostile run (two 10,000-claim calls among them) is a few
    # hundred lines, not one per claim, and well under a megabyte
    assert len(lines) < 1500, len(lines)
    assert len(raw) < 2_000_000, len(raw)
    assert not [x for x in lines if x.startswith(("INFO fake", "fake log"))]
    if fmt == "json":
        docs = _check_json(lines)
        start = next(d for d in docs if d["msg"].startswith("starting drakit "))
        assert start["version"] and start["settings"]["driver-name"] == DRIVER
        assert start["settings"]["v"] == 7 and start["settings"]["log-format"] == "json"
        failed = [d for d in docs if "default/bad1" in str(d.get("claim", ""))]
        assert failed, "no line names the failed claim"
        # no Python reprs (the claim path's own lines are its call sites' to shape)
        reprs = [d for d in docs if not d["caller"].startswith(CLAIM_PATH)
                 and ("'default'" in d["msg"] or "['" in d["msg"])]
        assert not reprs, reprs
    else:
        _check_text(lines)
        assert any('"starting drakit ' in x and "settings=" in x for x in lines)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_line_stays_bounded_and_well_formed_whatever_its_keys(fmt: str) -> None:
    """Keys nested, many and huge (a vendor plugin's extra=…): the line is cut down field by
    field, then its keys are left out, and never cut in the middle (JSON still parses)."""
    import logging

    from drakit.plugin.ops.logs import JSONFormatter, TextFormatter

    record = logging.LogRecord("vendor", logging.INFO, __file__, 1, "m\n%s", ("x" * 10**6,),
                               None)
    for i in range(100):
        setattr(record, f"k{i}", {f"j{j}": ["v\x1b" * 400] * 40 for j in range(40)})
    line = (JSONFormatter() if fmt == "json" else TextFormatter()).format(record)
    assert len(line) <= LINE_MAX and "\n" not in line and "\x1b" not in line
    if fmt == "json":
        doc = json.loads(line)
        assert doc["msg"].startswith("m\\n") and "truncated" in doc
    else:
        _check_text([line])
