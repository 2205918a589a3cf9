"""Prometheus metrics of one node agent (prometheus-client, own registry: no global state).

drakit's own metrics are named ``drakit_*`` and carry the ``driver`` label; durations are
histograms named ``…_duration_seconds`` and counters end in ``_total`` (Prometheus naming
conventions). The registry also holds prometheus-client's process collector
(``process_resident_memory_bytes``, ``process_cpu_seconds_total``, ``process_open_fds``…),
platform collector (``python_info``) and garbage-collector collector (``python_gc_*``), and
``drakit_build_info`` (version, Python version; value 1).

Every series with a known, closed label set exists from the start at zero (prepare and
unprepare results ``success``/``error``, ResourceSlice write verbs, validation drop kinds,
each error counter), so ``rate(…{result="error"}[5m])`` and ``increase(…) > 0`` alerts work
before the first error happens. No ``*_created`` series are written
(``prometheus_client.disable_created_metrics``: they would be exposed as gauges by the text
format and double the series count).

The API server as the agent sees it: ``drakit_api_requests_total{verb, resource, code}``
(every request; ``code`` is the HTTP status, ``error`` when no answer came), ``drakit_api_
unreachable_seconds`` (how long every request has failed, 0 while they succeed: the signal for
"cannot reach the API server for N s"), ``drakit_api_last_success_timestamp_seconds``,
``drakit_api_watch_restarts_total{reason}`` and ``drakit_last_publish_success_timestamp_
seconds``. ``/readyz`` does not follow the API server (see :mod:`drakit.plugin.ops.http`).
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from drakit.plugin.background import WORKS
from drakit.plugin.events import Events, Severity

disable_created_metrics()

if TYPE_CHECKING:
    from drakit.plugin.slices.validate import ValidationIssue

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

RESULTS = ("success", "error")
"""``result`` label values of the prepare/unprepare counters and histograms."""

SLICE_VERBS = ("create", "update", "delete")
"""``verb`` label values of ``drakit_resourceslice_writes_total``."""

VALIDATION_DROPS = ("device", "attribute", "counter_set", "pool", "field")
"""``what`` label values of ``drakit_validation_drops_total``: what the publisher left out
(a device, an attribute, a counter set, a whole pool, a slice field such as
``spec.partitionTypeAttribute``); a device with a bad capacity is left out whole."""

_DROP_BY_ACTION = {
    "device dropped": "device",
    "attribute dropped": "attribute",
    "counter set dropped": "counter_set",
    "pool skipped": "pool",
    "field dropped": "field",
}


def drakit_version() -> str:
    """drakit's installed version ("unknown" when run from a source tree not installed)."""
    try:
        return version("drakit")
    except PackageNotFoundError:
        return "unknown"


def drop_kind(action: str) -> str:
    """The ``what`` label for a :class:`drakit.plugin.slices.validate.ValidationIssue` action
    (``"device dropped"`` → ``"device"``); ValueError for an action not in the list."""
    try:
        return _DROP_BY_ACTION[action]
    except KeyError:
        raise ValueError(f"unknown validation action {action!r}") from None


WATCH_RESTART_REASONS = ("expired", "error")
"""``reason`` label values of ``drakit_api_watch_restarts_total``."""

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "WATCH": "watch"}


def api_verb_and_resource(method: str, path: str) -> tuple[str, str]:
    """The Kubernetes verb and resource of a request: ``("get", "resourceclaims/status")``
    for ``GET /apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status``; ``list`` for
    a collection GET, ``watch`` for a watch (method ``WATCH``), ``discovery`` as the resource
    of ``/api``, ``/apis/<group>[/<version>]``."""
    segs = [p for p in path.split("?", 1)[0].split("/") if p]
    if segs[:1] == ["api"]:
        rest = segs[2:]
    elif segs[:1] == ["apis"]:
        rest = segs[3:]
    else:
        rest = []
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return method.lower(), "discovery"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    if method == "GET":
        verb = "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return verb, resource


class APIReachability:
    """When the API server last answered, and since when every request has failed (no
    answer, or a 5xx). Thread-safe; ``clock`` is wall time (``time.time``)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.last_success: float | None = None
        self.failing_since: float | None = None

    def record(self, answer: str) -> None:
        ok = answer != "error" and not answer.startswith("5")
        now = self._clock()
        with self._lock:
            if ok:
                self.last_success, self.failing_since = now, None
            elif self.failing_since is None:
                self.failing_since = now

    def unreachable_seconds(self) -> float:
        with self._lock:
            since = self.failing_since
        return 0.0 if since is None else max(0.0, self._clock() - since)


class _CounterFunction(Collector):
    """A counter whose values a function reports (``{label value: count}``)."""

    def __init__(self, name: str, doc: str, driver: str, label: str,
                 values: Callable[[], dict[str, int]], known: tuple[str, ...]) -> None:
        self.name, self.doc, self.driver, self.label = name, doc, driver, label
        self.values, self.known = values, known

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.doc, labels=["driver", self.label])
        values = {k: 0 for k in self.known} | self.values()
        for key, count in sorted(values.items()):
            family.add_metric([self.driver, key], count)
        yield family


class Metrics:
    """All metrics; ``render()`` gives the text exposition format, ``registry`` is what the
    HTTP endpoint serves (see :mod:`drakit.plugin.ops.http`)."""

    def __init__(self, driver: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, lbl = self.registry, ["driver"]
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        Info("drakit_build", "drakit version and the Python it runs on", lbl, registry=r).labels(
            driver
        ).info({"version": drakit_version(), "python_version": platform.python_version()})
        self._prepare = Counter(
            "drakit_prepare_claims",
            "Claims answered by NodePrepareResources, by result",
            [*lbl, "result"],
            registry=r,
        )
        self._unprepare = Counter(
            "drakit_unprepare_claims",
            "Claims answered by NodeUnprepareResources, by result",
            [*lbl, "result"],
            registry=r,
        )
        self._prepare_latency = Histogram(
            "drakit_prepare_duration_seconds",
            "NodePrepareResources time per claim, in seconds",
            [*lbl, "result"],
            buckets=_BUCKETS,
            registry=r,
        )
        self._unprepare_latency = Histogram(
            "drakit_unprepare_duration_seconds",
            "NodeUnprepareResources time per claim, in seconds",
            [*lbl, "result"],
            buckets=_BUCKETS,
            registry=r,
        )
        self._claims_prepared = Gauge(
            "drakit_claims_prepared", "Claims currently prepared (checkpoint)", lbl, registry=r
        )
        self._devices = Gauge("drakit_devices", "Devices in the inventory", lbl, registry=r)
        self._devices_published = Gauge(
            "drakit_devices_published", "Devices in published ResourceSlices", lbl, registry=r
        )
        self._slice_writes = Counter(
            "drakit_resourceslice_writes",
            "ResourceSlice create/update/delete calls",
            [*lbl, "verb"],
            registry=r,
        )
        self._publish_errors = Counter(
            "drakit_publish_errors", "Failed ResourceSlice publish attempts", lbl, registry=r
        )
        self._validation_drops = Counter(
            "drakit_validation_drops",
            "Devices, attributes, counter sets or pools left out for breaking an API rule",
            [*lbl, "what"],
            registry=r,
        )
        self._registered = Gauge(
            "drakit_registered", "1 when the kubelet accepted the registration", lbl, registry=r
        )
        self._checkpoint_errors = Counter(
            "drakit_checkpoint_errors", "Checkpoint read/write failures", lbl, registry=r
        )
        self._status_invalid = Counter(
            "drakit_device_status_invalid",
            "AllocatedDeviceStatus entries left out as invalid",
            lbl,
            registry=r,
        )
        self._status_errors = Counter(
            "drakit_device_status_errors",
            "AllocatedDeviceStatus writes that failed",
            lbl,
            registry=r,
        )
        self._status_behind = Gauge(
            "drakit_device_status_behind",
            "Prepared or unprepared claims whose AllocatedDeviceStatus is not applied yet",
            lbl,
            registry=r,
        )
        self._background_errors = Counter(
            "drakit_background_errors",
            "Failed rounds of background work (publish, status, health-refresh, orphan-sweep, "
            "rescan, hot-plug, the watches), by work and severity (fatal: the agent stopped)",
            [*lbl, "work", "severity"],
            registry=r,
        )
        self._discovery_errors = Counter(
            "drakit_discovery_errors",
            "Failed discover() calls of discovery plugins",
            lbl,
            registry=r,
        )
        self._api_requests = Counter(
            "drakit_api_requests",
            "Requests to the API server, by Kubernetes verb, resource and HTTP status "
            "(code \"error\": no answer)",
            [*lbl, "verb", "resource", "code"],
            registry=r,
        )
        self.api = APIReachability()
        Gauge("drakit_api_unreachable_seconds",
              "Seconds since every request to the API server has failed (no answer or 5xx); "
              "0 while requests succeed", lbl, registry=r).labels(driver).set_function(
            self.api.unreachable_seconds)
        Gauge("drakit_api_last_success_timestamp_seconds",
              "Unix time of the last request the API server answered (0: none yet)", lbl,
              registry=r).labels(driver).set_function(lambda: self.api.last_success or 0.0)
        self.last_publish = Gauge(
            "drakit_last_publish_success_timestamp_seconds",
            "Unix time of the last successful ResourceSlice publish (0: none yet)", lbl,
            registry=r).labels(driver)
        self._watch_restarts: Callable[[], dict[str, int]] = dict
        r.register(_CounterFunction(
            "drakit_api_watch_restarts",
            "ResourceSlice watches that broke or failed to open, by reason (expired: 410 and "
            "a re-list; error: connection lost, server restarting, refused)",
            driver, "reason", lambda: self._watch_restarts(), WATCH_RESTART_REASONS))
        self.driver = driver
        for result in RESULTS:  # every series at zero from the start
            for metric in (self._prepare, self._unprepare, self._prepare_latency,
                           self._unprepare_latency):
                metric.labels(driver, result)
        for verb in SLICE_VERBS:
            self._slice_writes.labels(driver, verb)
        for work in WORKS:
            for severity in Severity:
                self._background_errors.labels(driver, work, severity.value)
        for what in VALIDATION_DROPS:
            self._validation_drops.labels(driver, what)
        self.discovery_errors = self._discovery_errors.labels(driver)
        self.devices = self._devices.labels(driver)
        self.devices_published = self._devices_published.labels(driver)
        self.claims_prepared = self._claims_prepared.labels(driver)
        self.publish_errors = self._publish_errors.labels(driver)
        self.registered = self._registered.labels(driver)
        self.checkpoint_errors = self._checkpoint_errors.labels(driver)
        self.status_invalid = self._status_invalid.labels(driver)
        self.status_errors = self._status_errors.labels(driver)
        self.status_behind = self._status_behind.labels(driver)

    # NodeLogic observer
    def claim_prepared(self, ok: bool, seconds: float) -> None:
        result = "success" if ok else "error"
        self._prepare.labels(self.driver, result).inc()
        self._prepare_latency.labels(self.driver, result).observe(seconds)

    def claim_unprepared(self, ok: bool, seconds: float) -> None:
        result = "success" if ok else "error"
        self._unprepare.labels(self.driver, result).inc()
        self._unprepare_latency.labels(self.driver, result).observe(seconds)

    # publisher hooks
    def validation_drop(self, what: str = "device") -> None:
        """Count one left-out item; ``what`` is one of :data:`VALIDATION_DROPS`."""
        if what not in VALIDATION_DROPS:
            raise ValueError(f"validation drop kind {what!r} is not one of {VALIDATION_DROPS}")
        self._validation_drops.labels(self.driver, what).inc()

    def background_error(self, work: str, severity: str) -> None:
        """Count one failed round of background work ``work`` (``severity``: error, fatal)."""
        self._background_errors.labels(self.driver, work, severity).inc()

    def slice_write(self, verb: str) -> None:
        self._slice_writes.labels(self.driver, verb).inc()

    def api_request(self, method: str, path: str, answer: str) -> None:
        """Count one API request (the :class:`drakit.plugin.api.kubehttp.Transport` observer)."""
        verb, resource = api_verb_and_resource(method, path)
        self._api_requests.labels(self.driver, verb, resource, answer).inc()
        self.api.record(answer)

    def watch_restarts_from(self, values: Callable[[], dict[str, int]]) -> None:
        """Where ``drakit_api_watch_restarts_total`` reads its counts (reason → count)."""
        self._watch_restarts = values

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricEvents(Events):
    """The agent's :class:`drakit.plugin.events.Events`: each event counted in ``metrics``."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def claim_prepared(self, ok: bool, seconds: float) -> None:
        self.metrics.claim_prepared(ok, seconds)

    def claim_unprepared(self, ok: bool, seconds: float) -> None:
        self.metrics.claim_unprepared(ok, seconds)

    def checkpoint_error(self, message: str) -> None:
        self.metrics.checkpoint_errors.inc()

    def status_invalid(self, reason: str) -> None:
        self.metrics.status_invalid.inc()

    def status_error(self, reason: str) -> None:
        self.metrics.status_errors.inc()

    def slice_validation_issue(self, issue: ValidationIssue) -> None:
        self.metrics.validation_drop(drop_kind(issue.action))

    def slice_write(self, verb: str, pool: str) -> None:
        self.metrics.slice_write(verb)

    def publish_error(self, error: BaseException) -> None:
        self.metrics.publish_errors.inc()

    def background_error(self, work: str, error: BaseException, severity: Severity) -> None:
        self.metrics.background_error(work, severity.value)
