"""A fake kubelet: the plugin-manager and DRA-manager side of the protocol, for tests.

It behaves like the real kubelet where a DRA driver can tell (shared/reference/
kubelet-wire-protocol.md §1.6, §1.4, §2.3, §3.3):

- Watches the registrar directory (recursively, by polling plus an initial scan); files whose
  name starts with ``.`` and non-sockets are ignored. A new socket file (or a re-created one)
  is dialled (10 s), asked ``GetInfo`` (1 s deadline), validated, and told the verdict with
  ``NotifyRegistrationStatus`` (5 s). A failed dial or GetInfo is retried with backoff
  (0.5 s doubling, capped). A removed socket deregisters that instance.
- ``type`` must be ``DRAPlugin``. The node-API version is chosen like kubelet 1.34+ (walk the
  plugin's ``supported_versions`` in order, take the first of ``v1.DRAPlugin`` /
  ``v1beta1.DRAPlugin``) or 1.32/1.33 (``v1beta1.DRAPlugin`` if listed). A 1.32/1.33 kubelet
  would fall back to v1alpha4 for a plugin that lists neither; the fake does not speak
  v1alpha4 and rejects such a plugin instead, naming the reason.
- Several instances per driver; calls go to the most recently registered one; a duplicate
  endpoint is rejected.
- Prepare / unprepare use a 45 s deadline and check the answer like the kubelet: an entry for
  every requested claim and none for an unknown UID (:class:`KubeletCheckError` otherwise);
  a gRPC error becomes :class:`KubeletCallError`. Per-claim ``error`` strings are returned.
- The health stream prefers ``v1.DRAResourceHealth`` when advertised, else ``v1alpha1``.

Not simulated: the kubelet's checkpoint, pod admission, ResourceSlice wiping (tests do that
through the API server), connection monitoring.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import grpc

from drakit.discovery.plugin import ClaimRef
from drakit.plugin._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from drakit.plugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from drakit.plugin.kubelet.protocol import (
    DRA_MODULES,
    DRA_PLUGIN_TYPE,
    DRA_V1,
    DRA_V1BETA1,
    HEALTH_MODULES,
    HEALTH_V1,
    HEALTH_V1ALPHA1,
)

log = logging.getLogger(__name__)

#: Per-call deadline of NodePrepareResources / NodeUnprepareResources (kubelet default).
CALL_TIMEOUT = 45.0
#: Deadline of GetInfo during registration.
GET_INFO_TIMEOUT = 1.0
#: Deadline of NotifyRegistrationStatus.
NOTIFY_TIMEOUT = 5.0
#: Blocking dial timeout for the registration socket.
DIAL_TIMEOUT = 10.0

ClaimLike = ClaimRef | tuple[str, str, str]


class KubeletCheckError(Exception):
    """The plugin's answer broke a rule the kubelet checks (missing or unknown claim UID)."""


class KubeletCallError(Exception):
    """The RPC itself failed (gRPC status other than OK); ``code`` holds the status code."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class RegisteredPlugin:
    """One registered plugin instance as the fake kubelet knows it.

    ``dra_version`` is the chosen registration string (``v1.DRAPlugin`` /
    ``v1beta1.DRAPlugin``); ``health_versions`` the advertised health strings in order.
    """

    driver_name: str
    endpoint: str
    registration_socket: str
    dra_version: str
    health_versions: tuple[str, ...]
    supported_versions: tuple[str, ...]
    registered_at: float


@dataclass(frozen=True)
class Rejection:
    """A registration the fake kubelet refused, with the reason it sent to the plugin."""

    registration_socket: str
    driver_name: str
    reason: str
    at: float


@dataclass(frozen=True)
class PreparedDeviceResult:
    """One ``Device`` of a prepare answer; ``share_id`` is None when absent (always for v1beta1)."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class ClaimPrepareResult:
    """The answer for one claim: devices, or a non-empty ``error``."""

    devices: tuple[PreparedDeviceResult, ...] = ()
    error: str = ""

    @property
    def cdi_device_ids(self) -> list[str]:
        return [i for d in self.devices for i in d.cdi_device_ids]


@dataclass(frozen=True)
class DeviceHealthReport:
    """One device of a health message; ``health`` is ``Healthy`` / ``Unhealthy`` / ``Unknown``."""

    pool_name: str
    device_name: str
    health: str
    last_updated_time: int
    health_check_timeout_seconds: int
    message: str


_HEALTH_NAMES = {"HEALTHY": "Healthy", "UNHEALTHY": "Unhealthy", "UNKNOWN": "Unknown"}


def parse_kubelet_version(version: str) -> tuple[int, int]:
    """``"1.34"`` / ``"v1.33.2"`` → (1, 34). Raises ValueError."""
    parts = version.strip().lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"kubelet version {version!r}: expected MAJOR.MINOR") from None


def choose_dra_version(kubelet_version: str, supported_versions: Sequence[str]) -> str:
    """The node-API registration string a kubelet of ``kubelet_version`` would use.

    Raises ValueError with a kubelet-like reason when it would not (or, for the v1alpha4
    fallback of 1.32/1.33, could not in this fake) register the plugin.
    """
    major, minor = parse_kubelet_version(kubelet_version)
    if not supported_versions:
        raise ValueError("empty list of supported versions")
    if (major, minor) >= (1, 34):
        for entry in supported_versions:
            if entry in (DRA_V1, DRA_V1BETA1):
                return entry
        raise ValueError(
            f"none of the versions {list(supported_versions)} are supported by the kubelet,"
            f" which supports {[DRA_V1, DRA_V1BETA1]}"
        )
    if (major, minor) in ((1, 32), (1, 33)):
        if DRA_V1BETA1 in supported_versions:
            return DRA_V1BETA1
        raise ValueError(
            f"kubelet {major}.{minor} would use the v1alpha4 API (v1alpha3.Node) for"
            f" {list(supported_versions)}; the fake kubelet does not implement it"
        )
    raise ValueError(f"kubelet {kubelet_version} has no DRA v1/v1beta1 support")


def _claim_tuple(claim: ClaimLike) -> tuple[str, str, str]:
    if isinstance(claim, ClaimRef):
        return claim.namespace, claim.name, claim.uid
    namespace, name, uid = claim
    return namespace, name, uid


class HealthWatch:
    """A consumer of one ``NodeWatchResources`` stream, on its own thread.

    ``next(timeout)`` returns the next message (a list of :class:`DeviceHealthReport`),
    ``latest`` the last one, ``received`` the count. ``done`` is set when the stream ended;
    ``error`` then holds the gRPC error (None for a clean end or a cancel).
    """

    def __init__(self, channel: grpc.Channel, version: str, driver_name: str) -> None:
        self.version = version
        self.driver_name = driver_name
        pb2, grpc_mod = HEALTH_MODULES[version]
        self._pb2 = pb2
        self._queue: queue.Queue[list[DeviceHealthReport]] = queue.Queue()
        self._lock = threading.Lock()
        self._latest: list[DeviceHealthReport] | None = None
        self.received = 0
        self.error: grpc.RpcError | None = None
        self.cancelled = False
        self.done = threading.Event()
        self._call = grpc_mod.DRAResourceHealthStub(channel).NodeWatchResources(
            pb2.NodeWatchResourcesRequest()
        )
        self._thread = threading.Thread(target=self._run, name=f"fake-kubelet-health-{version}",
                                         daemon=True)
        self._thread.start()

    def _convert(self, response: Any) -> list[DeviceHealthReport]:
        return [
            DeviceHealthReport(
                pool_name=d.device.pool_name,
                device_name=d.device.device_name,
                health=_HEALTH_NAMES.get(self._pb2.HealthStatus.Name(d.health), "Unknown"),
                last_updated_time=d.last_updated_time,
                health_check_timeout_seconds=d.health_check_timeout_seconds,
                message=d.message,
            )
            for d in response.devices
        ]

    def _run(self) -> None:
        try:
            for response in self._call:
                reports = self._convert(response)
                with self._lock:
                    self._latest = reports
                    self.received += 1
                self._queue.put(reports)
        except grpc.RpcError as exc:
            if not (self.cancelled and exc.code() == grpc.StatusCode.CANCELLED):
                self.error = exc
                log.info("health stream of %s ended: %s", self.driver_name, exc.code())
        finally:
            self.done.set()

    def next(self, timeout: float = 10.0) -> list[DeviceHealthReport]:
        """The next message; raises TimeoutError after ``timeout`` seconds."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(
                f"no health message from {self.driver_name} within {timeout}s"
                f" (stream done={self.done.is_set()}, error={self.error})"
            ) from None

    @property
    def latest(self) -> list[DeviceHealthReport] | None:
        with self._lock:
            return self._latest

    def cancel(self) -> None:
        """Cancel the stream (as the kubelet does on deregistration) and wait for the thread."""
        self.cancelled = True
        self._call.cancel()
        self._thread.join(timeout=5)


@dataclass
class _Instance:
    plugin: RegisteredPlugin
    channel: grpc.Channel
    identity: tuple[int, int, int]
    watches: list[HealthWatch] = field(default_factory=list)


class FakeKubelet:
    """The registration and DRA-client side of a kubelet, over real unix sockets.

    Args:
        registrar_dir: the directory to watch (the plugin's ``registrar_dir``).
        kubelet_version: ``"1.34"`` (default), ``"1.33"``, ``"1.37"``…; decides the version
            choice (see :func:`choose_dra_version`).
        reject_reason: when set, every registration is refused with this reason (the kubelet
            answering ``plugin_registered=false``); change it at runtime with
            :meth:`set_reject_reason`.
        poll_interval: seconds between scans of the registrar directory.
        dial_timeout: blocking dial timeout for registration sockets.

    Thread-safe. Use as a context manager or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        registrar_dir: Path | str,
        kubelet_version: str = "1.34",
        *,
        reject_reason: str | None = None,
        poll_interval: float = 0.1,
        dial_timeout: float = DIAL_TIMEOUT,
    ) -> None:
        parse_kubelet_version(kubelet_version)
        self.registrar_dir = Path(os.path.abspath(registrar_dir))
        self.kubelet_version = kubelet_version
        self._reject_reason = reject_reason
        self._poll = poll_interval
        self._dial_timeout = dial_timeout
        self._cond = threading.Condition(threading.RLock())
        self._instances: dict[str, _Instance] = {}  # registration socket → instance
        self._order: list[str] = []  # registration sockets in registration order
        self._seen: dict[str, tuple[int, int, int]] = {}  # socket → identity handled
        self._busy: set[str] = set()  # sockets with a registration attempt running
        self._retry: dict[str, tuple[float, float]] = {}  # socket → (next try, delay)
        self._registrations: dict[str, int] = {}  # driver → successful registrations
        self.rejections: list[Rejection] = []
        self.restarts = 0
        self.scans = 0  #: completed scans of the registrar directory
        self._epoch = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        """Create the registrar directory if needed and start watching it."""
        self.registrar_dir.mkdir(parents=True, exist_ok=True)
        if self._thread is not None:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="fake-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching, cancel health streams and close every connection."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)
        with self._cond:
            for sock in list(self._instances):
                self._drop_instance(sock)
            self._cond.notify_all()

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def set_reject_reason(self, reason: str | None) -> None:
        """Refuse future registrations with ``reason`` (None: accept again)."""
        with self._cond:
            self._reject_reason = reason

    def simulate_restart(self, wipe_sockets: bool = True) -> None:
        """Act like a kubelet restart: forget every plugin (closing connections and health
        streams) and, with ``wipe_sockets``, delete the socket files in the registrar
        directory. Sockets that (re)appear afterwards are registered anew. Deleting the
        node's ResourceSlices is the test's job (through the API server)."""
        with self._cond:
            self._epoch += 1
            self.restarts += 1
            for sock in list(self._instances):
                self._drop_instance(sock)
            self._seen.clear()
            self._retry.clear()
            if wipe_sockets:
                for path, _ident in self._scan():
                    try:
                        os.unlink(path)
                        log.info("fake kubelet restart: removed %s", path)
                    except FileNotFoundError:
                        pass
            self._cond.notify_all()

    # --- queries --------------------------------------------------------------------------

    def registered_plugins(self, driver_name: str | None = None) -> list[RegisteredPlugin]:
        """Registered instances (of one driver, or all), oldest first."""
        with self._cond:
            plugins = [self._instances[s].plugin for s in self._order]
        return [p for p in plugins if driver_name is None or p.driver_name == driver_name]

    def registration_count(self, driver_name: str) -> int:
        """How many successful registrations ``driver_name`` had so far."""
        with self._cond:
            return self._registrations.get(driver_name, 0)

    def wait_registered(
        self, driver_name: str, timeout: float = 10.0, min_count: int = 1
    ) -> RegisteredPlugin:
        """Wait until ``driver_name`` is registered and has had at least ``min_count``
        successful registrations; return the instance calls would go to.

        Raises TimeoutError naming the rejections seen so far.
        """

        def ok() -> bool:
            return (self._registrations.get(driver_name, 0) >= min_count
                    and self._current(driver_name) is not None)

        with self._cond:
            if not self._cond.wait_for(ok, timeout):
                rejected = [r.reason for r in self.rejections if r.driver_name == driver_name]
                raise TimeoutError(
                    f"driver {driver_name} not registered (count >= {min_count}) within"
                    f" {timeout}s; rejections: {rejected}"
                )
            inst = self._current(driver_name)
            assert inst is not None
            return inst.plugin

    def wait_rejected(self, timeout: float = 10.0, min_count: int = 1) -> Rejection:
        """Wait until at least ``min_count`` registrations were refused; return the last."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.rejections) >= min_count, timeout):
                raise TimeoutError(f"no rejection within {timeout}s")
            return self.rejections[-1]

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait for two more complete scans with no registration attempt in flight, so that
        everything present in the registrar directory has been handled."""
        with self._cond:
            target = self.scans + 2
            if not self._cond.wait_for(lambda: self.scans >= target and not self._busy, timeout):
                raise TimeoutError(f"fake kubelet not idle within {timeout}s")

    def wait_unregistered(self, driver_name: str, timeout: float = 10.0) -> None:
        """Wait until no instance of ``driver_name`` is registered."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._current(driver_name) is None, timeout):
                raise TimeoutError(f"driver {driver_name} still registered after {timeout}s")

    # --- DRA calls ------------------------------------------------------------------------

    def node_prepare_resources(
        self, driver_name: str, claims: Iterable[ClaimLike], timeout: float = CALL_TIMEOUT
    ) -> dict[str, ClaimPrepareResult]:
        """Call NodePrepareResources on the driver's current instance with the chosen version.

        ``claims`` are ClaimRefs or ``(namespace, name, uid)`` tuples, sent as given
        (duplicates included). Returns claim UID → :class:`ClaimPrepareResult`. Raises
        :class:`KubeletCallError` for a gRPC error, :class:`KubeletCheckError` when the
        answer misses a requested claim or names an unknown one.
        """
        inst = self._require(driver_name)
        pb2, grpc_mod = DRA_MODULES[inst.plugin.dra_version]
        request = pb2.NodePrepareResourcesRequest(claims=self._claims(pb2, claims))
        stub = grpc_mod.DRAPluginStub(inst.channel)
        response = self._call("NodePrepareResources", stub.NodePrepareResources, request, timeout)
        self._check("NodePrepareResources", request, response)
        with_share = inst.plugin.dra_version == DRA_V1
        out: dict[str, ClaimPrepareResult] = {}
        for uid, entry in response.claims.items():
            devices = tuple(
                PreparedDeviceResult(
                    request_names=tuple(d.request_names),
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=tuple(d.cdi_device_ids),
                    share_id=d.share_id if with_share and d.HasField("share_id") else None,
                )
                for d in entry.devices
            )
            out[uid] = ClaimPrepareResult(devices=() if entry.error else devices,
                                          error=entry.error)
        return out

    def node_unprepare_resources(
        self, driver_name: str, claims: Iterable[ClaimLike], timeout: float = CALL_TIMEOUT
    ) -> dict[str, str]:
        """Call NodeUnprepareResources; returns claim UID → error ("" on success). Raises
        like :meth:`node_prepare_resources`."""
        inst = self._require(driver_name)
        pb2, grpc_mod = DRA_MODULES[inst.plugin.dra_version]
        request = pb2.NodeUnprepareResourcesRequest(claims=self._claims(pb2, claims))
        stub = grpc_mod.DRAPluginStub(inst.channel)
        response = self._call(
            "NodeUnprepareResources", stub.NodeUnprepareResources, request, timeout
        )
        self._check("NodeUnprepareResources", request, response)
        return {uid: entry.error for uid, entry in response.claims.items()}

    def watch_health(self, driver_name: str, version: str | None = None) -> HealthWatch:
        """Open the health stream of the driver's current instance.

        ``version`` (``v1.DRAResourceHealth`` / ``v1alpha1.DRAResourceHealth``) defaults to
        v1 when advertised, else v1alpha1; raises :class:`KubeletCheckError` when the plugin
        advertised no health service. The watch is cancelled when the instance deregisters.
        """
        inst = self._require(driver_name)
        advertised = inst.plugin.health_versions
        if version is None:
            for candidate in (HEALTH_V1, HEALTH_V1ALPHA1):
                if candidate in advertised:
                    version = candidate
                    break
            else:
                raise KubeletCheckError(f"driver {driver_name} advertises no health service")
        watch = HealthWatch(inst.channel, version, driver_name)
        with self._cond:
            inst.watches.append(watch)
        return watch

    # --- internals: calls -----------------------------------------------------------------

    def _current(self, driver_name: str) -> _Instance | None:
        with self._cond:
            for sock in reversed(self._order):
                inst = self._instances[sock]
                if inst.plugin.driver_name == driver_name:
                    return inst
        return None

    def _require(self, driver_name: str) -> _Instance:
        inst = self._current(driver_name)
        if inst is None:
            raise KubeletCheckError(f"DRA driver {driver_name} is not registered")
        return inst

    @staticmethod
    def _claims(pb2: Any, claims: Iterable[ClaimLike]) -> list[Any]:
        out = []
        for c in claims:
            namespace, name, uid = _claim_tuple(c)
            out.append(pb2.Claim(namespace=namespace, name=name, uid=uid))
        return out

    @staticmethod
    def _call(method: str, fn: Any, request: Any, timeout: float) -> Any:
        try:
            return fn(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise KubeletCallError(f"{method}: {exc.code()}: {exc.details()}", exc.code()) from exc

    @staticmethod
    def _check(method: str, request: Any, response: Any) -> None:
        requested = {c.uid for c in request.claims}
        for uid in response.claims:
            if uid not in requested:
                raise KubeletCheckError(f"{method} returned result for unknown claim UID {uid}")
        missing = requested - set(response.claims)
        if missing:
            raise KubeletCheckError(f"{method} skipped {len(missing)} ResourceClaims")

    # --- internals: registration ----------------------------------------------------------

    def _scan(self) -> list[tuple[str, tuple[int, int, int]]]:
        found: list[tuple[str, tuple[int, int, int]]] = []
        for root, dirs, files in os.walk(self.registrar_dir):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                if name.startswith("."):
                    continue
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    # identity: inode + mtime (a chmod changes ctime, not mtime)
                    found.append((path, (st.st_ino, st.st_mtime_ns, 0)))
        return found

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch_once()
            except Exception:
                log.exception("fake kubelet: scan failed")
            self._stop.wait(self._poll)

    def _watch_once(self) -> None:
        current = dict(self._scan())
        now = time.monotonic()
        with self._cond:
            for sock in list(self._seen):
                if sock not in current or current[sock] != self._seen[sock]:
                    # Removed or re-created: deregister the old instance first.
                    del self._seen[sock]
                    self._retry.pop(sock, None)
                    if sock in self._instances:
                        log.info("fake kubelet: %s went away; deregistering", sock)
                        self._drop_instance(sock)
                        self._cond.notify_all()
            for sock, ident in current.items():
                if sock in self._seen or sock in self._busy:
                    continue
                retry = self._retry.get(sock)
                if retry is not None and now < retry[0]:
                    continue
                self._busy.add(sock)
                threading.Thread(
                    target=self._register, args=(sock, ident, self._epoch),
                    name="fake-kubelet-register", daemon=True,
                ).start()
            self.scans += 1
            self._cond.notify_all()

    def _drop_instance(self, sock: str) -> None:
        inst = self._instances.pop(sock, None)
        if sock in self._order:
            self._order.remove(sock)
        if inst is None:
            return
        for watch in inst.watches:
            watch.cancelled = True
            watch._call.cancel()
        inst.channel.close()

    def _register(self, sock: str, ident: tuple[int, int, int], epoch: int) -> None:
        try:
            self._try_register(sock, ident, epoch)
        except Exception as exc:
            # Dial / GetInfo failure: retry with backoff (0.5 s doubling, capped at 2m2s).
            with self._cond:
                delay = self._retry.get(sock, (0.0, 0.25))[1] * 2
                delay = min(delay, 122.0)
                self._retry[sock] = (time.monotonic() + delay, delay)
            log.warning("fake kubelet: registering %s failed (%s); retry in %.1fs", sock, exc,
                        delay)
        finally:
            with self._cond:
                self._busy.discard(sock)
                self._cond.notify_all()

    def _try_register(self, sock: str, ident: tuple[int, int, int], epoch: int) -> None:
        channel = grpc.insecure_channel(f"unix:{sock}")
        try:
            grpc.channel_ready_future(channel).result(timeout=self._dial_timeout)
            stub = reg_grpc.RegistrationStub(channel)
            info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=GET_INFO_TIMEOUT)
            verdict, plugin = self._validate(sock, info)
            with self._cond:
                if epoch != self._epoch or self._stop.is_set():
                    return  # a restart happened meanwhile; the new scan handles it
                self._seen[sock] = ident
                self._retry.pop(sock, None)
                if verdict:
                    self._reject(sock, info.name, verdict)
                else:
                    assert plugin is not None
                    self._instances[sock] = _Instance(
                        plugin, grpc.insecure_channel(f"unix:{plugin.endpoint}"), ident
                    )
                    self._order.append(sock)
                    self._registrations[plugin.driver_name] = (
                        self._registrations.get(plugin.driver_name, 0) + 1
                    )
                    log.info("fake kubelet: registered %s at %s using %s", plugin.driver_name,
                             plugin.endpoint, plugin.dra_version)
                self._cond.notify_all()
            try:
                stub.NotifyRegistrationStatus(
                    reg_pb2.RegistrationStatus(plugin_registered=not verdict, error=verdict),
                    timeout=NOTIFY_TIMEOUT,
                )
            except grpc.RpcError as exc:
                # Like the kubelet: a failed notify on the success path leaves it registered.
                log.warning("fake kubelet: NotifyRegistrationStatus to %s failed: %s", sock,
                            exc.code())
        finally:
            channel.close()

    def _validate(self, sock: str, info: Any) -> tuple[str, RegisteredPlugin | None]:
        """("", plugin) to accept, or (reason, None) to reject."""
        if info.type != DRA_PLUGIN_TYPE:
            return (f"no handler registered for plugin type: {info.type} at socket {sock}", None)
        endpoint = info.endpoint or sock
        versions = tuple(info.supported_versions)
        try:
            chosen = choose_dra_version(self.kubelet_version, versions)
        except ValueError as exc:
            return (f"RegisterPlugin error -- plugin validation failed with err: {exc}", None)
        with self._cond:
            reject = self._reject_reason
            duplicate = any(
                i.plugin.driver_name == info.name and i.plugin.endpoint == endpoint
                for s, i in self._instances.items() if s != sock
            )
        if reject:
            return (reject, None)
        if duplicate:
            return (
                "RegisterPlugin error -- plugin registration failed with err: DRA plugin"
                f" {info.name}: endpoint {endpoint} already registered",
                None,
            )
        health = tuple(v for v in versions if v in (HEALTH_V1, HEALTH_V1ALPHA1))
        plugin = RegisteredPlugin(
            driver_name=info.name,
            endpoint=endpoint,
            registration_socket=sock,
            dra_version=chosen,
            health_versions=health,
            supported_versions=versions,
            registered_at=time.time(),
        )
        return ("", plugin)

    def _reject(self, sock: str, driver_name: str, reason: str) -> None:
        log.warning("fake kubelet: rejecting %s (%s): %s", driver_name, sock, reason)
        self.rejections.append(Rejection(sock, driver_name, reason, time.time()))


# --- CLI -----------------------------------------------------------------------------------


def _parse_claim(text: str) -> tuple[str, str, str]:
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAMESPACE/NAME/UID")
    return parts[0], parts[1], parts[2]


def _emit(event: str, **data: Any) -> None:
    print(json.dumps({"event": event, **data}, default=str), flush=True)


def fake_kubelet_main(argv: Sequence[str] | None = None) -> int:
    """``drakit fake-kubelet``: register a plugin and optionally call it; JSON lines on stdout.

    Exit codes: 0 success, 1 a claim failed or the answer broke a kubelet check, 2 no
    registration within ``--timeout``.
    """
    parser = argparse.ArgumentParser(
        prog="drakit fake-kubelet",
        description="Act as a kubelet toward a DRA plugin: register it, then prepare/unprepare.",
        allow_abbrev=False,
    )
    parser.add_argument("--registrar-dir", required=True,
                        help="kubelet plugin registrar directory to watch")
    parser.add_argument("--kubelet-version", default="1.34", help="e.g. 1.33, 1.34, 1.37")
    parser.add_argument("--driver", help="driver name to wait for (default: the first one)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for the registration")
    parser.add_argument("--prepare", type=_parse_claim, action="append", default=[],
                        metavar="NS/NAME/UID", help="claim to prepare (repeatable)")
    parser.add_argument("--unprepare", type=_parse_claim, action="append", default=[],
                        metavar="NS/NAME/UID", help="claim to unprepare (repeatable)")
    parser.add_argument("--watch-health", type=float, default=0.0, metavar="SECONDS",
                        help="print health messages for this long")
    parser.add_argument("--serve", action="store_true",
                        help="keep registering plugins until SIGINT/SIGTERM")
    parser.add_argument("--reject", metavar="REASON", help="refuse registrations with REASON")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        return _run_cli(args, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_cli(args: argparse.Namespace, stop: threading.Event) -> int:
    with FakeKubelet(args.registrar_dir, args.kubelet_version,
                     reject_reason=args.reject) as kubelet:
        driver = args.driver
        deadline = time.monotonic() + args.timeout
        while driver is None and time.monotonic() < deadline and not stop.is_set():
            plugins = kubelet.registered_plugins()
            if plugins:
                driver = plugins[0].driver_name
            else:
                stop.wait(0.1)
        try:
            if driver is None:
                raise TimeoutError(f"no plugin registered within {args.timeout}s")
            plugin = kubelet.wait_registered(driver, max(0.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            _emit("error", message=str(exc), rejections=[asdict(r) for r in kubelet.rejections])
            return 2
        _emit("registered", **asdict(plugin))
        rc = 0
        try:
            if args.prepare:
                results = kubelet.node_prepare_resources(driver, args.prepare)
                for uid, result in results.items():
                    _emit("prepared", uid=uid, **asdict(result))
                    rc = rc or (1 if result.error else 0)
            if args.unprepare:
                errors = kubelet.node_unprepare_resources(driver, args.unprepare)
                for uid, error in errors.items():
                    _emit("unprepared", uid=uid, error=error)
                    rc = rc or (1 if error else 0)
        except (KubeletCallError, KubeletCheckError) as exc:
            _emit("error", message=str(exc))
            return 1
        if args.watch_health > 0:
            watch = kubelet.watch_health(driver)
            end = time.monotonic() + args.watch_health
            while not stop.is_set() and (left := end - time.monotonic()) > 0:
                try:
                    reports = watch.next(timeout=min(left, 1.0))
                except TimeoutError:
                    continue
                _emit("health", devices=[asdict(r) for r in reports])
            watch.cancel()
        if args.serve:
            seen = set(kubelet.registered_plugins())
            while not stop.wait(0.2):
                for p in kubelet.registered_plugins():
                    if p not in seen:
                        seen.add(p)
                        _emit("registered", **asdict(p))
        return rc


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    sys.exit(fake_kubelet_main())
