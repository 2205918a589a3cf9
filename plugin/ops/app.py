"""The node agent: wires discovery, inventory, checkpoint, CDI store, claim status, slice
publishing, hot-plug and the kubelet gRPC servers together, in the right order.

Start order: checkpoint → discovery → recovery of half-prepared claims and orphan CDI specs
→ ResourceSlices → DRA server → registration server (so the kubelet never sees a plugin that
cannot answer) → hot-plug monitor, health refresh, orphan sweep. ``stop`` reverses it and
removes this instance's sockets; ResourceSlices stay (the kubelet cleans them up).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drakit.cdi.store import SpecStore
from drakit.discovery.loader import (
    UnusedConfigSectionError,
    load_plugins,
    plugin_instances,
    section_names,
    unused_config_sections,
)
from drakit.discovery.plugin import DiscoveryContext, DiscoveryPlugin
from drakit.plugin.api.resourceapi import ClaimReader, ResourceAPI
from drakit.plugin.background import Supervisor
from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointError, CheckpointWriteError
from drakit.plugin.claims.inflight import KubeletCalls
from drakit.plugin.claims.node import NodeLogic
from drakit.plugin.claims.orphans import NodePods, OrphanSweeper
from drakit.plugin.claims.owedstatus import CheckpointLedger
from drakit.plugin.claims.status import StatusWriter
from drakit.plugin.kubelet.server import PluginServer
from drakit.plugin.kubelet.sockets import ensure_dir
from drakit.plugin.ops.config import Settings
from drakit.plugin.ops.metrics import MetricEvents, Metrics
from drakit.plugin.slices.inventory import Inventory
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.slices.validate import SliceValidationError

if TYPE_CHECKING:
    from drakit.discovery.hotplug import HotplugMonitor

log = logging.getLogger(__name__)


class KubeConfigError(RuntimeError):
    """No usable API server configuration (kubeconfig unreadable, or not in a cluster)."""


def kube_api_client(kubeconfig: str | None) -> Any:
    """A kubernetes ApiClient from ``kubeconfig``, or the in-cluster config when None.
    Raises :class:`KubeConfigError` with a hint when neither works."""
    from kubernetes import client, config

    if kubeconfig and not Path(kubeconfig).is_file():
        raise KubeConfigError(f"--kubeconfig {kubeconfig}: no such file")
    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        config.load_incluster_config()
    except config.ConfigException as e:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else (
            "in-cluster config (no --kubeconfig given, and not running in a pod)")
        raise KubeConfigError(f"{where}: {e}") from None
    return client.ApiClient()


def discovery_plugins(s: Settings) -> list[DiscoveryPlugin]:
    """The discovery plugins ``s.discovery`` names, constructed with their options (which
    they check). Raises :class:`drakit.discovery.loader.PluginLoadError` naming the plugin; needs no
    API server, so ``drakit run`` calls it before connecting."""
    plugins = load_plugins(
        s.discovery,
        lambda name: DiscoveryContext(
            driver_name=s.driver_name,
            node_name=s.node_name,
            sysfs_root=s.sysfs_root,
            dev_root=s.dev_root,
            options=dict(s.plugin_options.get(name, {})),
        ),
    )
    check_config_sections(s)
    return plugins


def check_config_sections(s: Settings) -> None:
    """A ``discovery.<name>`` section no loaded plugin reads: an error under ``--strict``
    (:class:`~drakit.discovery.loader.UnusedConfigSectionError`), a warning otherwise."""
    specs = section_names(s.discovery)  # the classes are imported already
    problems = unused_config_sections(
        s.plugin_options, specs.values(),
        f"--config {s.config_file}" if s.config_file else "--config", specs)
    if problems and s.strict:
        raise UnusedConfigSectionError("; ".join(problems) + " (refused: --strict)")
    for problem in problems:
        log.warning("%s; its options are ignored", problem)


def _private_dir(path: Path) -> None:
    """Create the plugin data dir (DRA socket, checkpoint) with mode 0750, and take group
    write and all "other" access away from an existing one (a hostPath DirectoryOrCreate is
    made 0755): only root, and the kubelet as root, may enter it. Raises ``OSError`` naming
    the flag it comes from."""
    ensure_dir(path, mode=0o750, flag="--kubelet-plugins-directory-path")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o027:
        os.chmod(path, mode & ~0o027)
        log.info("data dir %s: mode %o -> %o", path, mode, mode & ~0o027)


class App:
    """One drakit node agent. ``plugins`` overrides loading by name (tests, vendors' own
    entry points); ``api_client`` overrides the kubeconfig."""

    def __init__(
        self,
        settings: Settings,
        api_client: Any = None,
        plugins: list[DiscoveryPlugin] | None = None,
    ) -> None:
        self.settings = settings
        s = settings
        self.metrics = Metrics(s.driver_name)
        self.events = MetricEvents(self.metrics)
        #: Set by a fatal error of background work ("<work>: <error>"); ``on_fatal`` (the
        #: command's stop) is called then.
        self.failure: str | None = None
        self.on_fatal: Any = None
        self.supervisor = Supervisor(self.events,
                                     fatal=(SliceValidationError, CheckpointWriteError),
                                     on_fatal=self._fatal)
        # before the API client: a wrong name or option is said first; discovery_plugins
        # also checks the --config file's sections, plugin_instances the objects' types
        plugins = discovery_plugins(s) if plugins is None else plugin_instances(plugins)
        self.api_client = api_client if api_client is not None else kube_api_client(s.kubeconfig)
        self.resource_api = ResourceAPI(self.api_client)
        self.inventory = Inventory(plugins)
        _private_dir(s.data_dir)
        self.checkpoint = Checkpoint(s.data_dir / "checkpoint.json")
        self.specs = SpecStore(
            s.cdi_root, s.driver_name, s.cdi_class, max_version=s.cdi_version_max,
            dev_root=None if s.dev_root == Path("/dev") else s.dev_root,
            # every CDI device name is <claimUID>-<device> (claims.resourceclaim.cdi_device_name)
            claim_scoped_names=True,
        )
        self.kubelet_calls = KubeletCalls()
        self.status = StatusWriter(
            self.resource_api,
            s.driver_name,
            events=self.events,
            calls=self.kubelet_calls,
            ledger=CheckpointLedger(self.checkpoint),
            supervisor=self.supervisor,
        )
        self.metrics.status_behind.set_function(lambda: float(self.status.behind))
        if not s.device_status:  # the writer then stays idle and its backlog at 0
            log.info("AllocatedDeviceStatus writes are off (--no-device-status)")
        self.node = NodeLogic(
            s.driver_name,
            self.inventory,
            ClaimReader(self.resource_api),
            self.specs,
            self.checkpoint,
            self.status if s.device_status else None,
            events=self.events,
            calls=self.kubelet_calls,
        )
        self.publisher = SlicePublisher(
            self.resource_api,
            s.driver_name,
            s.node_name,
            strict=s.strict,
            resync_period=s.resync_seconds,
            events=self.events,
            supervisor=self.supervisor,
        )
        self.server = PluginServer(
            s.driver_name,
            self.node,
            self.inventory,
            s.registrar_dir,
            s.plugins_dir,
            s.pod_uid,
            health_enabled=s.health,
            health_resend_interval=s.health_resend_seconds,
            on_reregister=self._on_reregister,
            supervisor=self.supervisor,
        )
        subsystems = sorted({sub for p in plugins for sub in p.watched_subsystems()})
        self.hotplug: HotplugMonitor | None = None
        if subsystems:  # pyudev and the monitor are loaded only when a plugin watches one
            from drakit.discovery.hotplug import HotplugMonitor

            self.hotplug = HotplugMonitor(subsystems, self._on_hotplug,
                                          rescan_interval=s.rescan_seconds,
                                          use_udev=str(s.sysfs_root) == "/sys")
        self.orphans = OrphanSweeper(
            self.node, self.checkpoint, ClaimReader(self.resource_api),
            grace=s.orphan_grace_seconds, pods=NodePods(self.resource_api, s.node_name),
        )
        self.metrics.registered.set_function(
            lambda: 1.0 if self.server.registration_state.ready else 0.0
        )
        self.metrics.devices_published.set_function(
            lambda: float(self.publisher.stats.devices_published)
        )
        self.metrics.claims_prepared.set_function(self._claims_prepared)
        # the API server as the agent sees it (requests, reachability, watches, publishes)
        self.resource_api.http.observer = self.metrics.api_request
        self.metrics.last_publish.set_function(
            lambda: self.publisher.stats.last_publish_time or 0.0)
        self.metrics.watch_restarts_from(lambda: self.publisher.stats.watch_restarts)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.http: Any = None
        if s.http_endpoint:
            from drakit.plugin.ops.http import HTTPEndpoint

            # bound now, before any socket exists: a bad or busy endpoint fails start-up
            self.http = HTTPEndpoint(s.http_endpoint, self)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start everything; on failure, stop what was started (sockets removed) and raise."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        try:
            self.specs.ensure_ready()
        except OSError as e:
            raise OSError(e.errno, f"--cdi-root: {e.strerror or e}") from e
        try:
            self.checkpoint.load()
        except CheckpointError as e:
            log.error("%s; prepare/unprepare will fail until it is fixed", e)
            self.events.checkpoint_error(str(e))
        self.inventory.refresh()
        self._count_discovery_errors()
        self.metrics.devices.set(self.inventory.device_count())
        if self.inventory.device_count() == 0 and self.settings.sysfs_root != Path("/sys"):
            log.warning("discovery (%s) found 0 devices under --sysfs-root %s%s",
                        ", ".join(self.settings.discovery), self.settings.sysfs_root,
                        "" if self.settings.sysfs_root.is_dir() else
                        " (no such directory)")
        for pool in self.inventory.pools():
            log.info(
                "pool %s: %d device(s), %d counter set(s)",
                pool.name,
                len(pool.devices),
                len(pool.counter_sets),
                extra={"pool": pool.name},
            )
        if self.checkpoint.error is None:
            try:
                self.node.recover()
            except Exception:
                log.exception("start-up recovery failed")
        self.publisher.publish(self.inventory.pools(), wait=False)
        self.publisher.start()
        self.server.start()
        log.info(
            "serving DRA on %s, registration on %s",
            self.server.paths.dra_socket,
            self.server.paths.registration_socket,
        )
        if self.hotplug is not None:
            self.hotplug.start()
        s, loop = self.settings, self.supervisor.loop
        self._spawn("health-refresh", loop(
            "health-refresh", self._health_round,
            lambda: max(1.0, s.health_resend_seconds / 2), self._stop))
        self._spawn("orphan-sweep", loop(
            "orphan-sweep", self.orphans.sweep, lambda: s.orphan_check_seconds, self._stop))
        # full re-discovery (plugins without hot-plug subsystems, events a monitor missed);
        # publishes only when the inventory changed
        self._spawn("rescan", loop(
            "rescan", self.refresh_inventory, lambda: s.rescan_seconds, self._stop))
        if self.http is not None:
            self.http.start()

    def stop(self) -> None:
        self._stop.set()
        if self.hotplug is not None:
            self.hotplug.stop()
        self.server.stop()
        self.publisher.stop()
        self.status.stop()
        for t in self._threads:
            t.join(timeout=5)
        if self.http is not None:
            self.http.stop()
        self.checkpoint.close()
        self.specs.close()

    def _spawn(self, name: str, target: Any) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _claims_prepared(self) -> float:
        try:
            return float(len(self.checkpoint.claims()))
        except CheckpointError:
            return 0.0

    # -- readiness -----------------------------------------------------------------------

    def readiness(self) -> tuple[bool, list[str]]:
        """(ready, reasons not ready): registered with the kubelet, slices published,
        checkpoint readable."""
        reasons = []
        reg = self.server.registration_state
        if not reg.ready:
            reasons.append(
                f"not registered with the kubelet{': ' + reg.error if reg.error else ''}"
            )
        if not self.publisher.stats.published_once:
            reasons.append("ResourceSlices not published yet")
        if self.checkpoint.error:
            reasons.append(self.checkpoint.error)
        for name, error in sorted(self.inventory.errors.items()):
            reasons.append(f"discovery plugin {name} failing: {error}")
        return not reasons, reasons

    # -- events --------------------------------------------------------------------------

    def refresh_inventory(self, subsystems: set[str] | None = None) -> bool:
        """Re-run discovery (all plugins, or those watching ``subsystems``) and republish
        when the inventory changed; True when it did. The hot-plug path."""
        changed = self.inventory.refresh(subsystems)
        self._count_discovery_errors()
        if changed:
            self.metrics.devices.set(self.inventory.device_count())
            self.publisher.publish(self.inventory.pools(), wait=False)
        return changed

    def _on_hotplug(self, subsystems: set[str]) -> None:
        self.supervisor.guard("hot-plug", lambda: self._hotplug_round(subsystems))

    def _fatal(self, work: str, error: BaseException) -> None:
        self.failure = f"{work}: {type(error).__name__}: {error}"
        if self.on_fatal is not None:
            self.on_fatal()

    def _hotplug_round(self, subsystems: set[str]) -> None:
        started = time.monotonic()
        if self.refresh_inventory(subsystems):
            log.info(
                "hot-plug in %s: inventory changed (%.0f ms)",
                ",".join(sorted(subsystems)),
                (time.monotonic() - started) * 1000,
            )

    def _on_reregister(self) -> None:
        log.info("registration socket re-created; republishing ResourceSlices")
        self.publisher.trigger()

    def _count_discovery_errors(self) -> None:
        if self.inventory.errors:
            self.metrics.discovery_errors.inc(len(self.inventory.errors))

    def _health_round(self) -> None:
        if self.inventory.errors:  # retry failing discovery plugins soon
            self.refresh_inventory()
        self.inventory.refresh_health()
