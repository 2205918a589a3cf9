"""An embedded Kubernetes API server for drakit's tests and for vendors' driver tests.

A small HTTP server (stdlib ``ThreadingHTTPServer``, plain http, JSON) that speaks the
real Kubernetes REST paths and object JSON, so the unchanged ``kubernetes`` Python client
works against it through the kubeconfig it writes. It is a test double: it implements
what a DRA kubelet plugin uses, with the API server's observable behaviour, and no
authentication, authorization, admission or namespaces lifecycle.

Supported surface
-----------------
Resources
    core ``nodes`` (``/api/v1/nodes``, ``status`` subresource); ``resource.k8s.io``
    ``resourceslices`` and ``deviceclasses`` (cluster-scoped) and ``resourceclaims``
    (namespaced, ``status`` subresource), in the resource.k8s.io versions the server is
    told to serve (``served_versions``, default ``("v1",)``; ``("v1beta1",)`` looks like
    Kubernetes 1.32, ``("v1beta2", "v1beta1")`` like 1.33). Unserved versions answer 404.
    Objects are stored in the v1 shape and converted at the boundary
    (:mod:`drakit.plugin.testing.apiserver_convert`: v1beta1 ``basic`` device wrapper, v1beta1
    flat device requests).
Discovery
    ``GET /api``, ``/api/v1``, ``/apis``, ``/apis/resource.k8s.io``,
    ``/apis/resource.k8s.io/{version}`` (APIResourceList), ``/version`` (minor 34/33/32
    following the newest served version unless ``kubernetes_minor`` is given),
    ``/openapi/v2`` and ``/openapi/v3[/api/v1|/apis/resource.k8s.io/{version}]`` (the
    Kubernetes 1.37 schemas, or 1.36's with ``kubernetes_minor=36``; none for a
    v1beta-only server or ``kubernetes_minor`` < 36; :mod:`drakit.plugin.testing.apiserver_schema`),
    nothing else (no /healthz).
Decoding (like kube-apiserver's into its Go types, same schemas)
    unknown fields dropped with a ``Warning: 299`` header (``?fieldValidation=Strict``:
    400), malformed quantities 400, quantities rendered canonically, taints'
    ``timeAdded`` defaulted; bodies other than JSON/YAML (protobuf) 415.
Verbs
    get; list with ``fieldSelector`` (``metadata.name``, ``metadata.namespace`` for
    claims, ``spec.nodeName`` and ``spec.driver`` for ResourceSlices, ``spec.unschedulable``
    for nodes; others are a 400), ``labelSelector`` (equality and set based), ``limit`` /
    ``continue``; watch (``?watch=true`` on list paths or ``/watch/`` paths; chunked
    newline-delimited ``{"type": ADDED|MODIFIED|DELETED, "object": ...}`` events; without
    ``resourceVersion`` (or ``0``) it starts with ADDED events for existing objects,
    with ``resourceVersion=N`` it replays what happened after N (410 Expired if that
    history is gone); objects moving in/out of a selector appear as ADDED/DELETED;
    ``timeoutSeconds`` ends the stream; ``sendInitialEvents`` with
    ``allowWatchBookmarks`` ends the initial events with the KEP-3157 BOOKMARK); create
    (``metadata.generateName`` supported); update (PUT; 409 Conflict on a stale
    ``resourceVersion``); patch:
    ``application/merge-patch+json``, ``application/json-patch+json``,
    ``application/strategic-merge-patch+json`` (treated as a merge patch) and server-side
    apply ``application/apply-patch+yaml`` with ``fieldManager`` and ``force``
    (:mod:`drakit.plugin.testing.apiserver_apply`; claim ``status.devices`` is a list-map keyed
    by driver, pool, device, shareID); delete (DeleteOptions preconditions); deletecollection
    (with selectors); ``dryRun=All`` on writes.
Metadata
    ``uid``, ``resourceVersion`` (one global counter, decimal string), ``generation``
    (resource.k8s.io kinds; rises on spec changes), ``creationTimestamp``. No
    ``managedFields`` in answers. A write that changes nothing keeps the resourceVersion.
Status subresource
    PUT/PATCH on ``.../status`` change only ``status``; writes to the object keep the
    stored status; creating a ResourceClaim drops its status.
Errors
    Kubernetes ``Status`` objects: 400 BadRequest, 404 NotFound, 405 MethodNotAllowed,
    409 AlreadyExists / Conflict, 410 Expired, 415 UnsupportedMediaType, 422 Invalid
    (``details.causes[].field`` paths as the real server writes them), 429
    TooManyRequests (``Retry-After``), 500 InternalError.
Validation (:mod:`drakit.plugin.testing.apiserver_validate`, deliberately modest)
    object names; ResourceSlice driver, pool (name, generation, resourceSliceCount),
    exactly one node selection field, ≤128 devices (≤64 with taints, counters or list
    attributes), device names (DNS labels, unique), attribute union and value length,
    ≤16 taints, immutable driver/pool name/nodeName; claim ``status.devices`` (allocated
    device, unique, ≤8 valid conditions, data a JSON object ≤10 KiB, networkData limits,
    canonical CIDR ips) and immutable ``status.allocation``; stale device status entries
    are dropped when the allocation changes.
Fault injection (:class:`FaultPlan`)
    500s, 409s on writes, 429 with Retry-After, latency, dropped connections; seeded,
    filterable by verb and resource, changeable at runtime (:meth:`set_faults`).
Request log (:class:`RequestRecord`)
    every request with its RBAC verb, resource, subresource, namespace, name, API group
    and version, user agent, status code; :meth:`requests`, :meth:`clear_requests`,
    :meth:`write_counts`.

Notes on the kubernetes client (v37) seen against this server: ``watch.Watch`` cannot
infer the v1 ResourceClaim model from ``ResourceV1Api.list_*_resource_claim*`` (pass
``Watch(return_type=kubernetes.client.ResourceV1ResourceClaim)``); a server-side apply that
creates the object is answered 201, which the generated ``patch_*`` methods return as None;
urllib3's default retry honours ``Retry-After`` on 429 for GET/PUT/DELETE, not POST/PATCH.

In-process helpers (``create_node``, ``create_claim``, ``create_object``, ``get_object``,
``list_objects``, ``update_object``, ``delete_object``) work on the store directly in the
v1 shape; they are neither logged nor subject to faults, but they do produce watch events.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from drakit.cdi.atomic import atomic_write

from . import apiserver_errors as errors
from .apiserver_apply import render_path
from .apiserver_errors import ApiError
from .apiserver_faults import FaultInjector, FaultPlan
from .apiserver_http import EmbeddedHTTPServer, ServerContext
from .apiserver_json import clone
from .apiserver_log import RequestLog, RequestRecord
from .apiserver_registry import Registry
from .apiserver_resources import ALL_RESOURCES, RESOURCE_CLAIMS, RESOURCE_VERSIONS, ResourceInfo
from .apiserver_schema import schema_version_for
from .apiserver_selectors import parse_field_selector, parse_label_selector
from .apiserver_store import Store
from .apiserver_validate import validate_claim_status

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "AllocatedDevice",
    "ApiError",
    "EmbeddedAPIServer",
    "FaultPlan",
    "RequestRecord",
    "apiserver_main",
]

DEFAULT_TOKEN = "drakit-embedded-token"
KUBECONFIG_NAME = "drakit-embedded"


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of a claim (DeviceRequestAllocationResult): ``request`` is
    the request name (``req`` or ``req/subrequest``), ``share_id`` a lowercase UUID for
    devices that allow multiple allocations."""

    driver: str
    pool: str
    device: str
    request: str = "req-0"
    share_id: str | None = None
    admin_access: bool | None = None

    def to_result(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.share_id is not None:
            result["shareID"] = self.share_id
        if self.admin_access is not None:
            result["adminAccess"] = self.admin_access
        return result


def _resource(resource: str) -> ResourceInfo:
    try:
        return ALL_RESOURCES[resource]
    except KeyError:
        raise ValueError(
            f"unknown resource {resource!r}; known: {', '.join(sorted(ALL_RESOURCES))}"
        ) from None


class EmbeddedAPIServer:
    """The embedded API server. ``served_versions`` are resource.k8s.io versions (subset of
    v1, v1beta2, v1beta1; the first is the preferred one). ``port=0`` picks a free port
    (kept across stop()/start()). ``seed`` makes generated names reproducible."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        served_versions: Sequence[str] = ("v1",),
        *,
        kubernetes_minor: int | None = None,
        seed: int = 0,
        token: str = DEFAULT_TOKEN,
    ) -> None:
        versions = tuple(served_versions)
        unknown = [v for v in versions if v not in RESOURCE_VERSIONS]
        if not versions or unknown:
            raise ValueError(
                f"served_versions must be a non-empty subset of {RESOURCE_VERSIONS}, got "
                f"{versions!r}"
            )
        self.host = host
        self._port = port
        self.served_versions = versions
        self.token = token
        self._store = Store()
        self._registry = Registry(self._store, random.Random(seed),
                                  schema_version_for(versions, kubernetes_minor))
        self._faults = FaultInjector()
        self._log = RequestLog()
        self._kubernetes_minor = kubernetes_minor
        self._http: EmbeddedHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> EmbeddedAPIServer:
        """Listen and serve in a background thread; returns self."""
        if self._http is not None:
            return self
        self._stopping.clear()
        self._store.reopen()
        ctx = ServerContext(
            registry=self._registry,
            faults=self._faults,
            log=self._log,
            served_versions=self.served_versions,
            kubernetes_minor=self._kubernetes_minor,
            address=f"{self.host}:{self._port}",
            stopping=self._stopping,
        )
        self._http = EmbeddedHTTPServer((self.host, self._port), ctx)
        self._port = self._http.server_address[1]
        ctx.address = f"{self.host}:{self._port}"
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"drakit-apiserver-{self._port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: ends watches, closes open connections, releases the port."""
        http = self._http
        if http is None:
            return
        self._stopping.set()
        self._store.close()
        http.shutdown()
        http.close_connections()
        http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._http = None
        self._thread = None

    def __enter__(self) -> EmbeddedAPIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (brackets around an IPv6 host)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    # ------------------------------------------------------------------ clients

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        """The kubeconfig document (plain http, a bearer token the server ignores)."""
        name = KUBECONFIG_NAME
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": self.url,
                                                    "insecure-skip-tls-verify": True}}],
            "users": [{"name": name, "user": {"token": self.token}}],
            "contexts": [
                {"name": name, "context": {"cluster": name, "user": name,
                                           "namespace": namespace}}
            ],
            "current-context": name,
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """Write the kubeconfig atomically (mode 0600) and return its path."""
        target = Path(path)
        data = yaml.safe_dump(self.kubeconfig(namespace), sort_keys=False).encode("utf-8")
        atomic_write(target, data, mode=0o600)
        return target

    def api_client(self) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` for this server (own Configuration; the
        client library's global default configuration is not touched)."""
        from kubernetes import client

        configuration = client.Configuration(host=self.url)
        configuration.api_key = {"BearerToken": self.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(configuration)

    # ------------------------------------------------------------------ faults and log

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Install a fault plan (None turns faults off); takes effect for the next request."""
        self._faults.set_plan(plan)

    @property
    def faults(self) -> FaultPlan | None:
        return self._faults.plan

    @property
    def faults_injected(self) -> int:
        """Faults injected since the current plan was set."""
        return self._faults.injected

    def requests(
        self, *, verb: str | None = None, resource: str | None = None
    ) -> list[RequestRecord]:
        """Recorded requests, oldest first; optionally only one RBAC ``verb`` and/or one
        ``resource``: ``resourceclaims`` matches the object and its subresources,
        ``resourceclaims/status`` only the status subresource."""
        return [
            r for r in self._log.records()
            if (verb is None or r.verb == verb)
            and (resource is None or resource in (r.resource, r.full_resource))
        ]

    def clear_requests(self) -> None:
        self._log.clear()

    def write_counts(self, *, successful_only: bool = True) -> Counter[str]:
        """Write requests (create/update/patch/delete/deletecollection) per resource, e.g.
        ``{"resourceslices": 2, "resourceclaims/status": 1}``."""
        return self._log.write_counts(successful_only=successful_only)

    # ------------------------------------------------------------------ in-process access

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        return str(self._store.resource_version)

    def create_object(
        self, resource: str, obj: Mapping[str, Any], namespace: str = ""
    ) -> dict[str, Any]:
        """Create ``obj`` (v1 shape) as a POST would; a given ``status`` is then written
        as a status update would. Raises :class:`ApiError` like the API would answer."""
        info = _resource(resource)
        namespace = namespace or (obj.get("metadata") or {}).get("namespace", "")
        created = self._registry.create(info, namespace, "v1", clone(dict(obj)),
                                        dry_run=False)
        if info.has_status and obj.get("status") and "status" not in created:
            body = {**created, "status": clone(obj["status"])}
            created = self._registry.update(
                info, namespace, created["metadata"]["name"], "v1", body,
                subresource="status", dry_run=False,
            )
        return created

    def get_object(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The stored object (v1 shape, no apiVersion/kind) or None."""
        info = _resource(resource)
        return self._store.get(self._registry.key(info, namespace, name))

    def list_objects(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Stored objects sorted by namespace/name; selectors as the API takes them."""
        info = _resource(resource)
        fields = parse_field_selector(field_selector, info.field_labels)
        labels = parse_label_selector(label_selector)
        items, _ = self._store.select(info.plural, namespace, lambda o: fields(o) and labels(o))
        return items

    def update_object(
        self, resource: str, obj: Mapping[str, Any], *, subresource: str = ""
    ) -> dict[str, Any]:
        """PUT ``obj`` (v1 shape); a set resourceVersion must be current (else ApiError 409)."""
        info = _resource(resource)
        meta = obj.get("metadata") or {}
        return self._registry.update(
            info, meta.get("namespace", ""), meta.get("name", ""), "v1",
            clone(dict(obj)), subresource=subresource, dry_run=False,
        )

    def delete_object(self, resource: str, name: str, namespace: str = "") -> bool:
        """Delete; False when it did not exist."""
        info = _resource(resource)
        return self._store.remove(self._registry.key(info, namespace, name)) is not None

    def field_managers(
        self, resource: str, name: str, namespace: str = ""
    ) -> dict[str, list[str]]:
        """Server-side apply ownership: ``{"manager" or "manager/status": [field paths]}``."""
        info = _resource(resource)
        owners = self._store.owners(self._registry.key(info, namespace, name))
        return {
            (manager + (f"/{sub}" if sub else "")): sorted(render_path(p) for p in paths)
            for (manager, sub), paths in owners.items()
        }

    def create_node(
        self, name: str, labels: Mapping[str, str] | None = None,
        declared_features: Sequence[str] = ("DRANodeAllocatableResources",),
    ) -> dict[str, Any]:
        """Create a Node (Ready, with a hostname label) and return it.
        ``declared_features`` go to ``status.declaredFeatures`` (what a kubelet 1.37 with
        the DRA gates on reports; slices with nodeAllocatableResources need
        ``DRANodeAllocatableResources`` there)."""
        node: dict[str, Any] = {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                        "lastTransitionTime": "2025-01-01T00:00:00Z",
                    }
                ],
            },
        }
        if declared_features:
            node["status"]["declaredFeatures"] = list(declared_features)
        return self.create_object("nodes", node)

    def create_claim(
        self,
        namespace: str,
        name: str,
        devices: Sequence[AllocatedDevice | Mapping[str, Any]] = (),
        *,
        uid: str | None = None,
        node_name: str | None = None,
        device_class_name: str = "drakit.example.com",
        config: Sequence[Mapping[str, Any]] | None = None,
        reserved_for: Sequence[Mapping[str, Any]] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a ResourceClaim (v1) allocated to ``devices``.

        One request per distinct request name (``req/sub`` becomes a ``firstAvailable``
        subrequest); ``status.allocation.devices.results`` lists the devices,
        ``allocation.config`` the given opaque configs (``{"source": "FromClaim",
        "requests": [...], "opaque": {"driver": ..., "parameters": {...}}}``),
        ``allocation.nodeSelector`` selects ``node_name``; ``reservedFor`` defaults to one
        pod. With no devices the claim is created unallocated. Returns the stored claim.
        """
        results = [
            d.to_result() if isinstance(d, AllocatedDevice) else clone(dict(d))
            for d in devices
        ]
        counts: dict[str, int] = {}
        for result in results:
            counts[result["request"]] = counts.get(result["request"], 0) + 1
        requests: dict[str, dict[str, Any]] = {}
        for request_name, count in counts.items():
            base, _, sub = request_name.partition("/")
            exact = {"deviceClassName": device_class_name, "allocationMode": "ExactCount",
                     "count": count}
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
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid or str(uuid.uuid4()),
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "generation": 1,
                **({"labels": dict(labels)} if labels else {}),
            },
            "spec": {"devices": {"requests": list(requests.values())}},
        }
        if results:
            allocation: dict[str, Any] = {"devices": {"results": results}}
            if config:
                allocation["devices"]["config"] = [clone(dict(c)) for c in config]
            if node_name:
                allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
            pods = reserved_for if reserved_for is not None else [
                {"resource": "pods", "name": f"{name}-pod", "uid": str(uuid.uuid4())}]
            claim["status"] = {"allocation": allocation}
            if pods:
                claim["status"]["reservedFor"] = [clone(dict(p)) for p in pods]
        causes = validate_claim_status(claim, None)
        if causes:
            raise errors.invalid_object("ResourceClaim", RESOURCE_CLAIMS.group, name, causes)
        key = self._registry.key(RESOURCE_CLAIMS, namespace, name)
        with self._store.locked():
            if self._store.get(key) is not None:
                raise errors.already_exists(RESOURCE_CLAIMS.plural, RESOURCE_CLAIMS.group, name)
            return self._store.put(key, claim)


# ---------------------------------------------------------------------- CLI


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="drakit apiserver",
        description="Run drakit's embedded Kubernetes API server in the foreground.",
        allow_abbrev=False,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free port)")
    parser.add_argument("--kubeconfig-out", metavar="FILE",
                        help="write a kubeconfig for this server to FILE")
    parser.add_argument("--served-versions", default="v1",
                        help="comma-separated resource.k8s.io versions to serve "
                             "(v1, v1beta2, v1beta1); the first is preferred")
    return parser.parse_args(argv)


def apiserver_main(argv: Sequence[str] | None = None, *, ready: threading.Event | None = None,
                   stop: threading.Event | None = None) -> int:
    """``drakit apiserver [--port N] [--kubeconfig-out FILE] [--served-versions v1,...]``.

    Runs until SIGTERM/SIGINT (or ``stop`` is set, for callers not on the main thread),
    printing where it listens. Returns the exit code (0; 2 for bad arguments)."""
    args = _parse_args(argv)
    versions = [v.strip() for v in args.served_versions.split(",") if v.strip()]
    try:
        server = EmbeddedAPIServer(args.host, args.port, versions)
    except ValueError as exc:
        print(f"drakit apiserver: {exc}", file=sys.stderr)
        return 2
    stop_event = stop or threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: stop_event.set())
    try:
        with server:
            print(f"drakit apiserver listening on {server.url} "
                  f"(resource.k8s.io {', '.join(server.served_versions)})", flush=True)
            if args.kubeconfig_out:
                path = server.write_kubeconfig(args.kubeconfig_out)
                print(f"kubeconfig written to {path}", flush=True)
            if ready is not None:
                ready.set()
            while not stop_event.wait(0.5):
                pass
        print("drakit apiserver stopped", flush=True)
        return 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
