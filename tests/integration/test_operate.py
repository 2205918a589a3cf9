"""What an operator watches: /metrics, /healthz, /readyz and structured logs."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from plugin.logs import JSONFormatter
from plugin.testing.harness import DriverHarness


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
    assert "drakit_prepare_seconds_bucket" in text
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
    claim = harness.allocate("c1", [("node-1", "gpu-0")])
    with caplog.at_level(logging.INFO, logger="plugin.node"):
        assert harness.prepare(claim)[claim["metadata"]["uid"]].error == ""
    record = next(r for r in caplog.records if "prepared claim" in r.getMessage())
    doc = json.loads(JSONFormatter().format(record))
    assert doc["claim_uid"] == claim["metadata"]["uid"]
    assert doc["claim"] == "default/c1"
    assert doc["level"] == "info"
