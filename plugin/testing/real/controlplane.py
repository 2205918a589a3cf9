"""A real Kubernetes control plane for tests: etcd + kube-apiserver (and kube-scheduler) on
loopback, the counterpart of :mod:`drakit.plugin.testing.apiserver.server` (what envtest is for Go
projects).

The binaries are the upstream ones, built from Go modules by ``scripts/build-k8s.sh`` (cached
by version under ``~/.cache/drakit/k8s-v<version>/bin``); :func:`find_k8s_bin_dir` finds them.
Vendors use it from pytest through the ``real_apiserver`` fixture of
:mod:`drakit.plugin.testing.pytest_plugin`, or directly::

    with start_real_apiserver(tmp_path / "cp") as cp:
        api = kubernetes.client.ResourceV1Api(cp.api_client())   # system:masters
        token = cp.node_agent_token("node-1")                      # a node agent's identity
        cp.kubectl("apply", "-f", "deploy/kustomize/base/clusterrole.yaml")

What is started (kube-apiserver and etcd flags of Kubernetes 1.37)
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
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from drakit.plugin.testing.real.audit import AUDIT_POLICY as _AUDIT_POLICY
from drakit.plugin.testing.real.audit import ClusterAuditLog
from drakit.plugin.testing.real.binaries import BIN_ENV, K8S_VERSION, find_k8s_bin_dir
from drakit.plugin.testing.real.identity import ClusterIdentities
from drakit.plugin.testing.real.objects import ClusterObjects
from drakit.plugin.testing.real.process import ChildProcess, RealClusterError, make_pki
from drakit.plugin.testing.real.process import free_port as _free_port
from drakit.plugin.testing.real.rest import (
    RESOURCE_GROUP_VERSIONS as _RESOURCE_GROUP_VERSIONS,
)
from drakit.plugin.testing.real.rest import ClusterREST

__all__ = [
    "ALL_RESOURCE_VERSIONS",
    "DRA_FEATURE_GATES",
    "RealAPIServer",
    "real_server_for",
    "resource_versions_config",
    "start_real_apiserver",
]

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


class RealAPIServer:
    """etcd + kube-apiserver (+ kube-scheduler on request) in ``workdir``.

    ``runtime_config`` maps API group versions to on/off (default
    :data:`ALL_RESOURCE_VERSIONS`; e.g. ``{"resource.k8s.io/v1": False,
    "resource.k8s.io/v1beta1": True}`` is a 1.32-like server); ``feature_gates`` is added to
    :data:`DRA_FEATURE_GATES`; ``extra_args`` go to kube-apiserver last;
    ``authorization_mode`` defaults to ``Node,RBAC`` (``RBAC`` when resource.k8s.io/v1 is
    off: the Node authorizer needs v1 ResourceSlices to become ready). Use :meth:`start`
    (or ``with``) and :meth:`stop`; ``stop`` removes ``workdir`` when ``remove_workdir``.

    It runs the processes (etcd, kube-apiserver, kube-scheduler, kube-controller-manager)
    and *has* its parts, one job each, whose methods are its own too: :attr:`rest`
    (:class:`~drakit.plugin.testing.real.rest.ClusterREST`: HTTPS calls, ``request``),
    :attr:`objects` (:class:`~drakit.plugin.testing.real.objects.ClusterObjects`:
    ``create_object``, ``get_object``, ``list_objects``, ``update_object``,
    ``delete_object``, ``apply``, ``apply_manifests``, ``reset``, ``create_node``,
    ``ensure_namespace``, ``create_claim``), :attr:`identities`
    (:class:`~drakit.plugin.testing.real.identity.ClusterIdentities`: ``kubeconfig``,
    ``write_kubeconfig``, ``api_client``, ``kubectl``, ``node_agent_token``, ``whoami``)
    and :attr:`audit` (:class:`~drakit.plugin.testing.real.audit.ClusterAuditLog`:
    ``requests``, ``clear_requests``, ``write_counts``, ``audit_records``).
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
        self.rest = ClusterREST(self.workdir, self.bin_dir, self.admin_token)
        self.objects = ClusterObjects(self.rest)
        self.identities = ClusterIdentities(self.rest, self.objects)
        self.audit = ClusterAuditLog(self.rest)
        rest, objects, identities, audit = self.rest, self.objects, self.identities, self.audit
        self.request, self.request_text = rest.request, rest.request_text
        self.create_object, self.get_object = objects.create_object, objects.get_object
        self.list_objects, self.update_object = objects.list_objects, objects.update_object
        self.delete_object, self.apply = objects.delete_object, objects.apply
        self.apply_manifests, self.reset = objects.apply_manifests, objects.reset
        self.create_node, self.create_claim = objects.create_node, objects.create_claim
        self.ensure_namespace = objects.ensure_namespace
        self.kubeconfig_dict, self.kubeconfig = identities.kubeconfig_dict, identities.kubeconfig
        self.write_kubeconfig, self.api_client = identities.write_kubeconfig, identities.api_client
        self.kubectl, self.whoami = identities.kubectl, identities.whoami
        self.node_agent_token = identities.node_agent_token
        self.audit_records, self.requests = audit.audit_records, audit.requests
        self.clear_requests, self.write_counts = audit.clear_requests, audit.write_counts
        self._etcd: ChildProcess | None = None
        self._apiserver: ChildProcess | None = None
        self._scheduler: ChildProcess | None = None
        self._controller_manager: ChildProcess | None = None

    @property
    def port(self) -> int:
        """kube-apiserver's port (0 before :meth:`start`)."""
        return self.rest.port

    @property
    def url(self) -> str:
        """``https://127.0.0.1:<port>`` of kube-apiserver."""
        return self.rest.url

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM) that signed the serving certificate."""
        return self.rest.ca_file

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RealAPIServer:
        """Start etcd and kube-apiserver; returns when /readyz answers ok. Idempotent.
        Raises RealClusterError (with the component's log tail) on failure."""
        if self._apiserver is not None:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.rest.pki = make_pki(self.workdir / "pki")
            self.rest.ssl_context = ssl.create_default_context(cafile=str(self.rest.pki["ca"]))
            (self.workdir / "tokens.csv").write_text(
                f'{self.admin_token},drakit-admin,drakit-admin,"system:masters"\n'
                f"{self.nobody_token},drakit-nobody,drakit-nobody\n")
            (self.workdir / "audit-policy.yaml").write_text(_AUDIT_POLICY)
            deadline = time.monotonic() + self.start_timeout
            self._start_etcd(deadline)
            self._start_apiserver(deadline)
            self.rest.helper_version = next(
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
        pki = self.rest.pki
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in self.feature_gates.items())
        runtime = ",".join(f"{k}={str(v).lower()}" for k, v in self.runtime_config.items())
        for _attempt in range(3):
            self.rest.port = _free_port()
            cmd = [
                str(self.bin_dir / "kube-apiserver"),
                "--etcd-servers", self.etcd_url,
                "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                "--secure-port", str(self.rest.port),
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
                                            context=self.rest.ssl_context if tls else None) as r:
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
        self.identities.forget_kubeconfigs()
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

    def _process(self, component: str) -> ChildProcess:
        proc = {"etcd": self._etcd, "kube-apiserver": self._apiserver}.get(component)
        if proc is None:
            raise RealClusterError(f"{component} is not a started component of this control "
                                   f"plane (etcd, kube-apiserver)")
        return proc

    def component_alive(self, component: str) -> bool:
        """Whether ``etcd`` or ``kube-apiserver`` runs."""
        return self._process(component).alive()

    def kill_component(self, component: str) -> None:
        """SIGKILL ``etcd`` or ``kube-apiserver`` (no clean-up, as a crash); nothing else is
        told. :meth:`restart_component` starts it again."""
        self._process(component).kill()

    def restart_component(self, component: str, timeout: float = 60.0) -> float:
        """Start ``etcd`` or ``kube-apiserver`` again with the command line it had (same
        ports, so every client's URL stays valid; etcd's data dir kept), after it was killed
        or stopped; a running one is stopped first (SIGTERM). Returns the seconds until
        etcd's /health or kube-apiserver's /readyz answer 200. Raises RealClusterError
        (with the log tail) when it exits or is not ready in ``timeout`` seconds."""
        old = self._process(component)
        old.stop()
        proc = ChildProcess(old.name, old.cmd, old.log_path)
        if component == "etcd":
            self._etcd = proc
            url, tls = f"{self.etcd_url}/health", False
        else:
            self._apiserver = proc
            url, tls = f"{self.url}/readyz", True
        t0 = time.monotonic()
        if not self._wait_http(url, proc, t0 + timeout, tls=tls):
            raise RealClusterError(f"{component} did not come back:\n{proc.tail()}")
        return time.monotonic() - t0

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
