"""ResourceAPI against the embedded API server in every resource.k8s.io version, plus the
error classification and retry helpers."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import urllib3
from kubernetes.client import ApiClient, ApiException, Configuration
from slices_helpers import DRIVER, NODE, SleepRecorder, wait_for

from drakit.plugin.api.resourceapi import (
    Backoff,
    ErrorKind,
    ResourceAPI,
    call_with_retries,
    classify,
    retry_after_seconds,
)
from drakit.plugin.testing.apiserver import AllocatedDevice, EmbeddedAPIServer

VERSIONS = [("v1",), ("v1beta2", "v1beta1"), ("v1beta1",)]
Factory = Callable[..., EmbeddedAPIServer]


@pytest.mark.parametrize("served", VERSIONS, ids=lambda v: v[0])
def test_version_detection_and_claim_round_trip(embedded_apiserver_factory: Factory,
                                                served: tuple[str, ...]) -> None:
    server = embedded_apiserver_factory(served)
    claim = server.create_claim("ns1", "claim-a", [
        AllocatedDevice(DRIVER, NODE, "dev-0", request="gpu"),
        AllocatedDevice("other.example.com", NODE, "nic-0", request="nic")])
    api = ResourceAPI(server.api_client())
    assert api.version == served[0]
    got = api.get_claim("ns1", "claim-a")
    assert got["apiVersion"] == "resource.k8s.io/v1"
    assert got["metadata"]["uid"] == claim["metadata"]["uid"]
    assert got["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
    results = got["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["dev-0", "nic-0"]

    entry = {"driver": DRIVER, "pool": NODE, "device": "dev-0",
             "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                             "lastTransitionTime": "2025-01-01T00:00:00Z"}],
             "networkData": {"interfaceName": "eth1", "ips": ["10.9.8.7/24"]}}
    assert api.apply_claim_status_devices("ns1", "claim-a", [entry], DRIVER) is True  # kept
    out = api.get_claim("ns1", "claim-a")
    assert out["status"]["devices"][0]["networkData"]["interfaceName"] == "eth1"
    other = {"driver": "other.example.com", "pool": NODE, "device": "nic-0"}
    api.apply_claim_status_devices("ns1", "claim-a", [other], "other.example.com")
    stored = server.get_object("resourceclaims", "claim-a", "ns1")
    assert stored is not None and len(stored["status"]["devices"]) == 2
    assert {r.content_type.split(";")[0] for r in server.requests(verb="patch")} == {
        "application/apply-patch+yaml"}

    assert api.remove_claim_status_devices("ns1", "claim-a", DRIVER) is True
    after = api.get_claim("ns1", "claim-a")
    assert [d["device"] for d in after["status"]["devices"]] == ["nic-0"]
    assert api.remove_claim_status_devices("ns1", "no-such-claim", DRIVER) is False
    with pytest.raises(ApiException) as err:
        api.get_claim("ns1", "no-such-claim")
    assert classify(err.value) is ErrorKind.NOT_FOUND


def test_slice_watch_close_unblocks(embedded_apiserver_factory: Factory) -> None:
    server = embedded_apiserver_factory(("v1beta1",))
    api = ResourceAPI(server.api_client())
    listed = api.list_slices(DRIVER, NODE)
    watch = api.watch_slices(DRIVER, NODE, listed.resource_version, timeout_seconds=60)
    events: list[str] = []

    def consume() -> None:
        for ev in watch:
            events.append(f"{ev.type}:{ev.object['spec']['devices'][0]['name']}")

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    api.create_slice({"metadata": {"name": "s1"}, "spec": {
        "driver": DRIVER, "nodeName": NODE, "pool": {"name": "p", "generation": 1,
                                                     "resourceSliceCount": 1},
        "devices": [{"name": "d0", "attributes": {"a": {"int": 1}}}]}})
    wait_for(lambda: events == ["ADDED:d0"], what="watch event in the v1 shape")
    watch.close()
    t.join(10)
    assert not t.is_alive()


def test_classification() -> None:
    assert classify(ApiException(status=429)) is ErrorKind.RETRYABLE
    assert classify(ApiException(status=503)) is ErrorKind.RETRYABLE
    assert classify(ApiException(status=409)) is ErrorKind.CONFLICT
    assert classify(ApiException(status=410)) is ErrorKind.EXPIRED
    assert classify(ApiException(status=422)) is ErrorKind.FATAL
    assert classify(ApiException(status=403)) is ErrorKind.FATAL
    assert classify(urllib3.exceptions.MaxRetryError(None, "/")) is ErrorKind.RETRYABLE
    assert classify(ConnectionRefusedError()) is ErrorKind.RETRYABLE
    assert classify(ValueError()) is ErrorKind.FATAL
    exc = ApiException(status=429)
    exc.headers = {"Retry-After": "7"}
    assert retry_after_seconds(exc) == 7.0
    assert retry_after_seconds(ApiException(status=500)) is None


def test_backoff_grows_with_jitter_and_cap() -> None:
    b = Backoff(initial=1, factor=2, max_delay=5, jitter=0.5)
    assert [b.delay(n, rng=lambda: 0.5) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    assert b.delay(1, rng=lambda: 0.0) == 0.5 and b.delay(1, rng=lambda: 1.0) == 1.5


def test_connection_errors_are_retried_and_bounded() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # closed again: nothing listens there
    config = Configuration(host=f"http://127.0.0.1:{port}")
    config.retries = False
    api = ResourceAPI(ApiClient(config), request_timeout=2)
    sleeps = SleepRecorder()
    with pytest.raises(Exception) as err:
        call_with_retries(lambda: api.list_slices(DRIVER, NODE), Backoff(attempts=3),
                          sleep=sleeps)
    assert classify(err.value) is ErrorKind.RETRYABLE
    assert len(sleeps.calls) == 2


def test_retry_after_is_capped() -> None:
    calls = []

    def fail_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            exc = ApiException(status=429)
            exc.headers = {"Retry-After": "3600"}
            raise exc
        return "ok"

    sleeps = SleepRecorder()
    assert call_with_retries(fail_once, Backoff(max_retry_after=30), sleep=sleeps) == "ok"
    assert sleeps.calls == [30]


def test_host_path_prefix_and_auth_reach_the_server() -> None:
    """An API server behind a path prefix (``https://proxy/k8s/clusters/x``) gets every
    request under that prefix, with the bearer token of the configuration."""
    with _recording_server() as (url, seen):
        api = _api(f"{url}/k8s/clusters/x/")
        api.get_claim("ns", "c")
        api.get_claim("ns", "c")
    assert [r.path for r in seen] == [
        "/k8s/clusters/x/apis/resource.k8s.io",
        "/k8s/clusters/x/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c",
        "/k8s/clusters/x/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c",
    ]
    assert {r.headers["authorization"] for r in seen} == {"Bearer t0k"}


# ---------------------------------------------------------------------------------------------
# what reaches the server: paths, queries, headers and auth


@dataclass
class _Seen:
    method: str
    path: str
    headers: dict[str, str]                 # names in lower case


@contextlib.contextmanager
def _recording_server() -> Iterator[tuple[str, list[_Seen]]]:
    """A plain HTTP server answering every request with a JSON object (the API group
    document for ``/apis/resource.k8s.io``); yields its URL and the requests it saw."""
    import json as _json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[_Seen] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen.append(_Seen(self.command, self.path, headers))
            group = self.path.split("?")[0].endswith("/apis/resource.k8s.io")
            body = _json.dumps({"versions": [{"version": "v1"}]} if group
                               else {"metadata": {"name": "c"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PATCH = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def _api(url: str, token: str = "t0k", **kwargs: Any) -> ResourceAPI:
    config = Configuration(host=url)
    config.api_key = {"BearerToken": token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    return ResourceAPI(ApiClient(config), request_timeout=5, **kwargs)


def _token_hook(tokens: list[str]) -> Callable[[Configuration], None]:
    """A refresh hook (as the kubeconfig loader sets for expiring tokens) that hands out
    ``tokens`` one per run, keeping the last; ``len(runs)`` counts the runs."""
    runs: list[str] = []

    def refresh(c: Configuration) -> None:
        runs.append(tokens[min(len(runs), len(tokens) - 1)])
        c.api_key = {"BearerToken": runs[-1]}

    refresh.runs = runs  # type: ignore[attr-defined]
    return refresh


def test_auth_refresh_hook_runs_at_most_once_per_reuse_period() -> None:
    """The configuration's refresh hook is not re-run on every request: within the reuse
    period every request carries the token of its one run."""
    with _recording_server() as (url, seen):
        api = _api(url, auth_reuse_seconds=3600)
        hook = _token_hook(["first", "second"])
        api.api_client.configuration.refresh_api_key_hook = hook
        for _ in range(3):
            api.get_claim("ns", "c")
        api.apply_claim_status_devices("ns", "c", [], DRIVER)
    assert len(hook.runs) == 1  # type: ignore[attr-defined]
    assert {s.headers["authorization"] for s in seen} == {"Bearer first"}


def test_refreshed_token_is_sent_once_the_reuse_period_is_over() -> None:
    """A token refreshed by the hook reaches the server with the first request after the
    reuse period, not before."""
    with _recording_server() as (url, seen):
        api = _api(url, auth_reuse_seconds=1.0)
        hook = _token_hook(["old", "new"])
        api.api_client.configuration.refresh_api_key_hook = hook
        api.get_claim("ns", "c")                          # discovery + GET: one hook run
        api.apply_claim_status_devices("ns", "c", [], DRIVER)
        time.sleep(1.05)
        api.get_claim("ns", "c")
        api.apply_claim_status_devices("ns", "c", [], DRIVER)
    sent = [(s.method, s.headers.get("authorization")) for s in seen]
    assert sent[:3] == [("GET", "Bearer old")] * 2 + [("PATCH", "Bearer old")]
    assert sent[3:] == [("GET", "Bearer new"), ("PATCH", "Bearer new")]


def test_without_reuse_every_request_asks_the_configuration() -> None:
    with _recording_server() as (url, seen):
        api = _api(url, auth_reuse_seconds=0)
        hook = _token_hook(["t1", "t2", "t3"])
        api.api_client.configuration.refresh_api_key_hook = hook
        api.get_claim("ns", "c")
        api.get_claim("ns", "c")
    assert [s.headers["authorization"] for s in seen] == ["Bearer t1", "Bearer t2", "Bearer t3"]


def test_each_field_manager_gets_its_own_apply_query() -> None:
    """Every apply carries its own field manager (encoded as ``urlencode`` does) and
    ``force=true``."""
    from urllib.parse import urlencode

    odd = "vendor.example.com/a b&c"
    with _recording_server() as (url, seen):
        api = _api(url)
        for manager in (DRIVER, "other.example.com", DRIVER, odd):
            api.apply_claim_status_devices("ns", "c", [], manager)
        api.remove_claim_status_devices("ns", "c", "other.example.com")
    queries = [s.path.split("?", 1)[1] for s in seen if s.method == "PATCH"]
    assert queries == [urlencode({"fieldManager": m, "force": "true"}) for m in (
        DRIVER, "other.example.com", DRIVER, odd, "other.example.com")]
    assert queries[0] == f"fieldManager={DRIVER}&force=true"


def test_changed_default_headers_and_cookie_are_sent() -> None:
    """Requests follow the ApiClient's default headers and cookie as they change, and the
    Content-Type of a body never leaks into a request without one."""
    with _recording_server() as (url, seen):
        api = _api(url)
        api.get_claim("ns", "c")
        api.apply_claim_status_devices("ns", "c", [], DRIVER)
        api.api_client.set_default_header("X-Trace", "1")
        api.api_client.cookie = "session=abc"
        api.get_claim("ns", "c")
        api.apply_claim_status_devices("ns", "c", [], DRIVER)
        api.api_client.cookie = None
        api.api_client.default_headers.pop("X-Trace")
        api.get_claim("ns", "c")
    heads = [s.headers for s in seen[1:]]
    assert [h.get("content-type") for h in heads] == [
        None, "application/apply-patch+yaml", None, "application/apply-patch+yaml", None]
    assert [(h.get("x-trace"), h.get("cookie")) for h in heads] == [
        (None, None), (None, None), ("1", "session=abc"), ("1", "session=abc"), (None, None)]
    assert {h.get("accept") for h in heads} == {"application/json"}
    assert {h.get("authorization") for h in heads} == {"Bearer t0k"}
    assert len({h.get("user-agent") for h in heads}) == 1


def test_auth_query_parameters_come_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Query parameters from the auth settings precede the request's own, as one
    ``urlencode`` of both would put them."""
    with _recording_server() as (url, seen):
        api = _api(url)
        client = api.api_client
        original = client.update_params_for_auth

        def with_query(headers: dict[str, str], queries: list[tuple[str, str]],
                       *args: object) -> None:
            original(headers, queries, *args)
            queries.append(("token", "x y"))

        monkeypatch.setattr(client, "update_params_for_auth", with_query)
        api.get_claim("ns", "c")
        api.apply_claim_status_devices("ns", "c", [], DRIVER)
        api.list_slices(DRIVER, NODE)
    assert [s.path for s in seen] == [
        "/apis/resource.k8s.io?token=x+y",
        "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c?token=x+y",
        f"/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status?token=x+y"
        f"&fieldManager={DRIVER}&force=true",
        f"/apis/resource.k8s.io/v1/resourceslices?token=x+y&fieldSelector=spec.driver%3D"
        f"{DRIVER}%2Cspec.nodeName%3D{NODE}&limit=500",
    ]


@pytest.mark.parametrize("segment", [
    "claim-a", "a.b_c~d-0", "", "a b", "a/b", "x%2Fy", "ünï", "name:1", "~", "."])
def test_path_segments_are_quoted_like_the_generated_client(segment: str) -> None:
    """Namespace and name reach the server percent-encoded as the generated client sends
    them (``quote(segment, safe="")``): a ``/`` in a name never adds a path segment."""
    from urllib.parse import quote

    with _recording_server() as (url, seen):
        _api(url).get_claim(segment, segment)
    assert seen[-1].path == (f"/apis/resource.k8s.io/v1/namespaces/{quote(segment, safe='')}"
                             f"/resourceclaims/{quote(segment, safe='')}")
