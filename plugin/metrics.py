"""Prometheus metrics of one node agent (prometheus-client, own registry: no global state).

Names are prefixed ``drakit_``; every series carries the ``driver`` label.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    """All metrics; ``render()`` gives the text exposition format."""

    def __init__(self, driver: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, lbl = self.registry, ["driver"]
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
            "drakit_prepare_seconds",
            "NodePrepareResources latency per claim",
            [*lbl, "result"],
            buckets=_BUCKETS,
            registry=r,
        )
        self._unprepare_latency = Histogram(
            "drakit_unprepare_seconds",
            "NodeUnprepareResources latency per claim",
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
            "Devices or attributes left out for breaking an API rule",
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
        self._discovery_errors = Counter(
            "drakit_discovery_errors",
            "Failed discover() calls of discovery plugins",
            lbl,
            registry=r,
        )
        self.driver = driver
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
        self._validation_drops.labels(self.driver, what).inc()

    def slice_write(self, verb: str) -> None:
        self._slice_writes.labels(self.driver, verb).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
