"""A real Kubernetes control plane for tests: etcd + kube-apiserver (and kube-scheduler) on
loopback, the counterpart of :mod:`drakit.plugin.testing.apiserver` (what envtest is for Go
projects).

The binaries are the upstream ones, built from Go modules by ``scripts/build-k8s.sh`` (cached
by version under ``~/.cache/drakit/k8s-v<version>/bin``); :func:`find_k8s_bin_dir` finds them.
Vendors use it from pytest through the ``real_apiserver`` fixture of
:mod:`drakit.plugin.testing.pytest_plugin`, or directly::

    with start_real_apiserver(tmp_path / "cp") as cp:
        api = kubernetes.client.ResourceV1Api(cp.api_client())   # system:masters
        token = cp.node_agent_token("node-1")                      # a node agent's identity
        cp.kubectl("apply", "-f", "deploy/kustomize/base/clusterrole.yaml")

What is started (facts: shared/reference/real-control-plane.md)
    etcd (v3.7) on two free loopback ports with a throwaway data dir; kube-apiserver on a
    free loopback port with TLS (a CA and a serving certificate for 127.0.0.1 and localhost
    made with ``openssl``), static tokens (:attr:`RealAPIServer.admin_token` in group
    ``system:masters``; :attr:`RealAPIServer.nobody_token` with no rights), authorization
    ``Node,RBAC`` (RBAC alone on a server without resource.k8s.io/v1), a service-account
    issuer and key pair (so bound tokens work),
    ``--endpoint-reconciler-type none`` (needed on loopback), every ``resource.k8s.io``
    version (v1, v1beta2, v1beta1, v1alpha3) plus ``scheduling.k8s.io/v1beta1`` and the DRA
    feature gates including the alpha ones (:data:`DRA_FEATURE_GATES`), and an audit log of
    every request (:meth:`RealAPIServer.requests`, :meth:`RealAPIServer.write_counts`: the
    real server's counterpart of the embedded one's request log).

The in-process helpers of the embedded server (``create_object``, ``get_object``,
``list_objects``, ``update_object``, ``delete_object``, ``create_node``, ``create_claim``,
``write_kubeconfig``, ``api_client``) exist here too, over HTTPS as the admin, so
:class:`~drakit.plugin.testing.harness.DriverHarness` and the suites run unchanged against either.

Errors: :class:`RealClusterError` when a binary is missing, a component exits during start-up
(with the tail of its log) or is not ready within the deadline; :class:`ApiError` (the
embedded server's type: ``code``, ``reason``, ``message``) for a failed API call made by a
helper.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from drakit.plugin.testing.realcluster_audit import AUDIT_POLICY as _AUDIT_POLICY
from drakit.plugin.testing.realcluster_audit import ClusterAuditLog, record_from_audit_event
from drakit.plugin.testing.realcluster_identity import ClusterIdentities
from drakit.plugin.testing.realcluster_objects import ADMIN_ACCESS_LABEL
from drakit.plugin.testing.realcluster_process import ChildProcess, RealClusterError, make_pki
from drakit.plugin.testing.realcluster_process import free_port as _free_port
from drakit.plugin.testing.realcluster_rest import (
    RESOURCE_GROUP_VERSIONS as _RESOURCE_GROUP_VERSIONS,
)

__all__ = [
    "ADMIN_ACCESS_LABEL",
    "ALL_RESOURCE_VERSIONS",
    "DRA_FEATURE_GATES",
    "K8S_VERSION",
    "ChildProcess",
    "RealAPIServer",
    "RealClusterError",
    "build_k8s_binaries",
    "find_k8s_bin_dir",
    "make_pki",
    "record_from_audit_event",
    "start_real_apiserver",
]

K8S_VERSION = "1.37.2"
#: Environment variable naming the directory with kube-apiserver, etcd, kubectl, ...
BIN_ENV = "DRAKIT_K8S_BIN"
#: The components the API server tier needs (kubectl and kube-scheduler are looked up when used).
APISERVER_BINARIES = ("kube-apiserver", "etcd")

#: Gates switched on explicitly (1.37.2): the ones off by default that DRA drivers can use.
#: On by default and left so: DynamicResourceAllocation, DRAResourceClaimDeviceStatus,
#: DRADeviceTaints, DRADeviceTaintRules, DRAPartitionableDevices, DRAConsumableCapacity,
#: DRADeviceBindingConditions, DRAResourceClaimGranularStatusAuthorization,
#: DRAPrioritizedList, DRAAdminAccess, DRAExtendedResource, DRASchedulerFilterTimeout.
DRA_FEATURE_GATES: dict[str, bool] = {
    "DRAFractionalCapacityRange": True,
    "GenericWorkload": True,  # DRAWorkloadResourceClaims needs it (start-up fails otherwise)
    "DRAWorkloadResourceClaims": True,
    "DRAPartitionableDevicesType": True,
    "DRAListTypeAttributes": True,
    "DRADerivedAttributes": True,
    "DRADeviceCompatibilityGroups": True,
    "DRANodeAllocatableResources": True,
    "DRAOptionalNodeOperations": True,
    "DRAResourcePoolStatus": True,
}

#: Every resource.k8s.io version (v1 is always on, the others on request) plus the
#: scheduling.k8s.io/v1beta1 that GenericWorkload's PodGroup lives in (without it the
#: scheduler lists *v1beta1.PodGroup forever and schedules nothing).
ALL_RESOURCE_VERSIONS: dict[str, bool] = {
    "resource.k8s.io/v1": True,
    "resource.k8s.io/v1beta2": True,
    "resource.k8s.io/v1beta1": True,
    "resource.k8s.io/v1alpha3": True,
    "scheduling.k8s.io/v1beta1": True,
}


def find_k8s_bin_dir(required: Sequence[str] = APISERVER_BINARIES) -> Path | None:
    """The directory holding the real Kubernetes binaries, or None.

    Looked up in this order: ``$DRAKIT_K8S_BIN``; ``$DRAKIT_CACHE/k8s-v1.37.2/bin``
    (``DRAKIT_CACHE`` defaults to ``~/.cache/drakit``, where scripts/build-k8s.sh puts
    them). A directory counts only when every name in ``required`` is an executable there.
    """
    candidates: list[Path] = []
    if os.environ.get(BIN_ENV):
        candidates.append(Path(os.environ[BIN_ENV]).expanduser())
    cache = Path(os.environ.get("DRAKIT_CACHE") or Path.home() / ".cache" / "drakit")
    candidates.append(cache.expanduser() / f"k8s-v{K8S_VERSION}" / "bin")
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in required):
            return directory
    return None


def build_script() -> Path:
    """scripts/build-k8s.sh of this checkout (it builds and caches the binaries)."""
    return Path(__file__).resolve().parents[2] / "scripts" / "build-k8s.sh"


def build_k8s_binaries(components: Sequence[str] = ("kube-apiserver", "etcd", "kubectl",
                                                   "kube-scheduler"),
                       timeout: float = 3600.0) -> Path:
    """Run scripts/build-k8s.sh for ``components`` (progress on this process's stderr; a
    cached binary is not rebuilt; a cold build of the default set takes ~15 min on 2 cores)
    and return the bin directory. Raises RealClusterError when Go is absent or it fails."""
    if shutil.which("go") is None:
        raise RealClusterError("go is not installed: cannot build the Kubernetes binaries")
    r = subprocess.run(["bash", str(build_script()), *components], stdout=subprocess.PIPE,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise RealClusterError(f"scripts/build-k8s.sh failed with status {r.returncode}")
    return Path(r.stdout.strip().splitlines()[-1])


class RealAPIServer(ClusterIdentities, ClusterAuditLog):
    """etcd + kube-apiserver (+ kube-scheduler on request) in ``workdir``.

    ``runtime_config`` maps API group versions to on/off (default
    :data:`ALL_RESOURCE_VERSIONS`; e.g. ``{"resource.k8s.io/v1": False,
    "resource.k8s.io/v1beta1": True}`` is a 1.32-like server); ``feature_gates`` is added to
    :data:`DRA_FEATURE_GATES`; ``extra_args`` go to kube-apiserver last;
    ``authorization_mode`` defaults to ``Node,RBAC`` (``RBAC`` when resource.k8s.io/v1 is
    off: the Node authorizer needs v1 ResourceSlices to become ready). Use :meth:`start`
    (or ``with``) and :meth:`stop`; ``stop`` removes ``workdir`` when ``remove_workdir``.

    This class runs the processes (etcd, kube-apiserver, kube-scheduler,
    kube-controller-manager); the rest comes from its bases, one job each:
    :class:`~drakit.plugin.testing.realcluster_rest.ClusterREST` (HTTPS calls),
    :class:`~drakit.plugin.testing.realcluster_objects.ClusterObjects` (object helpers),
    :class:`~drakit.plugin.testing.realcluster_identity.ClusterIdentities` (kubeconfigs,
    clients, tokens) and :class:`~drakit.plugin.testing.realcluster_audit.ClusterAuditLog`
    (the audit log as request records).
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        bin_dir: Path | None = None,
        *,
        runtime_config: Mapping[str, bool] | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        extra_args: Sequence[str] = (),
        authorization_mode: str | None = None,
        remove_workdir: bool = True,
        start_timeout: float = 90.0,
    ) -> None:
        found = bin_dir or find_k8s_bin_dir()
        if found is None:
            raise RealClusterError(
                f"kube-apiserver and etcd not found (set ${BIN_ENV} or run "
                f"scripts/build-k8s.sh; looked in ~/.cache/drakit/k8s-v{K8S_VERSION}/bin)")
        self.bin_dir = found
        self.workdir = Path(workdir)
        self.runtime_config = dict(ALL_RESOURCE_VERSIONS if runtime_config is None
                                   else runtime_config)
        self.feature_gates = {**DRA_FEATURE_GATES, **(feature_gates or {})}
        self.extra_args = list(extra_args)
        # The Node authorizer's graph watches v1 ResourceSlices: with v1 off its informer
        # never syncs and /readyz stays "informer-sync failed" (seen with 1.37.2).
        v1_on = self.runtime_config.get("resource.k8s.io/v1", True)
        self.authorization_mode = authorization_mode or ("Node,RBAC" if v1_on else "RBAC")
        self.remove_workdir = remove_workdir
        self.start_timeout = start_timeout
        self.admin_token = uuid.uuid4().hex
        self.nobody_token = uuid.uuid4().hex
        self.port = 0
        self._etcd: ChildProcess | None = None
        self._apiserver: ChildProcess | None = None
        self._scheduler: ChildProcess | None = None
        self._controller_manager: ChildProcess | None = None
        self._kubeconfigs: dict[str | None, Path] = {}
        self._ssl: ssl.SSLContext | None = None
        self._pki: dict[str, Path] = {}
        self._audit_offset = 0
        self._helper_version = "v1"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RealAPIServer:
        """Start etcd and kube-apiserver; returns when /readyz answers ok. Idempotent.
        Raises RealClusterError (with the component's log tail) on failure."""
        if self._apiserver is not None:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._pki = make_pki(self.workdir / "pki")
            self._ssl = ssl.create_default_context(cafile=str(self._pki["ca"]))
            (self.workdir / "tokens.csv").write_text(
                f'{self.admin_token},drakit-admin,drakit-admin,"system:masters"\n'
                f"{self.nobody_token},drakit-nobody,drakit-nobody\n")
            (self.workdir / "audit-policy.yaml").write_text(_AUDIT_POLICY)
            deadline = time.monotonic() + self.start_timeout
            self._start_etcd(deadline)
            self._start_apiserver(deadline)
            self._helper_version = next(
                v for v in _RESOURCE_GROUP_VERSIONS
                if self.runtime_config.get(f"resource.k8s.io/{v}", v == "v1"))
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self, deadline: float) -> None:
        for _attempt in range(3):
            client, peer = _free_port(), _free_port()
            data = self.workdir / "etcd-data"
            shutil.rmtree(data, ignore_errors=True)
            cmd = [str(self.bin_dir / "etcd"), "--name", "drakit", "--data-dir", str(data),
                   "--listen-client-urls", f"http://127.0.0.1:{client}",
                   "--advertise-client-urls", f"http://127.0.0.1:{client}",
                   "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                   "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                   "--initial-cluster", f"drakit=http://127.0.0.1:{peer}",
                   "--log-level", "warn", "--quota-backend-bytes", str(1 << 30)]
            self._etcd = ChildProcess("etcd", cmd, self.workdir / "etcd.log")
            self.etcd_url = f"http://127.0.0.1:{client}"
            if self._wait_http(f"{self.etcd_url}/health", self._etcd, deadline, tls=False):
                return
            self._etcd.stop()
        raise RealClusterError(f"etcd did not start:\n{self._etcd.tail() if self._etcd else ''}")

    def _start_apiserver(self, deadline: float) -> None:
        pki = self._pki
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in self.feature_gates.items())
        runtime = ",".join(f"{k}={str(v).lower()}" for k, v in self.runtime_config.items())
        for _attempt in range(3):
            self.port = _free_port()
            cmd = [
                str(self.bin_dir / "kube-apiserver"),
                "--etcd-servers", self.etcd_url,
                "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                "--secure-port", str(self.port),
                "--tls-cert-file", str(pki["cert"]), "--tls-private-key-file", str(pki["key"]),
                "--client-ca-file", str(pki["ca"]),
                "--token-auth-file", str(self.workdir / "tokens.csv"),
                "--authorization-mode", self.authorization_mode,
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", str(pki["sa_pub"]),
                "--service-account-signing-key-file", str(pki["sa_key"]),
                "--service-cluster-ip-range", "10.0.0.0/24",
                "--endpoint-reconciler-type", "none",
                "--runtime-config", runtime,
                "--feature-gates", gates,
                "--audit-policy-file", str(self.workdir / "audit-policy.yaml"),
                "--audit-log-path", str(self.workdir / "audit.log"),
                "--audit-log-format", "json", "--audit-log-mode", "blocking",
                "--cert-dir", str(self.workdir / "apiserver-certs"),
                "--profiling=false",
                *self.extra_args,
            ]
            self._apiserver = ChildProcess("kube-apiserver", cmd,
                                           self.workdir / "kube-apiserver.log")
            if self._wait_http(f"{self.url}/readyz", self._apiserver, deadline, tls=True):
                return
            if time.monotonic() >= deadline:
                break
            self._apiserver.stop()
            if "address already in use" not in self._apiserver.tail():
                break
        tail = self._apiserver.tail() if self._apiserver else ""
        raise RealClusterError(f"kube-apiserver did not become ready:\n{tail}")

    def _wait_http(self, url: str, proc: ChildProcess, deadline: float, *, tls: bool) -> bool:
        """Poll ``url`` until 200 (True), the process exits or the deadline passes (False)."""
        while time.monotonic() < deadline:
            if not proc.alive():
                return False
            try:
                req = urllib.request.Request(url)
                if tls:
                    req.add_header("Authorization", f"Bearer {self.admin_token}")
                with urllib.request.urlopen(req, timeout=2,
                                            context=self._ssl if tls else None) as r:
                    if r.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        """Stop the scheduler, kube-apiserver and etcd (SIGTERM, then SIGKILL after 10 s)
        and remove the workdir (when ``remove_workdir``)."""
        for proc in (self._controller_manager, self._scheduler, self._apiserver, self._etcd):
            if proc is not None:
                proc.stop()
        self._controller_manager = self._scheduler = self._apiserver = self._etcd = None
        self._kubeconfigs.clear()
        if self.remove_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> RealAPIServer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def served_versions(self) -> tuple[str, ...]:
        """The resource.k8s.io versions served (v1 first when on), like the embedded one's."""
        return tuple(v for v in _RESOURCE_GROUP_VERSIONS
                     if self.runtime_config.get(f"resource.k8s.io/{v}", v == "v1"))

    def logs(self, component: str = "kube-apiserver", lines: int = 50) -> str:
        """The tail of a component's log (kube-apiserver, etcd, kube-scheduler)."""
        proc = {"kube-apiserver": self._apiserver, "etcd": self._etcd,
                "kube-scheduler": self._scheduler,
                "kube-controller-manager": self._controller_manager}.get(component)
        return proc.tail(lines) if proc else ""

    # ------------------------------------------------------------------ scheduler

    def start_scheduler(self, timeout: float = 60.0) -> None:
        """Start kube-scheduler (same feature gates, admin kubeconfig, no leader election);
        returns when its /healthz answers ok. Without a kubelet, the pods it binds are
        never run; that is enough to see the DRA allocator's result in the claims. A bound
        pod needs a Node that is Ready and untainted (:meth:`create_node`)."""
        if self._scheduler is None:
            self._scheduler = self._start_component("kube-scheduler", [], timeout)

    def stop_scheduler(self) -> None:
        if self._scheduler is not None:
            self._scheduler.stop()
            self._scheduler = None

    def start_controller_manager(
        self, controllers: Sequence[str] = ("resourceclaim-controller",),
        timeout: float = 60.0,
    ) -> None:
        """Start kube-controller-manager running only ``controllers`` (default: the one that
        makes a Pod's ResourceClaims from its ResourceClaimTemplates and records them in
        ``status.resourceClaimStatuses``, which the scheduler waits for)."""
        if self._controller_manager is None:
            self._controller_manager = self._start_component(
                "kube-controller-manager", ["--controllers", ",".join(controllers)], timeout)

    def stop_controller_manager(self) -> None:
        if self._controller_manager is not None:
            self._controller_manager.stop()
            self._controller_manager = None

    def _start_component(self, name: str, args: list[str], timeout: float) -> ChildProcess:
        """Start kube-scheduler or kube-controller-manager as the admin and wait for its
        /healthz (on a free loopback port, self-signed serving certificate)."""
        binary = self.bin_dir / name
        if not os.access(binary, os.X_OK):
            raise RealClusterError(f"{name} not found in {self.bin_dir} "
                                   f"(scripts/build-k8s.sh {name})")
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in self.feature_gates.items())
        kubeconfig = str(self.kubeconfig())
        port = _free_port()
        cmd = [str(binary), "--kubeconfig", kubeconfig,
               "--authentication-kubeconfig", kubeconfig,
               "--authorization-kubeconfig", kubeconfig,
               "--bind-address", "127.0.0.1", "--secure-port", str(port),
               "--cert-dir", str(self.workdir / f"{name}-certs"),
               "--leader-elect=false", "--feature-gates", gates, *args]
        proc = ChildProcess(name, cmd, self.workdir / f"{name}.log")
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.alive():
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2,
                                            context=insecure) as r:
                    if r.status == 200:
                        return proc
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        tail = proc.tail()
        proc.stop()
        raise RealClusterError(f"{name} did not become healthy:\n{tail}")


def start_real_apiserver(
    workdir: str | os.PathLike[str] | None = None,
    *,
    runtime_config: Mapping[str, bool] | None = None,
    feature_gates: Mapping[str, bool] | None = None,
    extra_args: Sequence[str] = (),
    bin_dir: Path | None = None,
) -> RealAPIServer:
    """Start a :class:`RealAPIServer` in ``workdir`` (a new temp dir when None) and return
    it (started; call ``stop()`` or use it in ``with``)."""
    directory = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="drk-k8s-"))
    return RealAPIServer(directory, bin_dir, runtime_config=runtime_config,
                         feature_gates=feature_gates, extra_args=extra_args).start()


def wait_until(cond: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.1) -> Any:
    """Poll ``cond()`` until it returns a truthy value (returned); TimeoutError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def resource_versions_config(versions: Iterable[str]) -> dict[str, bool]:
    """runtime_config serving exactly these resource.k8s.io ``versions`` (e.g.
    ``["v1beta1"]`` for a 1.32-like server), scheduling.k8s.io/v1beta1 kept on."""
    wanted = set(versions)
    return {**{f"resource.k8s.io/{v}": v in wanted for v in (*_RESOURCE_GROUP_VERSIONS,
                                                              "v1alpha3")},
            "scheduling.k8s.io/v1beta1": True}


def real_server_for(request: Any, default: RealAPIServer,
                    harness_kwargs: dict[str, Any]) -> RealAPIServer:
    """The real server a harness made with ``harness_kwargs`` should use in a test written
    for the embedded one: ``default``, or for ``served_versions=(...)`` the session's server
    serving just those (``real_apiserver_factory``), reset. Pops ``served_versions``."""
    versions = harness_kwargs.pop("served_versions", None)
    if not versions or tuple(versions) == ("v1",):
        return default
    server: RealAPIServer = request.getfixturevalue("real_apiserver_factory")(
        runtime_config=resource_versions_config(versions))
    server.reset()
    return server
