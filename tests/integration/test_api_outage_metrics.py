"""An API server outage shows in /metrics (and not in /readyz, which tells the kubelet the
agent serves it): requests without an answer are counted, the watch restarts are counted,
``drakit_api_unreachable_seconds`` grows, the last-success and last-publish timestamps stay
where they were (the last success before the stop)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from drakit.plugin.testing.harness import DriverHarness


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "driver"))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return sum(v for (n, lbl), v in samples.items()
               if n == name and set(labels.items()) <= set(lbl))


def readyz(port: int) -> int:
    """The /readyz status code; a 503 (not ready yet, e.g. before the first publish) is an
    answer to wait on, not an error (urlopen raises HTTPError for it)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_metrics_move_when_the_api_server_stops(
        harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(settings={"http_endpoint": "127.0.0.1:0"})
    port = h.app.http.port
    h.wait_for(lambda: readyz(port) == 200, 20, "readiness")
    claim = h.allocate("c1", [("node-1", "gpu-0")])
    assert h.prepare(claim)[claim["metadata"]["uid"]].error == ""
    before = scrape(port)
    assert not [n for n, _ in before if n.endswith("_created")]
    assert total(before, "drakit_api_requests_total", verb="get", resource="resourceclaims",
                 code="200") >= 1
    assert total(before, "drakit_api_requests_total", verb="list", resource="resourceslices",
                 code="200") >= 1
    assert value(before, "drakit_api_unreachable_seconds") == 0
    published = value(before, "drakit_last_publish_success_timestamp_seconds")
    last_ok = value(before, "drakit_api_last_success_timestamp_seconds")
    assert published > 0 and last_ok >= published
    assert total(before, "drakit_api_requests_total", code="error") == 0

    h.apiserver.stop()
    stopped = time.time()
    # an answer the server sent while stopping may be read just after: let it land
    time.sleep(0.5)
    settled = value(scrape(port), "drakit_api_last_success_timestamp_seconds")
    assert settled <= stopped + 0.5

    def moved() -> bool:
        now = scrape(port)
        return (value(now, "drakit_api_watch_restarts_total", reason="error") >= 1
                and total(now, "drakit_api_requests_total", code="error") >= 1
                and value(now, "drakit_api_unreachable_seconds") > 1)

    h.wait_for(moved, 60, "the outage in the metrics", interval=0.5)
    after = scrape(port)
    # no answer since the stop (a publish may still complete from the watched view)
    assert value(after, "drakit_api_last_success_timestamp_seconds") == settled
    assert value(after, "drakit_last_publish_success_timestamp_seconds") >= published
    # /readyz answers for the kubelet: the agent still serves prepare/unprepare of
    # prepared claims from its checkpoint, so it stays ready through the outage
    assert readyz(port) == 200
