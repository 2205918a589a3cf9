"""A real kube-apiserver 1.37 overloaded or slow: the throttling and slow-answer faults, injected
by :class:`drakit.plugin.testing.faultproxy.FaultProxy` between the node agent (deploy/'s
ServiceAccount, node-bound token, over TLS) and the real server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from drakit.plugin.testing.faultproxy import Fault, FaultProxy
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.real.controlplane import RealAPIServer

pytestmark = pytest.mark.slow
CLAIM_GET = r"/resourceclaims/[^/]+$"


@pytest.fixture
def proxied(real: RealAPIServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """A FaultProxy in front of the real server; agents started meanwhile talk through it
    (with their own token)."""
    with FaultProxy(real.url, ca_file=str(real.ca_file)) as proxy:
        monkeypatch.setattr(real, "api_client",
                            lambda token=None: proxy.api_client(token or real.admin_token))
        yield proxy


def _uid(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])


def test_throttled_claim_read_answers_in_time_on_a_real_server(
    proxied: FaultProxy, node_name: str, real_harness_factory: Callable[..., DriverHarness],
) -> None:
    h = real_harness_factory(node_name)
    claim = h.allocate("throttled", [h.devices()[0]])
    proxied.add(Fault(method="GET", path=CLAIM_GET, status=429, retry_after=100000))
    started = time.monotonic()
    err = h.prepare(claim, timeout=6)[_uid(claim)].error
    took = time.monotonic() - started
    assert "429" in err, err
    assert took < 6
    proxied.clear()
    assert h.prepare(claim, timeout=10)[_uid(claim)].error == ""
    print(f"\nhostile figure (real): throttled claim answered in {took:.2f}s")


def test_slow_real_server_answers_by_the_deadline_and_the_retry_prepares(
    proxied: FaultProxy, node_name: str, real_harness_factory: Callable[..., DriverHarness],
) -> None:
    h = real_harness_factory(node_name)
    claims = [h.allocate(f"slow-{i}", [d]) for i, d in enumerate(h.devices()[:3])]
    proxied.add(Fault(method="GET", path=CLAIM_GET, delay=30))
    started = time.monotonic()
    res = h.prepare(*claims, timeout=6)
    took = time.monotonic() - started
    assert all(res[_uid(c)].error for c in claims), res
    assert took < 6
    proxied.clear()
    res = h.prepare(*claims, timeout=10)
    assert {u: r.error for u, r in res.items()} == {_uid(c): "" for c in claims}
    print(f"\nhostile figure (real): three slow claims answered in {took:.2f}s")
