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

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from drakit.cdi.atomic import atomic_write
from drakit.plugin.slices.convert import (
    claim_from_version,
    claim_to_version,
    slice_from_version,
    slice_to_version,
)
from drakit.plugin.testing.apiserver import AllocatedDevice
from drakit.plugin.testing.apiserver_errors import ApiError
from drakit.plugin.testing.apiserver_log import RequestRecord

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "ALL_RESOURCE_VERSIONS",
    "DRA_FEATURE_GATES",
    "K8S_VERSION",
    "RealAPIServer",
    "RealClusterError",
    "build_k8s_binaries",
    "find_k8s_bin_dir",
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

_RESOURCE_GROUP_VERSIONS = ("v1", "v1beta2", "v1beta1")
#: The namespace label without which the server refuses adminAccess requests (DRAAdminAccess).
ADMIN_ACCESS_LABEL = {"resource.kubernetes.io/admin-access": "true"}


class RealClusterError(RuntimeError):
    """A real control-plane component could not be started or is missing."""


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RealClusterError(f"openssl {args[0]} failed: {r.stderr.strip()[-500:]}")


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA, a serving certificate (SAN IP 127.0.0.1, DNS localhost) signed by it and an RSA
    key pair for service-account tokens, made with ``openssl`` in ``directory``. Returns
    ``{"ca", "ca_key", "cert", "key", "sa_key", "sa_pub"}`` paths."""
    if shutil.which("openssl") is None:
        raise RealClusterError("openssl is not installed (needed for the API server's TLS)")
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=drakit-test-ca", "-keyout", "ca.key", "-out", "ca.crt", cwd=directory)
    (directory / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
             "-keyout", "server.key", "-out", "server.csr", cwd=directory)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt",
             cwd=directory)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    names = {"ca": "ca.crt", "ca_key": "ca.key", "cert": "server.crt", "key": "server.key",
             "sa_key": "sa.key", "sa_pub": "sa.pub"}
    return {k: directory / v for k, v in names.items()}


_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
"""


def record_from_audit_event(event: Mapping[str, Any]) -> RequestRecord:
    """One request as the real server's audit log saw it (stage ResponseComplete), in the
    embedded server's :class:`RequestRecord` shape (``method`` is not logged: ``""``)."""
    ref = event.get("objectRef") or {}
    return RequestRecord(
        verb=event.get("verb", ""),
        resource=ref.get("resource", ""),
        subresource=ref.get("subresource", ""),
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
        api_group=ref.get("apiGroup", ""),
        api_version=ref.get("apiVersion", ""),
        user_agent=event.get("userAgent", ""),
        status_code=int((event.get("responseStatus") or {}).get("code", 0)),
        method="",
        path=event.get("requestURI", ""),
        user=(event.get("user") or {}).get("username", ""),
    )


_CORE = {"nodes": False, "namespaces": False, "pods": True, "serviceaccounts": True}
_RESOURCE_K8S = {"resourceslices": False, "deviceclasses": False, "resourceclaims": True,
                 "resourceclaimtemplates": True}

_KIND_PATHS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1",
                                  "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("/apis/admissionregistration.k8s.io/v1",
                                         "validatingadmissionpolicybindings", False),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    "ResourceClaimTemplate": ("/apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "ResourceClaim": ("/apis/resource.k8s.io/v1", "resourceclaims", True),
    "Pod": ("/api/v1", "pods", True),
}


class ChildProcess:
    """A child process in its own session (its own process group), output appended to
    ``log_path``; ``stop`` sends SIGTERM and SIGKILLs after ``timeout`` seconds."""

    def __init__(self, name: str, cmd: list[str], log_path: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          env=dict(env) if env is not None else None)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL (no clean-up by the process)."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)


class RealAPIServer:
    """etcd + kube-apiserver (+ kube-scheduler on request) in ``workdir``.

    ``runtime_config`` maps API group versions to on/off (default
    :data:`ALL_RESOURCE_VERSIONS`; e.g. ``{"resource.k8s.io/v1": False,
    "resource.k8s.io/v1beta1": True}`` is a 1.32-like server); ``feature_gates`` is added to
    :data:`DRA_FEATURE_GATES`; ``extra_args`` go to kube-apiserver last;
    ``authorization_mode`` defaults to ``Node,RBAC`` (``RBAC`` when resource.k8s.io/v1 is
    off: the Node authorizer needs v1 ResourceSlices to become ready). Use :meth:`start`
    (or ``with``) and :meth:`stop`; ``stop`` removes ``workdir`` when ``remove_workdir``.
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
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self._pki["ca"]

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

    # ------------------------------------------------------------------ clients

    def kubeconfig_dict(self, token: str | None = None,
                        namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig document for ``token`` (default: the admin token)."""
        name = "drakit-real"
        return {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": name, "cluster": {
                "server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": name, "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name,
                                                    "namespace": namespace}}],
            "current-context": name, "preferences": {},
        }

    def write_kubeconfig(self, path: str | os.PathLike[str], token: str | None = None,
                         namespace: str = "default") -> Path:
        """Write a kubeconfig for ``token`` (default admin) atomically (0600); its path."""
        target = Path(path)
        data = yaml.safe_dump(self.kubeconfig_dict(token, namespace), sort_keys=False)
        atomic_write(target, data.encode(), mode=0o600)
        return target

    def kubeconfig(self, token: str | None = None) -> Path:
        """A kubeconfig file in the workdir for ``token`` (default: the admin token)."""
        if token not in self._kubeconfigs:
            path = self.workdir / "kubeconfigs" / f"{uuid.uuid4().hex[:12]}.yaml"
            path.parent.mkdir(exist_ok=True)
            self._kubeconfigs[token] = self.write_kubeconfig(path, token)
        return self._kubeconfigs[token]

    def api_client(self, token: str | None = None) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` for ``token`` (default admin), verifying the CA."""
        from kubernetes import client

        configuration = client.Configuration(host=self.url)
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"BearerToken": token or self.admin_token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(configuration)

    def kubectl(self, *args: str, token: str | None = None, input: str | None = None,
                check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig <token's kubeconfig> ARGS``; raises RealClusterError on a
        non-zero exit when ``check`` (with its stderr)."""
        binary = self.bin_dir / "kubectl"
        if not os.access(binary, os.X_OK):
            raise RealClusterError(f"kubectl not found in {self.bin_dir}")
        r = subprocess.run([str(binary), "--kubeconfig", str(self.kubeconfig(token)), *args],
                           input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RealClusterError(f"kubectl {' '.join(args)} failed ({r.returncode}): "
                                   f"{r.stderr.strip()}")
        return r

    # ------------------------------------------------------------------ raw REST

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None,
                content_type: str = "application/json",
                query: Mapping[str, str] | None = None) -> Any:
        """One HTTPS call as ``token`` (default admin); the decoded JSON answer. Raises
        :class:`ApiError` with the server's code, reason and message on a non-2xx answer."""
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._ssl) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                status = json.loads(raw)
            except ValueError:
                status = {"message": raw.decode(errors="replace")}
            raise ApiError(e.code, status.get("reason", ""), status.get("message", ""),
                           status.get("details") or {}) from None
        return json.loads(raw) if raw else None

    def request_text(self, path: str, *, token: str | None = None) -> str:
        """GET a non-JSON path (``/metrics``, ``/readyz?verbose``) as ``token`` (default
        admin); the body as text. Raises :class:`ApiError` on a non-2xx answer."""
        req = urllib.request.Request(self.url + path)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._ssl) as r:
                return str(r.read().decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, "", e.read().decode(errors="replace")) from None

    def _path(self, resource: str, namespace: str = "", name: str = "",
              version: str | None = None) -> str:
        if resource in _CORE:
            namespaced = _CORE[resource]
            base = "/api/v1"
        elif resource in _RESOURCE_K8S:
            namespaced = _RESOURCE_K8S[resource]
            base = f"/apis/resource.k8s.io/{version or self._helper_version}"
        else:
            raise ValueError(f"unknown resource {resource!r}; known: "
                             f"{', '.join(sorted([*_CORE, *_RESOURCE_K8S]))}")
        path = base
        if namespaced and namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{resource}"
        return path + (f"/{name}" if name else "")

    def _to_server(self, resource: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        v = self._helper_version
        if resource == "resourceslices":
            return slice_to_version(dict(obj), v)
        if resource in ("resourceclaims",):
            return claim_to_version(dict(obj), v)
        out = dict(obj)
        if resource in _CORE:
            out.setdefault("apiVersion", "v1")
            out.setdefault("kind", {"nodes": "Node", "namespaces": "Namespace", "pods": "Pod",
                                    "serviceaccounts": "ServiceAccount"}[resource])
        else:
            out.setdefault("apiVersion", f"resource.k8s.io/{v}")
            out.setdefault("kind", {"deviceclasses": "DeviceClass",
                                    "resourceclaimtemplates": "ResourceClaimTemplate"}[resource])
        return out

    def _from_server(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        v = self._helper_version
        if resource == "resourceslices":
            obj = slice_from_version(obj, v)
        elif resource == "resourceclaims":
            obj = claim_from_version(obj, v)
        return {k: val for k, val in obj.items() if k not in ("apiVersion", "kind")}

    # ------------------------------------------------------------------ helpers (admin)

    def create_object(self, resource: str, obj: Mapping[str, Any],
                      namespace: str = "") -> dict[str, Any]:
        """POST ``obj`` (v1 shape) as the admin; a given ``status`` is then written to the
        status subresource (nodes, resourceclaims). Returns the stored object (v1 shape)."""
        namespace = namespace or (obj.get("metadata") or {}).get("namespace", "")
        body = self._to_server(resource, {k: v for k, v in obj.items() if k != "status"})
        created = self._from_server(resource, self.request(
            "POST", self._path(resource, namespace), body))
        if obj.get("status") and resource in ("nodes", "resourceclaims", "pods"):
            created["status"] = obj["status"]
            created = self.update_object(resource, created, subresource="status")
        return created

    def get_object(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The object (v1 shape, no apiVersion/kind) or None when absent."""
        try:
            return self._from_server(resource, self.request(
                "GET", self._path(resource, namespace, name)))
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def list_objects(self, resource: str, namespace: str | None = None, *,
                     label_selector: str | None = None,
                     field_selector: str | None = None) -> list[dict[str, Any]]:
        """Objects sorted by namespace/name (v1 shape); selectors as the API takes them."""
        query = {k: v for k, v in (("labelSelector", label_selector),
                                   ("fieldSelector", field_selector)) if v}
        answer = self.request("GET", self._path(resource, namespace or ""), query=query)
        items = [self._from_server(resource, i) for i in answer.get("items") or []]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""),
                                            o["metadata"]["name"]))

    def update_object(self, resource: str, obj: Mapping[str, Any], *,
                      subresource: str = "") -> dict[str, Any]:
        """PUT ``obj`` (v1 shape); a set resourceVersion must be current (else 409)."""
        meta = obj.get("metadata") or {}
        path = self._path(resource, meta.get("namespace", ""), meta.get("name", ""))
        if subresource:
            path += f"/{subresource}"
        return self._from_server(resource, self.request(
            "PUT", path, self._to_server(resource, obj)))

    def delete_object(self, resource: str, name: str, namespace: str = "") -> bool:
        """DELETE (foreground-free, immediate for the kinds used here); False when absent."""
        try:
            self.request("DELETE", self._path(resource, namespace, name),
                         {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
            return True
        except ApiError as e:
            if e.code == 404:
                return False
            raise

    def apply(self, resource: str, obj: Mapping[str, Any], *, field_manager: str = "drakit-test",
              namespace: str = "", subresource: str = "", token: str | None = None) -> Any:
        """Server-side apply ``obj`` (server's JSON shape, apiVersion/kind set)."""
        namespace = namespace or (obj.get("metadata") or {}).get("namespace", "")
        path = self._path(resource, namespace, obj["metadata"]["name"])
        if subresource:
            path += f"/{subresource}"
        return self.request("PATCH", path, dict(obj), token=token,
                            content_type="application/apply-patch+yaml",
                            query={"fieldManager": field_manager, "force": "true"})

    def apply_manifests(self, docs: Iterable[Mapping[str, Any]], *,
                        field_manager: str = "drakit-test", dry_run: bool = False) -> None:
        """Server-side apply every manifest (kinds of :data:`_KIND_PATHS`: the ones deploy/
        uses) as the admin; ``dry_run`` sends ``dryRun=All``. kubectl is not needed."""
        for doc in docs:
            kind = doc.get("kind", "")
            if kind not in _KIND_PATHS:
                raise ValueError(f"apply_manifests: no path known for kind {kind!r} "
                                 f"(known: {', '.join(sorted(_KIND_PATHS))}); use kubectl")
            prefix, plural, namespaced = _KIND_PATHS[kind]
            meta = doc.get("metadata") or {}
            path = prefix
            if namespaced:
                path += f"/namespaces/{meta.get('namespace') or 'default'}"
            path += f"/{plural}/{meta['name']}"
            query = {"fieldManager": field_manager, "force": "true"}
            if dry_run:
                query["dryRun"] = "All"
            self.request("PATCH", path, dict(doc), content_type="application/apply-patch+yaml",
                         query=query)

    def reset(self, namespaces: Sequence[str] = ("default",)) -> None:
        """Delete every ResourceSlice and the ResourceClaims of ``namespaces`` (as the
        admin), so a test written for a fresh embedded server (node-1, claim c1) can run on
        this shared one. Nodes, RBAC, policies and DeviceClasses stay."""
        base = f"/apis/resource.k8s.io/{self._helper_version}"
        self.request("DELETE", f"{base}/resourceslices")
        for namespace in namespaces:
            self.request("DELETE", f"{base}/namespaces/{namespace}/resourceclaims")

    def create_node(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A Node, Ready and without taints (so the scheduler binds pods to it): the
        ``node.kubernetes.io/not-ready`` taint admission puts on a new Node is removed."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node = {
            "metadata": {"name": name,
                         "labels": {"kubernetes.io/hostname": name,
                                    "kubernetes.io/os": "linux", **(labels or {})}},
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            },
        }
        created = self.create_object("nodes", node)
        if created.get("spec", {}).get("taints"):
            # admission (TaintNodesByCondition) adds node.kubernetes.io/not-ready; only the
            # node-lifecycle controller, not running here, would take it off again
            created["spec"]["taints"] = []
            created = self.update_object("nodes", created)
        return created

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create the namespace unless it exists (labels are merged in when given), with its
        ``default`` ServiceAccount (no controller-manager makes it here; pods need it)."""
        existing = self.get_object("namespaces", name)
        if existing is None:
            self.create_object("namespaces", {"metadata": {"name": name,
                                                           "labels": dict(labels or {})}})
        elif labels:
            self.request("PATCH", f"/api/v1/namespaces/{name}",
                         {"metadata": {"labels": dict(labels)}},
                         content_type="application/merge-patch+json")
        if self.get_object("serviceaccounts", "default", name) is None:
            with contextlib.suppress(ApiError):  # 409: made meanwhile
                self.create_object("serviceaccounts", {"metadata": {"name": "default",
                                                                    "namespace": name}})

    def create_claim(
        self, namespace: str, name: str,
        devices: Sequence[AllocatedDevice | Mapping[str, Any]] = (), *,
        uid: str | None = None, node_name: str | None = None,
        device_class_name: str = "drakit.example.com",
        config: Sequence[Mapping[str, Any]] | None = None,
        reserved_for: Sequence[Mapping[str, Any]] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a ResourceClaim allocated to ``devices``, as the embedded server's
        ``create_claim`` does (same arguments; the allocation is written to the status
        subresource as the admin). The real server picks the UID, so ``uid`` must be None.
        With an ``admin_access`` device the namespace gets the label DRAAdminAccess asks
        for (:data:`ADMIN_ACCESS_LABEL`)."""
        if uid is not None:
            raise ValueError("the real API server assigns metadata.uid; pass uid=None")
        admin = any(isinstance(d, AllocatedDevice) and d.admin_access for d in devices)
        # DRAAdminAccess: only namespaces labelled so may hold adminAccess requests
        self.ensure_namespace(namespace, ADMIN_ACCESS_LABEL if admin else None)
        results = [d.to_result() if isinstance(d, AllocatedDevice) else dict(d)
                   for d in devices]
        counts: dict[str, int] = {}
        for result in results:
            counts[result["request"]] = counts.get(result["request"], 0) + 1
        requests: dict[str, dict[str, Any]] = {}
        for request_name, count in counts.items():
            base, _, sub = request_name.partition("/")
            exact = {"deviceClassName": device_class_name, "allocationMode": "ExactCount",
                     "count": count}
            if any(r.get("adminAccess") for r in results if r["request"] == request_name):
                exact["adminAccess"] = True
            if sub:
                entry = requests.setdefault(base, {"name": base, "firstAvailable": []})
                entry["firstAvailable"].append({"name": sub, **exact})
            else:
                requests[base] = {"name": base, "exactly": exact}
        if not requests:
            requests["req-0"] = {"name": "req-0", "exactly": {
                "deviceClassName": device_class_name, "allocationMode": "ExactCount",
                "count": 1}}
        claim: dict[str, Any] = {
            "metadata": {"name": name, "namespace": namespace,
                         **({"labels": dict(labels)} if labels else {})},
            "spec": {"devices": {"requests": list(requests.values())}},
        }
        if results:
            allocation: dict[str, Any] = {"devices": {"results": results}}
            if config:
                allocation["devices"]["config"] = [dict(c) for c in config]
            if node_name:
                allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
            pods = reserved_for if reserved_for is not None else [
                {"resource": "pods", "name": f"{name}-pod", "uid": str(uuid.uuid4())}]
            claim["status"] = {"allocation": allocation}
            if pods:
                claim["status"]["reservedFor"] = [dict(p) for p in pods]
        return self.create_object("resourceclaims", claim)

    # ------------------------------------------------------------------ identities

    def node_agent_token(
        self, node_name: str, *, namespace: str = "drakit",
        service_account: str = "drakit-kubelet-plugin", pod_name: str | None = None,
        expiration_seconds: int = 3600,
    ) -> str:
        """A ServiceAccount token bound to a Pod with ``spec.nodeName: node_name``, so it
        carries ``authentication.kubernetes.io/node-name`` like a node agent's projected
        token. Creates the namespace, the ServiceAccount (deploy/'s names by default), the
        Node (when absent) and the Pod (never run: no kubelet). Rights come from RBAC the
        caller applies (e.g. deploy/kustomize/base)."""
        self.ensure_namespace(namespace)
        if self.get_object("serviceaccounts", service_account, namespace) is None:
            self.create_object("serviceaccounts", {"metadata": {
                "name": service_account, "namespace": namespace}})
        if self.get_object("nodes", node_name) is None:
            self.create_node(node_name)
        pod_name = pod_name or f"{service_account}-{node_name}"[:63].rstrip("-.")
        pod = self.get_object("pods", pod_name, namespace)
        if pod is None:
            pod = self.create_object("pods", {
                "metadata": {"name": pod_name, "namespace": namespace},
                "spec": {"nodeName": node_name, "serviceAccountName": service_account,
                         "automountServiceAccountToken": False,
                         "containers": [{"name": "agent", "image": "drakit.invalid/agent"}]},
            })
        answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": expiration_seconds,
                      "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod_name,
                                         "uid": pod["metadata"]["uid"]}}})
        return str(answer["status"]["token"])

    def whoami(self, token: str) -> dict[str, Any]:
        """The user info the server sees for ``token`` (SelfSubjectReview)."""
        answer = self.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                              {"apiVersion": "authentication.k8s.io/v1",
                               "kind": "SelfSubjectReview"}, token=token)
        return dict(answer["status"]["userInfo"])

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

    # ------------------------------------------------------------------ audit log

    def audit_records(self, timeout: float = 5.0) -> list[RequestRecord]:
        """Every request since the last :meth:`clear_requests`, oldest first (audit stage
        ResponseComplete). The server logs a request just after answering it, so this first
        sends a marker request and reads until the marker is logged (at most ``timeout``
        seconds); the marker itself is left out."""
        marker = f"/version?drakit-audit-marker={uuid.uuid4().hex}"
        self.request("GET", marker)
        deadline = time.monotonic() + timeout
        while True:
            out: list[RequestRecord] = []
            seen = False
            with contextlib.suppress(FileNotFoundError), \
                    open(self.workdir / "audit.log", "rb") as f:
                f.seek(self._audit_offset)
                for line in f:
                    if not line.endswith(b"\n"):
                        break
                    with contextlib.suppress(ValueError):
                        record = record_from_audit_event(json.loads(line))
                        if "drakit-audit-marker=" in record.path:
                            seen = seen or record.path == marker
                            continue
                        out.append(record)
            if seen or time.monotonic() >= deadline:
                return out
            time.sleep(0.02)

    def clear_requests(self) -> None:
        """Forget the requests logged so far (only later ones are returned)."""
        with contextlib.suppress(FileNotFoundError):
            self._audit_offset = (self.workdir / "audit.log").stat().st_size

    def requests(self, *, verb: str | None = None, resource: str | None = None,
                 user: str | None = None) -> list[RequestRecord]:
        """Logged requests, optionally of one RBAC ``verb``, ``resource`` (``resourceclaims``
        matches its subresources too, ``resourceclaims/status`` only that) and ``user``."""
        return [r for r in self.audit_records()
                if (verb is None or r.verb == verb)
                and (resource is None or resource in (r.resource, r.full_resource))
                and (user is None or r.user == user)]

    def write_counts(self, *, successful_only: bool = True,
                     user: str | None = None) -> Counter[str]:
        """Write requests per resource (``{"resourceslices": 2, ...}``), optionally of one
        user, as the embedded server's ``write_counts``."""
        return Counter(r.full_resource for r in self.requests(user=user)
                       if r.is_write
                       and (not successful_only or 200 <= r.status_code < 300))


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
