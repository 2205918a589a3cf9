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
    (:mod:`drakit.plugin.testing.apiserver.convert`: v1beta1 ``basic`` device wrapper, v1beta1
    flat device requests).
Discovery
    ``GET /api``, ``/api/v1``, ``/apis``, ``/apis/resource.k8s.io``,
    ``/apis/resource.k8s.io/{version}`` (APIResourceList), ``/version`` (1.37 unless
    ``kubernetes_minor`` is given; ``kubernetes_minor`` ≤ 34 also validates ResourceSlices
    by that era's counter set rule: sets beside the devices that consume them),
    ``/openapi/v2`` and ``/openapi/v3[/api/v1|/apis/resource.k8s.io/{version}]`` (the
    Kubernetes 1.37 schemas, or 1.36's with ``kubernetes_minor=36``; none for a
    v1beta-only server or ``kubernetes_minor`` < 36; :mod:`drakit.plugin.testing.apiserver.schema`),
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
    (:mod:`drakit.plugin.testing.apiserver.apply`; claim ``status.devices`` is a list-map keyed
    by driver, pool, device, shareID); delete (DeleteOptions preconditions); deletecollection
    (with selectors); ``dryRun=All`` on writes.
Metadata
    ``uid``, ``resourceVersion`` (one global counter, decimal string), ``generation``
    (ResourceSlices, DeviceClasses and Pods, not ResourceClaims or Nodes, as in 1.37; rises
    on spec changes), ``creationTimestamp``; empty labels, annotations, finalizers and
    ownerReferences are not stored. No ``managedFields`` in answers. A write that changes
    nothing keeps the resourceVersion.
Defaults
    a ResourceSlice taint's ``timeAdded``; a ResourceClaim request's (and firstAvailable
    subrequest's) ``allocationMode`` ExactCount and ``count`` 1, a toleration's
    ``operator`` Equal (resource.k8s.io/v1 defaults).
Status subresource
    PUT/PATCH (every patch type, server-side apply too) on ``.../status`` change only
    ``status`` (on nodes and pods also labels and annotations, as their status strategies
    allow); writes to the object keep the stored status; creating a ResourceClaim drops
    its status.
Pods
    stored as given, no defaulting; an update follows ValidatePodUpdate's rules (only
    images, a lower activeDeadlineSeconds, added tolerations may change:
    :mod:`drakit.plugin.testing.apiserver.podrules`); a delete sets ``deletionTimestamp``
    first (a MODIFIED event), then removes the pod at once.
Errors
    Kubernetes ``Status`` objects: 400 BadRequest, 404 NotFound, 405 MethodNotAllowed,
    409 AlreadyExists / Conflict, 410 Expired, 415 UnsupportedMediaType, 422 Invalid
    (``details.causes[].field`` paths as the real server writes them), 429
    TooManyRequests (``Retry-After``), 500 InternalError.
Validation (:mod:`drakit.plugin.testing.apiserver.validation`, deliberately modest)
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

import random
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from drakit.cdi.atomic import atomic_write
from drakit.plugin.testing.apiserver.access import InProcessAccess
from drakit.plugin.testing.apiserver.claims import AllocatedDevice
from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.apiserver.faults import FaultInjector, FaultPlan
from drakit.plugin.testing.apiserver.http.routes import ServerContext
from drakit.plugin.testing.apiserver.http.server import EmbeddedHTTPServer
from drakit.plugin.testing.apiserver.registry import Registry
from drakit.plugin.testing.apiserver.requestlog import RequestLog, RequestRecord
from drakit.plugin.testing.apiserver.resources import RESOURCE_VERSIONS
from drakit.plugin.testing.apiserver.schema import schema_version_for
from drakit.plugin.testing.apiserver.store import Store

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "AllocatedDevice",
    "ApiError",
    "EmbeddedAPIServer",
    "FaultPlan",
    "RequestRecord",
]

DEFAULT_TOKEN = "drakit-embedded-token"
KUBECONFIG_NAME = "drakit-embedded"


class EmbeddedAPIServer:
    """The embedded API server. ``served_versions`` are resource.k8s.io versions (subset of
    v1, v1beta2, v1beta1; the first is the preferred one). ``port=0`` picks a free port
    (kept across stop()/start()). ``seed`` makes generated names reproducible.

    It runs the HTTP server and holds the faults and the request log; it *has* the
    in-process helpers (:attr:`objects`, an
    :class:`~drakit.plugin.testing.apiserver.access.InProcessAccess`; its methods are this
    server's too: ``create_node``, ``create_claim``, ``create_object``, ``get_object``,
    ``list_objects``, ``update_object``, ``delete_object``, ``field_managers``),
    the CLI in :mod:`drakit.plugin.testing.apiserver.cli`.
    """

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
        self._registry = Registry(
            self._store, random.Random(seed), schema_version_for(versions, kubernetes_minor),
            counter_sets_beside_devices=kubernetes_minor is not None and kubernetes_minor <= 34)
        self.objects = InProcessAccess(self._store, self._registry)
        objects = self.objects
        self.create_object = objects.create_object
        self.get_object = objects.get_object
        self.list_objects = objects.list_objects
        self.update_object = objects.update_object
        self.delete_object = objects.delete_object
        self.field_managers = objects.field_managers
        self.create_node = objects.create_node
        self.create_claim = objects.create_claim
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
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        return self.objects.resource_version

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
