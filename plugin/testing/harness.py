"""A whole DRA driver on a test bench: embedded API server + fake kubelet + the drakit node
agent (in-process, or as a real ``drakit run`` subprocess), all in one temporary directory.

Vendors test their discovery plugin end to end with it::

    with DriverHarness(tmp_path, plugins=[MyPlugin(...)]) as h:
        claim = h.allocate("c1", [h.devices()[0]])
        result = h.prepare(claim)[claim["metadata"]["uid"]]
        assert not result.error

Directory layout under ``root``: ``registry/`` (registrar dir), ``plugins/`` (kubelet plugins
dir; the data dir with the checkpoint is ``plugins/<driver>``), ``cdi/`` (CDI root),
``kubeconfig``. Socket paths must fit in 107 bytes, so a long ``root`` is reached through a
short symlink in /tmp.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from subprocess import Popen
from types import TracebackType
from typing import TYPE_CHECKING, Any

from drakit.discovery.loader import (
    PluginLoadError,
    plugin_instances,
    section_names,
    unused_config_sections,
)
from drakit.discovery.plugin import DiscoveryPlugin
from drakit.plugin.testing.apiserver.server import AllocatedDevice, EmbeddedAPIServer
from drakit.plugin.testing.kubelet import ClaimPrepareResult
from drakit.plugin.testing.kubelet.fake import FakeKubelet

if TYPE_CHECKING:
    from drakit.plugin.testing.real.controlplane import RealAPIServer

ClaimArg = dict[str, Any] | tuple[str, str, str]


def _ref(claim: ClaimArg) -> tuple[str, str, str]:
    if isinstance(claim, tuple):
        return claim
    meta = claim["metadata"]
    return (meta["namespace"], meta["name"], meta["uid"])


def _names(discovery: object) -> list[str]:
    """``discovery`` as a list of plugin names; ``TypeError`` for one bare name or a non-name
    (``discovery="acme"`` would otherwise load the plugins ``a``, ``c``, ...)."""
    if isinstance(discovery, str) or not isinstance(discovery, Iterable):
        raise TypeError(f"discovery must be a list of plugin names, not {discovery!r}"
                        + (f" (discovery=[{discovery!r}])" if isinstance(discovery, str) else ""))
    names = list(discovery)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(f"discovery[{i}] is {name!r}, not a plugin name"
                            + (": plugin objects go in plugins=[...]"
                               if isinstance(name, DiscoveryPlugin | type) else ""))
    return names


def _options(options: object, discovery: list[str],
             plugins: list[DiscoveryPlugin] | None) -> dict[str, dict[str, Any]]:
    """``plugin_options`` checked against the plugins that read them: every section must
    belong to a plugin of ``discovery``, keyed by the name it goes by (``drakit run`` warns
    about a section no plugin reads; a test refuses it). Raises ``TypeError`` for a value
    that is not a map of maps, ``ValueError`` naming the section and the loaded plugins."""
    if not isinstance(options, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) for k, v in options.items()):
        raise TypeError("plugin_options must map plugin names to their options (dicts), "
                        f"not {options!r}")
    if not options:
        return {}
    if plugins is not None:
        raise ValueError(
            f"plugin_options ({', '.join(options)}) are read only by plugins loaded by name "
            "(discovery=[...]); a plugin object gets its options from its own "
            "DiscoveryContext(options=...)")
    try:
        specs = section_names(discovery)
    except PluginLoadError:
        return dict(options)  # a plugin this process cannot load: the agent says so
    problems = unused_config_sections(options, specs.values(), "plugin_options", specs)
    if problems:
        raise ValueError("; ".join(problems))
    return dict(options)


class DriverHarness:
    """Start everything with :meth:`start` (or ``with``); :meth:`stop` tears it down.

    ``plugins`` (instances) override ``discovery`` (names, with ``plugin_options`` per name).
    Wrong arguments raise at construction, before anything starts: ``TypeError`` for a
    plugin class (or a name) in ``plugins``, a bare string as ``discovery``, options that
    are not a map of maps; ``ValueError`` for ``plugin_options`` beside ``plugins`` objects
    or a section no plugin of ``discovery`` reads (see
    :func:`~drakit.discovery.loader.unused_config_sections`).
    ``subprocess=True`` runs ``drakit run`` as a child process (needed to kill -9 it); then
    plugins must be given by name. ``extra_args`` are appended to its command line;
    ``settings`` overrides Settings fields in-process; ``env`` (also settable later as
    ``self.env``, read at each subprocess start) adds environment variables for the child.
    ``apiserver`` may also be a :class:`~drakit.plugin.testing.real.controlplane.RealAPIServer`
    (a real kube-apiserver); then ``api_token`` is the identity the agent uses (e.g. its
    ``node_agent_token(node_name)``; default: the admin token).

    Attributes:
        root: The directory everything is made in (``real_root``, or a short symlink to it).
        real_root: The ``root`` argument as given.
        registrar_dir: The kubelet's plugin registration directory (``root/registry``).
        plugins_dir: The kubelet's plugins directory (``root/plugins``); the agent's data
            directory is ``data_dir`` below it.
        cdi_dir: The CDI spec directory (``root/cdi``); see :meth:`cdi_files`.
        kubeconfig: The kubeconfig file of the API server (``root/kubeconfig``).
        config_file: The ``--config`` file written from ``plugin_options`` (subprocess).
        log_path: The agent's log (subprocess): ``root/drakit.log``.
        apiserver: The :class:`EmbeddedAPIServer` (or the API server given).
        kubelet: The :class:`FakeKubelet` that registers the plugin and calls it.
        app: The in-process agent (``drakit.plugin.ops.app.App``) while it runs, else None.
        process: The ``drakit run`` child process (subprocess mode) while it runs, else None.
        env: Environment variables added for the child, read at each subprocess start.
        agent_command: The command ``run`` and its flags are appended to (subprocess): the
            CLI by default.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        driver_name: str = "drakit.example.com",
        node_name: str = "node-1",
        discovery: Sequence[str] = ("example",),
        plugins: list[DiscoveryPlugin] | None = None,
        plugin_options: dict[str, dict[str, Any]] | None = None,
        served_versions: Sequence[str] = ("v1",),
        kubelet_version: str = "1.34",
        subprocess: bool = False,
        extra_args: Sequence[str] = (),
        settings: dict[str, Any] | None = None,
        apiserver: EmbeddedAPIServer | RealAPIServer | None = None,
        env: dict[str, str] | None = None,
        api_token: str | None = None,
        dev_root: str | os.PathLike[str] | None = None,
    ) -> None:
        # wrong arguments fail here, before anything is made or started
        self.discovery = _names(discovery)
        self.plugins = plugin_instances(plugins) if plugins is not None else None
        self.plugin_options = _options(plugin_options or {}, self.discovery, self.plugins)
        self.real_root = Path(root)
        self.real_root.mkdir(parents=True, exist_ok=True)
        self._link_holder: Path | None = None
        if len(str(self.real_root)) > 40:
            self._link_holder = Path(tempfile.mkdtemp(prefix="drk-"))
            os.symlink(self.real_root, self._link_holder / "r")
            self.root = self._link_holder / "r"
        else:
            self.root = self.real_root
        self.driver_name = driver_name
        self.node_name = node_name
        self.registrar_dir = self.root / "registry"
        self.plugins_dir = self.root / "plugins"
        self.cdi_dir = self.root / "cdi"
        self.kubeconfig = self.root / "kubeconfig"
        self.config_file = self.root / "drakit.yaml"
        self.use_subprocess = subprocess
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        #: The command ``run`` and its flags are appended to (subprocess mode): the CLI by
        #: default; crash tests put their crash agent here.
        self.agent_command: list[str] = [sys.executable, "-m", "drakit.plugin.ops.cli"]
        self.settings_overrides = settings or {}
        #: Where the agent sees the host's ``/dev`` (``--dev-root``): None is ``/dev``; a
        #: test without root puts device_node_stand_in(dev_root, "acme0") there.
        self.dev_root = Path(dev_root) if dev_root is not None else None
        self._own_apiserver = apiserver is None
        self.apiserver: Any = apiserver or EmbeddedAPIServer(served_versions=served_versions)
        self.api_token = api_token
        self.kubelet = FakeKubelet(self.registrar_dir, kubelet_version)
        self.app: Any = None
        self.process: Popen[bytes] | None = None
        self.log_path = self.root / "drakit.log"

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The agent's data directory: the DRA socket and the checkpoint
        (``plugins_dir/<driver name>``)."""
        return self.plugins_dir / self.driver_name

    @property
    def checkpoint_path(self) -> Path:
        """The agent's checkpoint file (``data_dir/checkpoint.json``)."""
        return self.data_dir / "checkpoint.json"

    def start(self, wait: float = 30.0) -> DriverHarness:
        """Start the API server (unless one was given), the fake kubelet and the agent;
        return once the kubelet registered the plugin and every pool's ResourceSlices exist
        (``TimeoutError`` after ``wait`` seconds). Returns this harness."""
        for d in (self.registrar_dir, self.plugins_dir, self.cdi_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.apiserver.start()
        if self.api_token is not None:
            self.apiserver.write_kubeconfig(self.kubeconfig, token=self.api_token)
        else:
            self.apiserver.write_kubeconfig(self.kubeconfig)
        if self.apiserver.get_object("nodes", self.node_name) is None:
            self.apiserver.create_node(self.node_name)
        self.kubelet.start()
        self.start_plugin(wait)
        return self

    def start_plugin(self, wait: float = 30.0) -> None:
        """Start (or restart) the node agent and wait until the kubelet registered it and
        its ResourceSlices exist."""
        before = self.kubelet.registration_count(self.driver_name)
        if self.use_subprocess:
            self._start_subprocess()
        else:
            self._start_inprocess()
        self.wait_for(
            lambda: self._alive() and self.kubelet.registration_count(self.driver_name) > before,
            wait, "the kubelet to register the plugin")
        self.wait_for(lambda: self._alive() and self.pools_complete(), wait,
                      "every pool's ResourceSlices to be published")

    def _alive(self) -> bool:
        """True while the agent runs; raises with the tail of its log when the child exited."""
        if self.process is not None and self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-20:]
            raise RuntimeError(f"drakit run exited with status {self.process.returncode}:\n"
                               + "\n".join(tail))
        return True

    def pools_complete(self) -> bool:
        """True when at least one slice exists and, for every pool, all of its
        resourceSliceCount slices exist with one generation (a whole pool is published)."""
        pools: dict[str, list[dict[str, Any]]] = {}
        for s in self.slices(copy=False):
            pools.setdefault(s["spec"]["pool"]["name"], []).append(s["spec"]["pool"])
        return bool(pools) and all(
            len(ps) == ps[0]["resourceSliceCount"]
            and len({p["generation"] for p in ps}) == 1
            for ps in pools.values()
        )

    def _start_inprocess(self) -> None:
        from drakit.plugin.ops.app import App
        from drakit.plugin.ops.config import Settings

        fields: dict[str, Any] = dict(
            driver_name=self.driver_name,
            node_name=self.node_name,
            registrar_dir=self.registrar_dir,
            plugins_dir=self.plugins_dir,
            cdi_root=self.cdi_dir,
            discovery=self.discovery,
            plugin_options=self.plugin_options,
            resync_seconds=5.0,
            health_resend_seconds=2.0,
        )
        if self.dev_root is not None:
            fields["dev_root"] = self.dev_root
        fields.update(self.settings_overrides)
        self.app = App(
            Settings(**fields), plugins=self.plugins,
            api_client=(self.apiserver.api_client() if self.api_token is None
                        else self.apiserver.api_client(self.api_token)),
        )
        self.app.start()

    def _start_subprocess(self) -> None:
        import yaml

        if self.plugins is not None:
            raise ValueError("subprocess mode loads plugins by name: use discovery=[...]")
        self.config_file.write_text(yaml.safe_dump({"discovery": self.plugin_options}))
        cmd = [
            *self.agent_command,
            "run",
            "--driver-name",
            self.driver_name,
            "--node-name",
            self.node_name,
            "--kubeconfig",
            str(self.kubeconfig),
            "--kubelet-registrar-directory-path",
            str(self.registrar_dir),
            "--kubelet-plugins-directory-path",
            str(self.plugins_dir),
            "--cdi-root",
            str(self.cdi_dir),
            "--discovery",
            ",".join(self.discovery),
            "--config",
            str(self.config_file),
            "--resync-seconds",
            "5",
            *(["--dev-root", str(self.dev_root)] if self.dev_root is not None else []),
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **self.env},
            )
        finally:
            log.close()

    def stop_plugin(self, kill: bool = False, timeout: float = 15.0) -> None:
        """Stop the node agent: SIGTERM (clean) or SIGKILL (``kill=True``, subprocess only)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            self.process = None
        if self.app is not None:
            self.app.stop()
            self.app = None

    def stop(self) -> None:
        """Stop the agent, the fake kubelet and the API server this harness started, and
        remove the short symlink (the files under ``real_root`` stay)."""
        try:
            self.stop_plugin()
        finally:
            self.kubelet.stop()
            if self._own_apiserver:
                self.apiserver.stop()
            if self._link_holder is not None:
                shutil.rmtree(self._link_holder, ignore_errors=True)

    def __enter__(self) -> DriverHarness:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def wait_for(cond: Any, timeout: float, what: str, interval: float = 0.02) -> None:
        """Poll ``cond()`` until true; raise TimeoutError naming ``what``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(interval)
        raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")

    def slices(self, *, copy: bool = True) -> list[dict[str, Any]]:
        """This driver's ResourceSlices of this node (v1 JSON). ``copy=False``: the API
        server's stored objects, read-only (see ``EmbeddedAPIServer.list_objects``), for
        checks that only read them; the waits of this harness use it."""
        return [
            s
            for s in self.apiserver.list_objects("resourceslices", copy=copy)
            if s["spec"].get("driver") == self.driver_name
            and s["spec"].get("nodeName") == self.node_name
        ]

    def devices(self) -> list[tuple[str, str]]:
        """(pool, device) of every published device, in slice order."""
        return [
            (s["spec"]["pool"]["name"], d["name"])
            for s in self.slices(copy=False)
            for d in s["spec"].get("devices") or []  # null from a v1beta1 server
        ]

    def allocate(
        self,
        name: str,
        devices: Iterable[tuple[str, str] | AllocatedDevice],
        namespace: str = "default",
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Create a ResourceClaim allocated to ``devices`` ((pool, device) pairs or
        AllocatedDevice, one request each unless given)."""
        allocated = [
            d
            if isinstance(d, AllocatedDevice)
            else AllocatedDevice(
                driver=self.driver_name, pool=d[0], device=d[1], request=f"req-{i}"
            )
            for i, d in enumerate(devices)
        ]
        return self.apiserver.create_claim(
            namespace, name, allocated, node_name=self.node_name, **kwargs
        )

    def allocate_as_scheduler(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Create ``claim`` (a v1 ResourceClaim with requests, unallocated) and allocate it on
        this node as kube-scheduler would, from the published slices and the server's
        DeviceClasses (drakit.allocator; needs ``drakit[explain]``). Returns the stored claim;
        raises ``drakit.allocator.AllocationFailed`` with the reasons when it cannot."""
        from drakit.allocator.testkit import allocate_claim

        return allocate_claim(self.apiserver, claim, self.node_name)

    def prepare(self, *claims: ClaimArg, timeout: float = 45.0) -> dict[str, ClaimPrepareResult]:
        """The kubelet's ``NodePrepareResources`` for ``claims`` (ResourceClaims as returned
        by :meth:`allocate`, or (namespace, name, UID)): claim UID → result."""
        return self.kubelet.node_prepare_resources(
            self.driver_name, [_ref(c) for c in claims], timeout=timeout
        )

    def unprepare(self, *claims: ClaimArg, timeout: float = 45.0) -> dict[str, str]:
        """The kubelet's ``NodeUnprepareResources`` for ``claims``: claim UID → error text
        (empty on success)."""
        return self.kubelet.node_unprepare_resources(
            self.driver_name, [_ref(c) for c in claims], timeout=timeout
        )

    def claim(self, claim: ClaimArg) -> dict[str, Any] | None:
        """The ResourceClaim as the API server has it now (None when it is gone)."""
        ns, name, _ = _ref(claim)
        return self.apiserver.get_object("resourceclaims", name, ns)

    def cdi_files(self) -> list[Path]:
        """The CDI spec files in ``cdi_dir``, sorted (one per prepared claim)."""
        return sorted(p for p in self.cdi_dir.iterdir() if not p.name.startswith("."))
