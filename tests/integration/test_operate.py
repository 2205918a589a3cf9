"""What an operator watches: /metrics, /healthz, /readyz and structured logs."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from drakit.plugin.ops.logs import JSONFormatter, V
from drakit.plugin.testing.harness import DriverHarness


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_and_probes(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(settings={"http_endpoint": "127.0.0.1:0"})
    port = h.app.http.port
    assert get(port, "/healthz") == (200, "ok\n")
    h.wait_for(lambda: get(port, "/readyz")[0] == 200, 10, "readiness")
    claim = h.allocate("c1", [("node-1", "gpu-0")])
    assert h.prepare(claim)[claim["metadata"]["uid"]].error == ""
    code, text = get(port, "/metrics")
    assert code == 200
    line = next(x for x in text.splitlines()
                if x.startswith('drakit_prepare_claims_total{driver="drakit.example.com",'
                                'result="success"}'))
    assert float(line.split()[-1]) >= 1
    assert 'drakit_registered{driver="drakit.example.com"} 1.0' in text
    assert "drakit_prepare_duration_seconds_bucket" in text
    assert get(port, "/nope")[0] == 404


def test_not_ready_when_checkpoint_is_corrupt(
    harness_factory: Callable[..., DriverHarness]
) -> None:
    h = harness_factory(settings={"http_endpoint": "127.0.0.1:0"})
    h.stop_plugin()
    h.checkpoint_path.write_text("{corrupt")
    h.start_plugin()
    code, body = get(h.app.http.port, "/readyz")
    assert code == 503 and "checkpoint" in body


def test_json_logs_carry_claim_context(harness: DriverHarness,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """A claim's line carries its keys: nothing at the default verbosity when it succeeded,
    V(2) with ``-v 2``; a failed claim (a device this node does not have) at WARNING, its
    error in ``err``."""
    claim = harness.allocate("c1", [("node-1", "gpu-0")])
    with caplog.at_level(logging.INFO, logger="drakit.plugin.claims.node"):
        assert harness.prepare(claim)[claim["metadata"]["uid"]].error == ""
    assert not caplog.records
    with caplog.at_level(V(2), logger="drakit.plugin.claims.node"):
        assert harness.unprepare(claim) == {claim["metadata"]["uid"]: ""}
    [record] = caplog.records
    doc = json.loads(JSONFormatter().format(record))
    assert doc["msg"] == "unprepared claim"
    assert doc["claimUID"] == claim["metadata"]["uid"]
    assert doc["claim"] == "default/c1"
    assert doc["v"] == 2 and "err" not in doc
    caplog.clear()
    unknown = harness.allocate("c2", [("node-1", "no-such-device")])
    with caplog.at_level(logging.INFO, logger="drakit.plugin.claims.node"):
        error = harness.prepare(unknown)[unknown["metadata"]["uid"]].error
    assert error
    [record] = caplog.records
    doc = json.loads(JSONFormatter().format(record))
    assert doc["msg"] == "prepare failed" and doc["err"] == error
    assert doc["v"] == 0 and doc["severity"] == "warning" and doc["claim"] == "default/c2"


def request(port: int, path: str, method: str = "GET",
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_metrics_negotiate_openmetrics_and_answer_head(
    harness_factory: Callable[..., DriverHarness]
) -> None:
    h = harness_factory(settings={"http_endpoint": "127.0.0.1:0"})
    port = h.app.http.port
    code, headers, body = request(port, "/metrics", headers={
        "Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
    assert code == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    code, headers, body = request(port, "/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert not body.endswith(b"# EOF\n")
    for path in ("/metrics", "/healthz", "/readyz"):
        code, headers, body = request(port, path, method="HEAD")
        assert code in (200, 503) and body == b"", path
        assert int(headers["Content-Length"]) > 0, path
    code, headers, _ = request(port, "/metrics", method="POST")
    assert code == 405 and "GET" in headers["Allow"]


def test_metrics_include_process_platform_and_build_info(
    harness_factory: Callable[..., DriverHarness]
) -> None:
    from importlib.metadata import version

    h = harness_factory(settings={"http_endpoint": "127.0.0.1:0"})
    code, text = get(h.app.http.port, "/metrics")
    assert code == 200
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
               if line and not line.startswith("#")}
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                 "process_open_fds", "python_info", "python_gc_collections_total",
                 "drakit_build_info"):
        assert name in samples, name
    assert f'version="{version("drakit")}"' in next(
        x for x in text.splitlines() if x.startswith("drakit_build_info{"))


def test_every_error_series_exists_at_zero_before_any_error() -> None:
    from drakit.plugin.ops.metrics import RESULTS, SLICE_VERBS, VALIDATION_DROPS, Metrics

    m = Metrics("gpu.example.com")
    value = m.registry.get_sample_value
    d = {"driver": "gpu.example.com"}
    for name in ("drakit_prepare_claims_total", "drakit_unprepare_claims_total",
                 "drakit_prepare_duration_seconds_count",
                 "drakit_unprepare_duration_seconds_count"):
        for result in RESULTS:
            assert value(name, {**d, "result": result}) == 0, (name, result)
    for verb in SLICE_VERBS:
        assert value("drakit_resourceslice_writes_total", {**d, "verb": verb}) == 0
    for what in VALIDATION_DROPS:
        assert value("drakit_validation_drops_total", {**d, "what": what}) == 0
    for name in ("drakit_publish_errors_total", "drakit_checkpoint_errors_total",
                 "drakit_device_status_invalid_total", "drakit_device_status_errors_total",
                 "drakit_discovery_errors_total"):
        assert value(name, d) == 0, name
    m.claim_prepared(False, 0.2)
    assert value("drakit_prepare_claims_total", {**d, "result": "error"}) == 1
    assert value("drakit_prepare_duration_seconds_bucket",
                 {**d, "result": "error", "le": "0.25"}) == 1


def test_validation_drops_are_counted_by_what_was_left_out() -> None:
    from typing import get_args

    from drakit.plugin.ops.metrics import VALIDATION_DROPS, Metrics, drop_kind
    from drakit.plugin.slices.validate import Action

    assert sorted(drop_kind(a) for a in get_args(Action)) == sorted(VALIDATION_DROPS)
    m = Metrics("gpu.example.com")
    m.validation_drop(drop_kind("attribute dropped"))
    assert m.registry.get_sample_value(
        "drakit_validation_drops_total", {"driver": "gpu.example.com", "what": "attribute"}) == 1
    with pytest.raises(ValueError, match="nosuch"):
        m.validation_drop("nosuch")
    with pytest.raises(ValueError, match="unknown validation action"):
        drop_kind("device renamed")


def test_json_logs_keep_extra_fields_and_non_ascii() -> None:
    record = logging.LogRecord("vendor.gpu", logging.WARNING, __file__, 1,
                               "Gerät %s überhitzt", ("gpu-0",), None)
    record.serial = "ÄB-1234"
    record.temperature_c = 91.5
    record.claim_uid = "0b5e-uid"
    line = JSONFormatter().format(record)
    assert "Gerät gpu-0 überhitzt" in line and "\\u" not in line  # UTF-8, not escaped
    doc = json.loads(line)
    assert doc["msg"] == "Gerät gpu-0 überhitzt"
    assert doc["serial"] == "ÄB-1234" and doc["temperature_c"] == 91.5
    assert doc["claimUID"] == "0b5e-uid"
    assert doc["severity"] == "warning" and doc["logger"] == "vendor.gpu"
    assert isinstance(doc["ts"], float) and doc["caller"].endswith("test_operate.py:1")
    assert list(doc)[:6] == ["ts", "v", "severity", "caller", "logger", "msg"]


def test_json_logs_carry_the_traceback() -> None:
    import sys

    try:
        raise RuntimeError("sensor bus gone")
    except RuntimeError:
        record = logging.LogRecord("drakit.plugin.ops.app", logging.ERROR, __file__, 1, "failed",
                                   (), sys.exc_info())
    doc = json.loads(JSONFormatter().format(record))
    assert doc["msg"] == "failed"
    assert doc["err"] == "RuntimeError: sensor bus gone" and "v" not in doc
    assert "RuntimeError: sensor bus gone" in doc["stacktrace"]
