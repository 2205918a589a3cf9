"""One recorded sequence of API requests, and a raw HTTP client to send it to any server.

The sequence covers what a DRA node driver (and a user with kubectl) sends to
kube-apiserver: valid and invalid ResourceSlices (1.37 fields included), field selectors,
merge and server-side-apply patches, ResourceClaim status writes (also with a stale uid
after the claim was re-created), watches, content types and OpenAPI; and every verb on every
resource served (:func:`verb_steps`, :func:`more_verb_steps`). Each step records
what kube-apiserver 1.37.2 answered (code and reason, from runs against the real server)
and, for some, an observation of the answer
body (``timeAdded`` filled in, an unknown field dropped, the names a selector found).

``tests/apiserver/test_apiserver_parity.py`` requires the embedded server to give the
recorded answers; ``tests/real/test_real_differential.py`` sends the same sequence to both
servers and requires the same answers from each.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DRIVER = "diff.example.com"
NAMESPACE = "default"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
NODES = "/api/v1/nodes"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
JSON = "application/json"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"


@dataclass
class Answer:
    """What a server answered: HTTP code, Status reason (``""`` for success), message,
    the decoded body (None when not JSON), the Warning headers and the Status causes as
    ``(field, reason)`` pairs."""

    code: int
    reason: str
    message: str
    body: Any
    warnings: list[str]
    causes: list[tuple[str, str]] = field(default_factory=list)
    cause_messages: list[str] = field(default_factory=list)


class Client:
    """Raw HTTP(S) requests as one identity (bearer token); nothing is retried."""

    def __init__(self, url: str, token: str, ca_file: str | None = None) -> None:
        self.url = url
        self.token = token
        self._ssl = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def send(self, method: str, path: str, body: Any = None, *, content_type: str = JSON,
             query: dict[str, str] | None = None, accept: str = JSON,
             timeout: float = 30.0) -> Answer:
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else (
                body.encode() if isinstance(body, str) else json.dumps(body).encode())
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ssl) as r:
                code, raw, headers = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            code, raw, headers = e.code, e.read(), e.headers
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = _watch_events(raw)
        status = decoded if isinstance(decoded, dict) and decoded.get("kind") == "Status" \
            and code >= 400 else {}
        causes = (status.get("details") or {}).get("causes") or []
        return Answer(
            code, str(status.get("reason", "")), str(status.get("message", "")), decoded,
            headers.get_all("Warning") or [],
            sorted((c.get("field", ""), c.get("reason", "")) for c in causes),
            sorted(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes))


def _watch_events(raw: bytes) -> Any:
    """A watch answer (one JSON event per line) as a list of events; None if not that."""
    try:
        return [json.loads(line) for line in raw.splitlines() if line.strip()]
    except ValueError:
        return None


# ---------------------------------------------------------------------------- bodies


def slice_body(name: str, pool: str, devices: list[dict[str, Any]] | None = None,
               node: str = "diff-node", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices if devices is not None else [device("gpu-0")],
                     **spec}}


def device(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"model": {"string": "x100"}},
            "capacity": {"memory": {"value": "16Gi"}}, **fields}


def node_body(name: str, declared_features: list[str] | None = None) -> dict[str, Any]:
    """A Node; ``declared_features`` go to ``status.declaredFeatures`` (what a kubelet
    reports; the NodeDeclaredFeatures admission looks for DRANodeAllocatableResources there
    before it lets a slice give devices nodeAllocatableResources on that node)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    if declared_features is not None:
        body["status"] = {"declaredFeatures": declared_features}
    return body


def claim_body(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [
                {"name": "req-0", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}


def allocation(pool: str) -> dict[str, Any]:
    return {"devices": {"results": [
        {"request": "req-0", "driver": DRIVER, "pool": pool, "device": "gpu-0"}]}}


def condition(kind: str = "Ready") -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": "Prepared",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}


# ---------------------------------------------------------------------------- the sequence


@dataclass
class Step:
    """One request. ``expect`` is kube-apiserver 1.37.2's (code, reason); ``observe`` turns
    the answer into something both servers must agree on (or None)."""

    name: str
    method: str
    path: str
    body: Any = None
    content_type: str = JSON
    query: dict[str, str] | None = None
    expect: tuple[int, str] = (200, "")
    observe: Callable[[Answer], Any] | None = None
    accept: str = JSON


def _names(answer: Answer) -> list[str]:
    return sorted(i["metadata"]["name"] for i in (answer.body or {}).get("items") or [])


def _taint_stamped(answer: Answer) -> bool:
    taint = answer.body["spec"]["devices"][0]["taints"][0]
    return isinstance(taint.get("timeAdded"), str) and taint["timeAdded"].endswith("Z")


def _device_keys(answer: Answer) -> list[str]:
    return sorted(answer.body["spec"]["devices"][0])


def _capacity(answer: Answer) -> Any:
    return answer.body["spec"]["devices"][0]["capacity"]


def _spec_1_37(answer: Answer) -> Any:
    spec = answer.body["spec"]
    return {"partitionTypeAttribute": spec.get("partitionTypeAttribute"),
            "skipNodeOperations": spec.get("skipNodeOperations"),
            "devices": [{k: d.get(k) for k in ("attributes", "consumesCounters",
                                               "nodeAllocatableResources")}
                        for d in spec["devices"]]}


def _status_devices(answer: Answer) -> Any:
    return [(d["device"], [c["type"] for c in d.get("conditions") or []])
            for d in (answer.body.get("status") or {}).get("devices") or []]


def _watch(answer: Answer) -> Any:
    body = answer.body
    events = body if isinstance(body, list) else [body] if isinstance(body, dict) else []
    return [(e.get("type"), (e.get("object") or {}).get("metadata", {}).get("name"))
            for e in events]


def _has_resource_paths(answer: Answer) -> bool:
    return any(p.startswith("apis/resource.k8s.io/") for p in (answer.body or {})["paths"])


def _patch_has_field_validation(answer: Answer) -> bool:
    """What kubectl looks for before it leaves validation to the server."""
    for item in answer.body["paths"].values():
        op = item.get("patch") or {}
        gvk = op.get("x-kubernetes-group-version-kind") or {}
        if gvk.get("kind") == "ResourceClaim" and any(
                p.get("name") == "fieldValidation" for p in op.get("parameters") or []):
            return True
    return False


def _schema_knows_1_37(answer: Answer) -> Any:
    schemas = answer.body["components"]["schemas"]
    return (sorted(schemas["io.k8s.api.resource.v1.ResourceSliceSpec"]["properties"]),
            sorted(schemas["io.k8s.api.resource.v1.Device"]["properties"]))


_DISCOVERED = ("nodes", "nodes/status", "pods", "pods/status", "resourceslices",
               "deviceclasses", "resourceclaims", "resourceclaims/status")


def _discovered(answer: Answer) -> Any:
    """Of an APIResourceList, the resources the embedded server serves: name ->
    (namespaced, kind, verbs)."""
    return {r["name"]: (r.get("namespaced"), r.get("kind"), sorted(r.get("verbs") or []))
            for r in (answer.body or {}).get("resources") or [] if r["name"] in _DISCOVERED}


def _group_versions(answer: Answer) -> Any:
    """resource.k8s.io in the APIGroupList: v1 served, and preferred (which other versions
    are served is each server's configuration: the embedded one serves v1 here)."""
    for g in (answer.body or {}).get("groups") or []:
        if g.get("name") == "resource.k8s.io":
            return ("v1" in [v["version"] for v in g.get("versions") or []],
                    g.get("preferredVersion", {}).get("version"))
    return None


def sequence(prefix: str, state: dict[str, Any]) -> list[Step | Callable[[], Step]]:
    """The steps for one run; ``prefix`` keeps the names of concurrent runs apart and
    ``state`` carries what later steps need (uids, resourceVersions)."""
    pool = f"{prefix}-pool"
    other_pool = f"{prefix}-other"
    s = f"{prefix}-slice"
    claim = f"{prefix}-claim"
    fs_pool = {"fieldSelector": f"spec.pool.name={pool}"}
    rp_device = device("gpu-0", capacity={"memory": {"value": "16Gi", "requestPolicy": {
        "default": "1Gi", "validValues": ["1Gi", "2Gi"]}}})
    node = f"{prefix}-node"
    plain_node = f"{prefix}-plain-node"
    nar_device = device("gpu-0", nodeAllocatableResources={
        "memory": {"overhead": {"perPod": "64Mi"}}})
    return [
        Step("create node with the DRANodeAllocatableResources feature", "POST", NODES,
             node_body(node, ["DRANodeAllocatableResources"]), expect=(201, "")),
        Step("create node without declared features", "POST", NODES, node_body(plain_node),
             expect=(201, "")),
        # -- ResourceSlices: valid, defaulted, pruned ------------------------------------
        Step("create slice (taint without timeAdded)", "POST", SLICES, slice_body(
            s, pool, [device("gpu-0", taints=[{"key": "example.com/t", "effect": "NoSchedule"}]),
                      device("gpu-1")]),
             expect=(201, ""), observe=_taint_stamped),
        Step("create slice again", "POST", SLICES, slice_body(s, pool),
             expect=(409, "AlreadyExists")),
        Step("unknown device field dropped", "POST", SLICES, slice_body(
            f"{s}-unknown", other_pool, [device("gpu-0", bogus=1)]),
             expect=(201, ""), observe=_device_keys),
        Step("unknown field under fieldValidation=Strict", "POST", SLICES, slice_body(
            f"{s}-strict", other_pool, [device("gpu-0", bogus=1)]),
             query={"fieldValidation": "Strict"}, expect=(400, "BadRequest")),
        Step("quantities rendered canonically", "POST", SLICES, slice_body(
            f"{s}-quantity", other_pool, [device("gpu-0", capacity={
                "memory": {"value": "1024Mi"}, "cores": {"value": "0.5"}})]),
             expect=(201, ""), observe=_capacity),
        # -- ResourceSlices: rejected ----------------------------------------------------
        Step("capacity that is not a quantity", "POST", SLICES, slice_body(
            f"{s}-bad-q", other_pool, [device("gpu-0", capacity={"memory": {"value": "lots"}})]),
             expect=(400, "BadRequest")),
        Step("requestPolicy without allowMultipleAllocations", "POST", SLICES, slice_body(
            f"{s}-rp", other_pool, [rp_device]), expect=(422, "Invalid")),
        Step("requestPolicy default outside validValues", "POST", SLICES, slice_body(
            f"{s}-rp-default", other_pool, [{**rp_device, "allowMultipleAllocations": True,
                                             "capacity": {"memory": {
                                                 "value": "16Gi", "requestPolicy": {
                                                     "default": "3Gi",
                                                     "validValues": ["1Gi", "2Gi"]}}}}]),
             expect=(422, "Invalid")),
        Step("requestPolicy accepted with allowMultipleAllocations", "POST", SLICES, slice_body(
            f"{s}-rp-ok", other_pool, [{**rp_device, "allowMultipleAllocations": True}]),
             expect=(201, "")),
        Step("taint effect outside the enum", "POST", SLICES, slice_body(
            f"{s}-effect", other_pool, [device("gpu-0", taints=[
                {"key": "example.com/t", "effect": "PreferNoSchedule"}])]),
             expect=(422, "Invalid")),
        Step("version attribute 1.0", "POST", SLICES, slice_body(
            f"{s}-semver", other_pool, [device("gpu-0", attributes={
                "driverVersion": {"version": "1.0"}})]), expect=(422, "Invalid")),
        Step("too many devices", "POST", SLICES, slice_body(
            f"{s}-many", other_pool, [device(f"gpu-{i}") for i in range(129)]),
             expect=(422, "Invalid")),
        # -- Kubernetes 1.37 fields (gates on) --------------------------------------------
        Step("nodeAllocatableResources on a node that does not exist", "POST", SLICES,
             slice_body(f"{s}-nar-nonode", other_pool, [nar_device], node=f"{prefix}-none"),
             expect=(403, "Forbidden")),
        Step("nodeAllocatableResources on a node without the feature", "POST", SLICES,
             slice_body(f"{s}-nar-plain", other_pool, [nar_device], node=plain_node),
             expect=(403, "Forbidden")),
        Step("1.37 fields accepted", "POST", SLICES, slice_body(
            f"{s}-137", other_pool, [
                device("part-0", attributes={
                    f"{DRIVER}/profile": {"string": "half"},
                    "ints": {"ints": [1, 2]}, "bools": {"bools": [True]},
                    "strings": {"strings": ["a", "b"]},
                    "versions": {"versions": ["1.2.3", "2.0.0-rc.1"]}},
                       consumesCounters=[{"counterSet": "gpu-0-counters",
                                          "counters": {"memory": {"value": "8Gi"}},
                                          "compatibilityGroups": ["half", "mixed"]}],
                       nodeAllocatableResources={
                           "memory": {"mapping": {"capacityKey": "memory",
                                                  "capacityMultiplier": "1"},
                                      "overhead": {"perPod": "64Mi"}},
                           "cpu": {"mapping": {"deviceMultiplier": "2"}}})],
            node=node, partitionTypeAttribute=f"{DRIVER}/profile",
            skipNodeOperations=["NodeUnprepareResources"]),
             expect=(201, ""), observe=_spec_1_37),
        Step("nodeAllocatableResources: bad name and missing capacity key", "POST", SLICES,
             slice_body(f"{s}-nar", other_pool, [device("gpu-0", nodeAllocatableResources={
                 "ephemeral-storage": {"overhead": {"perPod": "1Gi"}},
                 "memory": {"mapping": {"capacityKey": "nope", "capacityMultiplier": "1"}},
                 "cpu": {"overhead": {}}})], node=node), expect=(422, "Invalid")),
        Step("partitionTypeAttribute without counters", "POST", SLICES, slice_body(
            f"{s}-pta", other_pool, partitionTypeAttribute=f"{DRIVER}/profile"),
             expect=(422, "Invalid")),
        Step("partitionTypeAttribute missing on a device", "POST", SLICES, slice_body(
            f"{s}-pta2", other_pool, [device("part-0", consumesCounters=[
                {"counterSet": "c", "counters": {"memory": {"value": "1Gi"}}}])],
            partitionTypeAttribute=f"{DRIVER}/profile"), expect=(422, "Invalid")),
        Step("skipNodeOperations prepare without unprepare", "POST", SLICES, slice_body(
            f"{s}-skip", other_pool, skipNodeOperations=["NodePrepareResources"]),
             expect=(422, "Invalid")),
        Step("compatibilityGroups: too many", "POST", SLICES, slice_body(
            f"{s}-cg", other_pool, [device("part-0", consumesCounters=[
                {"counterSet": "c", "counters": {"memory": {"value": "1Gi"}},
                 "compatibilityGroups": ["a", "b", "c"]}])]), expect=(422, "Invalid")),
        Step("list attribute empty", "POST", SLICES, slice_body(
            f"{s}-list", other_pool, [device("gpu-0", attributes={"x": {"ints": []}})]),
             expect=(422, "Invalid")),
        Step("versions attribute not semver", "POST", SLICES, slice_body(
            f"{s}-versions", other_pool, [device("gpu-0", attributes={
                "x": {"versions": ["1.2.3", "v2"]}})]), expect=(422, "Invalid")),
        # -- field selectors ---------------------------------------------------------------
        Step("list by spec.pool.name", "GET", SLICES, query=fs_pool, observe=_names),
        Step("list by spec.driver and spec.nodeName", "GET", SLICES, query={
            "fieldSelector": f"spec.driver={DRIVER},spec.nodeName=diff-node,"
                             f"spec.pool.name={pool}"}, observe=_names),
        Step("unsupported field label", "GET", SLICES,
             query={"fieldSelector": "spec.pool.generation=1"}, expect=(400, "BadRequest")),
        # -- patches -----------------------------------------------------------------------
        Step("merge patch", "PATCH", f"{SLICES}/{s}", {"metadata": {"labels": {"a": "b"}}},
             content_type=MERGE),
        Step("apply with application/apply-patch+json", "PATCH", f"{SLICES}/{s}",
             slice_body(s, pool), content_type="application/apply-patch+json",
             query={"fieldManager": "diff"}, expect=(415, "UnsupportedMediaType")),
        Step("apply (yaml)", "PATCH", f"{SLICES}/{s}", slice_body(s, pool), content_type=APPLY,
             query={"fieldManager": "diff", "force": "true"}),
        Step("apply without fieldManager", "PATCH", f"{SLICES}/{s}", slice_body(s, pool),
             content_type=APPLY, expect=(422, "Invalid")),
        Step("patch with an unknown content type", "PATCH", f"{SLICES}/{s}", {},
             content_type="text/plain", expect=(415, "UnsupportedMediaType")),
        Step("create with an unknown content type", "POST", SLICES, b"x",
             content_type="text/plain", expect=(415, "UnsupportedMediaType")),
        # -- watch -------------------------------------------------------------------------
        lambda: Step("list for a watch", "GET", SLICES, query=fs_pool, observe=lambda a: (
            state.__setitem__("rv", a.body["metadata"]["resourceVersion"]), None)[1]),
        Step("change while not watching", "PATCH", f"{SLICES}/{s}",
             {"metadata": {"labels": {"a": "c"}}}, content_type=MERGE),
        lambda: Step("watch from the list's resourceVersion", "GET", SLICES, query={
            **fs_pool, "watch": "true", "resourceVersion": state["rv"], "timeoutSeconds": "1"},
            observe=_watch),
        Step("PUT with a stale resourceVersion", "PUT", f"{SLICES}/{s}", {
            **slice_body(s, pool), "metadata": {"name": s, "resourceVersion": "1"}},
             expect=(409, "Conflict")),
        Step("change an immutable field", "PUT", f"{SLICES}/{s}", slice_body(s, other_pool),
             expect=(422, "Invalid")),
        Step("list with limit", "GET", SLICES, query={**fs_pool, "limit": "1"},
             observe=_names),
        Step("delete slice", "DELETE", f"{SLICES}/{s}"),
        Step("get deleted slice", "GET", f"{SLICES}/{s}", expect=(404, "NotFound")),
        # -- ResourceClaim status ------------------------------------------------------------
        Step("create claim", "POST", CLAIMS, claim_body(claim), expect=(201, ""),
             observe=lambda a: state.__setitem__("uid", a.body["metadata"]["uid"])),
        lambda: Step("write allocation (status PUT)", "PUT", f"{CLAIMS}/{claim}/status", {
            **claim_body(claim), "metadata": {"name": claim, "uid": state["uid"]},
            "status": {"allocation": allocation(pool)}}),
        lambda: Step("apply status.devices", "PATCH", f"{CLAIMS}/{claim}/status", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": NAMESPACE, "uid": state["uid"]},
            "status": {"devices": [{"driver": DRIVER, "pool": pool, "device": "gpu-0",
                                    "conditions": [condition()]}]}},
            content_type=APPLY, query={"fieldManager": DRIVER}, observe=_status_devices),
        Step("status entry for a device not allocated", "PATCH", f"{CLAIMS}/{claim}/status", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": NAMESPACE},
            "status": {"devices": [{"driver": DRIVER, "pool": pool, "device": "gpu-9"}]}},
             content_type=APPLY, query={"fieldManager": "other"}, expect=(422, "Invalid")),
        Step("withdraw status.devices", "PATCH", f"{CLAIMS}/{claim}/status", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": NAMESPACE}, "status": {}},
             content_type=APPLY, query={"fieldManager": DRIVER}, observe=_status_devices),
        Step("status.devices: bad networkData and conditions", "PATCH",
             f"{CLAIMS}/{claim}/status", {
                 "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": claim, "namespace": NAMESPACE},
                 "status": {"devices": [{
                     "driver": DRIVER, "pool": pool, "device": "gpu-0",
                     "conditions": [{**condition(), "status": "Maybe"}],
                     "networkData": {"interfaceName": "x" * 257,
                                     "ips": ["10.9.8.7/24", "010.009.008.000/24", "300.1.1.1/8",
                                             "10.9.8.7/24"]}}]}},
             content_type=APPLY, query={"fieldManager": "bad"}, expect=(422, "Invalid")),
        Step("status.devices: data not an object", "PATCH", f"{CLAIMS}/{claim}/status", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": NAMESPACE},
            "status": {"devices": [{"driver": DRIVER, "pool": pool, "device": "gpu-0",
                                    "data": [1, 2]}]}},
             content_type=APPLY, query={"fieldManager": "bad"}, expect=(422, "Invalid")),
        Step("merge patch of status.devices", "PATCH", f"{CLAIMS}/{claim}/status", {
            "status": {"devices": [{"driver": DRIVER, "pool": pool, "device": "gpu-0",
                                    "networkData": {"ips": ["10.9.8.7/24"]}}]}},
             content_type=MERGE, observe=_status_devices),
        lambda: Step("status allocation is immutable", "PUT", f"{CLAIMS}/{claim}/status", {
            **claim_body(claim), "metadata": {"name": claim, "uid": state["uid"]},
            "status": {"allocation": allocation(other_pool)}}, expect=(422, "Invalid")),
        Step("delete claim", "DELETE", f"{CLAIMS}/{claim}"),
        Step("re-create claim under the same name", "POST", CLAIMS, claim_body(claim),
             expect=(201, "")),
        lambda: Step("apply status with the old uid", "PATCH", f"{CLAIMS}/{claim}/status", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": NAMESPACE, "uid": state["uid"]},
            "status": {"devices": []}},
            content_type=APPLY, query={"fieldManager": DRIVER}, expect=(422, "Invalid")),
        lambda: Step("PUT with the old uid", "PUT", f"{CLAIMS}/{claim}", {
            **claim_body(claim), "metadata": {"name": claim, "uid": state["uid"]}},
            expect=(409, "Conflict")),
        Step("delete re-created claim", "DELETE", f"{CLAIMS}/{claim}"),
        # -- OpenAPI (kubectl's client-side validation needs it) --------------------------
        Step("openapi v3 root", "GET", "/openapi/v3", observe=_has_resource_paths),
        Step("openapi v3 resource.k8s.io/v1", "GET", "/openapi/v3/apis/resource.k8s.io/v1",
             observe=lambda a: (_patch_has_field_validation(a), _schema_knows_1_37(a))),
        Step("discovery /api/v1", "GET", "/api/v1", observe=_discovered),
        Step("discovery resource.k8s.io/v1", "GET", "/apis/resource.k8s.io/v1",
             observe=_discovered),
        Step("discovery /apis", "GET", "/apis", observe=_group_versions),
        Step("openapi v2", "GET", "/openapi/v2",
             observe=lambda a: "io.k8s.api.resource.v1.ResourceSlice" in a.body["definitions"]),
        *verb_steps(prefix, state),
        *more_verb_steps(prefix, state),
    ]


# ---------------------------------------------------------------------------- every verb

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
DEVICE_CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
#: Every resource the embedded server serves: (plural, collection path, has status)
SERVED: tuple[tuple[str, str, bool], ...] = (
    ("nodes", NODES, True),
    ("pods", PODS, True),
    ("resourceslices", SLICES, False),
    ("deviceclasses", DEVICE_CLASSES, False),
    ("resourceclaims", CLAIMS, True),
)


def _body_of(plural: str, name: str, label: str) -> dict[str, Any]:
    labels = {"drakit-parity": label}
    if plural == "nodes":
        body = node_body(name)
    elif plural == "pods":
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}],
                         "automountServiceAccountToken": False}}
    elif plural == "resourceslices":
        body = slice_body(name, f"{name}-pool")
    elif plural == "deviceclasses":
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
    else:
        body = claim_body(name)
    body["metadata"] = {**body["metadata"], "labels": labels}
    return body


def _label(key: str) -> Callable[[Answer], Any]:
    return lambda a: (a.body.get("metadata") or {}).get("labels", {}).get(key)


def _events(answer: Answer) -> Any:
    return sorted((e["type"], e["object"]["metadata"]["name"]) for e in answer.body or [])


def _deleted_names(answer: Answer) -> Any:
    items = (answer.body or {}).get("items")
    return sorted(i["metadata"]["name"] for i in items) if items is not None else None


def verb_steps(prefix: str, state: dict[str, Any]) -> list[Step | Callable[[], Step]]:
    """get, list, watch, create, update, merge / JSON / strategic-merge patch, server-side
    apply, delete and deletecollection on every resource served, and get / update / patch
    of every status subresource."""
    steps: list[Step | Callable[[], Step]] = []
    label = f"{prefix}-verbs"
    selector = {"labelSelector": f"drakit-parity={label}"}
    for plural, base, has_status in SERVED:
        name, second = f"{prefix}-v-{plural}", f"{prefix}-v2-{plural}"
        one = f"{base}/{name}"
        api_version = "v1" if plural in ("nodes", "pods") else "resource.k8s.io/v1"
        kind = _body_of(plural, name, label)["kind"]

        def keep(key: str) -> Callable[[Answer], Any]:
            return lambda a: (state.__setitem__(key, a.body), a.body["metadata"]["name"])[1]

        def put(key: str, path: str, labels: dict[str, str]) -> Callable[[], Step]:
            def make() -> Step:
                body = json.loads(json.dumps(state[key]))
                body["metadata"]["labels"] = {**body["metadata"].get("labels", {}), **labels}
                return Step(f"{path}: update", "PUT", path, body,
                            observe=lambda a: (_label("put")(a), _label("status-put")(a)))
            return make

        steps += [
            Step(f"{plural}: create", "POST", base, _body_of(plural, name, label),
                 expect=(201, ""), observe=lambda a: a.body["metadata"]["name"]),
            Step(f"{plural}: create a second", "POST", base, _body_of(plural, second, label),
                 expect=(201, "")),
            Step(f"{plural}: get", "GET", one, observe=keep(plural)),
            Step(f"{plural}: list by label", "GET", base, query=selector, observe=_names),
            Step(f"{plural}: watch by label", "GET", base,
                 query={**selector, "watch": "true", "timeoutSeconds": "1"}, observe=_events),
            put(plural, one, {"put": "yes"}),
            Step(f"{plural}: merge patch", "PATCH", one, {"metadata": {"labels": {"m": "1"}}},
                 content_type=MERGE, observe=_label("m")),
            Step(f"{plural}: JSON patch", "PATCH", one,
                 [{"op": "add", "path": "/metadata/labels/j", "value": "1"}],
                 content_type=JSON_PATCH, observe=_label("j")),
            Step(f"{plural}: strategic merge patch", "PATCH", one,
                 {"metadata": {"labels": {"s": "1"}}}, content_type=STRATEGIC,
                 observe=_label("s")),
            Step(f"{plural}: apply", "PATCH", one, {
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, "labels": {"a": "1"}}},
                content_type=APPLY, query={"fieldManager": "parity"}, observe=_label("a")),
        ]
        if has_status:
            steps += [
                Step(f"{plural}/status: get", "GET", f"{one}/status",
                     observe=keep(f"{plural}/status")),
                put(f"{plural}/status", f"{one}/status", {"status-put": "yes"}),
                Step(f"{plural}/status: merge patch of labels", "PATCH",
                     f"{one}/status", {"metadata": {"labels": {"ms": "1"}}},
                     content_type=MERGE, observe=_label("ms")),
            ]
        steps += [
            Step(f"{plural}: delete", "DELETE", one,
                 observe=lambda a: a.body.get("kind")),
            Step(f"{plural}: get after delete", "GET", one, expect=(404, "NotFound")),
            Step(f"{plural}: deletecollection by label", "DELETE", base, query=selector,
                 observe=_deleted_names),
            Step(f"{plural}: list after deletecollection", "GET", base, query=selector,
                 observe=_names),
        ]
    return steps


def _meta(*keys: str) -> Callable[[Answer], Any]:
    return lambda a: [(a.body.get("metadata") or {}).get(k) for k in keys]


def _generation(answer: Answer) -> Any:
    return (answer.body.get("metadata") or {}).get("generation")


def _page(answer: Answer) -> Any:
    """The names and whether there is a next page (on the last page kube-apiserver may
    still send a ``continue`` token when a selector filtered what it read, so the last
    page is compared by its names alone)."""
    meta = (answer.body or {}).get("metadata") or {}
    return (_names(answer), bool(meta.get("continue")), meta.get("remainingItemCount"))


def _spec_change(plural: str) -> dict[str, Any]:
    """A merge patch that changes the spec (and so, where tracked, the generation)."""
    if plural == "nodes":
        return {"spec": {"unschedulable": True}}
    if plural == "pods":
        return {"spec": {"activeDeadlineSeconds": 600}}
    if plural == "resourceslices":
        return {"spec": {"pool": {"generation": 2}}}
    if plural == "deviceclasses":
        return {"spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    return {"metadata": {"annotations": {"no-spec-change": "claims' spec is immutable"}}}


def _spec_change_in_status(plural: str) -> dict[str, Any]:
    """A spec change a status PUT carries (the server must ignore it)."""
    if plural == "nodes":
        return {"unschedulable": False}
    if plural == "pods":
        return {"activeDeadlineSeconds": 300}
    return {"devices": {"requests": [
        {"name": "req-0", "exactly": {"deviceClassName": "other.example.com"}}]}}


def _status_of(plural: str) -> dict[str, Any]:
    """A status a PUT of the main resource tries to set (the server must ignore it)."""
    if plural == "nodes":
        return {"capacity": {"example.com/x": "1"}}
    if plural == "pods":
        return {"message": "set through the main resource"}
    return {"allocation": allocation("nowhere")}


def pod_update_steps(path: str, state: dict[str, Any]) -> list[Step | Callable[[], Step]]:
    """PUTs of a pod (its spec has activeDeadlineSeconds 600 by now): what
    ValidatePodUpdate lets change (an image, a lower deadline) and what it refuses."""
    def put(name: str, change: Callable[[dict[str, Any]], None],
            expect: tuple[int, str]) -> Callable[[], Step]:
        def make() -> Step:
            body = json.loads(json.dumps(state["pods/update"]))
            body["metadata"].pop("resourceVersion", None)
            change(body["spec"])
            return Step(f"pods: update that {name}", "PUT", path, body, expect=expect,
                        observe=lambda a: (a.body["spec"]["containers"][0].get("image"),
                                           a.body["spec"].get("activeDeadlineSeconds")))
        return make

    def container(key: str, value: str) -> Callable[[dict[str, Any]], None]:
        return lambda spec: spec["containers"][0].__setitem__(key, value)

    return [
        Step("pods: get for updates", "GET", path, observe=lambda a: (
            state.__setitem__("pods/update", a.body), None)[1]),
        put("changes a container's name", container("name", "renamed"), (422, "Invalid")),
        put("raises activeDeadlineSeconds",
            lambda spec: spec.__setitem__("activeDeadlineSeconds", 900), (422, "Invalid")),
        put("removes activeDeadlineSeconds", lambda spec: spec.pop("activeDeadlineSeconds"),
            (422, "Invalid")),
        put("adds a volume", lambda spec: spec.__setitem__("volumes", [
            {"name": "v", "emptyDir": {}}]), (422, "Invalid")),
        put("changes a container's image", container("image", "registry.invalid/pause:2"),
            (200, "")),
        put("lowers activeDeadlineSeconds and adds a toleration", lambda spec: spec.update(
            activeDeadlineSeconds=300, tolerations=[
                {"key": "k", "operator": "Exists", "effect": "NoSchedule"}]), (200, "")),
    ]


def more_verb_steps(prefix: str, state: dict[str, Any]) -> list[Step | Callable[[], Step]]:
    """The rest of what the embedded server serves, on every resource: dry run
    (``dryRun=All``) of create / update / patch / delete, server-side apply that creates,
    PUT of an object that does not exist, delete preconditions, a watch replayed from a
    resourceVersion (MODIFIED and DELETED, also through the ``/watch/`` path), pagination
    with ``continue``, lists across namespaces, ``metadata.generation`` on spec changes,
    the status a main-resource PUT cannot change (and the spec a status PUT cannot),
    and JSON, strategic-merge and apply patches of every status subresource."""
    steps: list[Step | Callable[[], Step]] = []
    label = f"{prefix}-more"
    selector = {"labelSelector": f"drakit-parity={label}"}
    for plural, base, has_status in SERVED:
        name, dry = f"{prefix}-m-{plural}", f"{prefix}-dry-{plural}"
        second = f"{prefix}-m2-{plural}"
        one = f"{base}/{name}"
        api_version = "v1" if plural in ("nodes", "pods") else "resource.k8s.io/v1"
        kind = _body_of(plural, name, label)["kind"]
        watch_base = (base.replace("/api/v1/", "/api/v1/watch/") if plural in (
            "nodes", "pods") else base.replace("/resource.k8s.io/v1/",
                                               "/resource.k8s.io/v1/watch/"))
        cluster_wide = base.replace(f"/namespaces/{NAMESPACE}", "")

        def keep(key: str) -> Callable[[Answer], Any]:
            return lambda a: (state.__setitem__(key, a.body), a.body["metadata"]["name"])[1]

        def with_status(key: str, path: str, plural: str = plural) -> Callable[[], Step]:
            def make() -> Step:
                body = json.loads(json.dumps(state[key]))
                body["status"] = {**(body.get("status") or {}), **_status_of(plural)}
                wanted = set(_status_of(plural))
                return Step(f"{plural}: update that sets status", "PUT", path, body,
                            observe=lambda a: sorted(set(a.body.get("status") or {}) & wanted))
            return make

        def status_with_spec(key: str, path: str, plural: str = plural) -> Callable[[], Step]:
            def make() -> Step:
                body = json.loads(json.dumps(state[key]))
                change = _spec_change_in_status(plural)
                body["spec"] = {**body["spec"], **change}
                return Step(f"{plural}/status: update that changes spec", "PUT", path, body,
                            observe=lambda a: {k: a.body["spec"].get(k) for k in change})
            return make

        def dry_run_update(key: str, path: str, plural: str = plural) -> Callable[[], Step]:
            def make() -> Step:
                body = json.loads(json.dumps(state[key]))
                body["metadata"]["labels"] = {}
                body["metadata"].pop("resourceVersion", None)
                return Step(f"{plural}: update dry run", "PUT", path, body,
                            query={"dryRun": "All"},
                            observe=lambda a: a.body["metadata"].get("labels"))
            return make

        def rv_of(key: str) -> Callable[[Answer], Any]:
            return lambda a: (state.__setitem__(
                key, a.body["metadata"]["resourceVersion"]), None)[1]

        steps += [
            Step(f"{plural}: create dry run", "POST", base, _body_of(plural, dry, label),
                 query={"dryRun": "All"}, expect=(201, ""),
                 observe=lambda a: [a.body["metadata"]["name"],
                                    bool(a.body["metadata"].get("uid"))]),
            Step(f"{plural}: get after dry-run create", "GET", f"{base}/{dry}",
                 expect=(404, "NotFound")),
            Step(f"{plural}: update of an object that does not exist", "PUT", f"{base}/{dry}",
                 _body_of(plural, dry, label), expect=(404, "NotFound")),
            Step(f"{plural}: apply that creates", "PATCH", one, {
                **_body_of(plural, name, label), "apiVersion": api_version, "kind": kind},
                content_type=APPLY, query={"fieldManager": "parity"}, expect=(201, ""),
                observe=_meta("name", "generation", "labels")),
            Step(f"{plural}: get for a watch", "GET", one, observe=rv_of(f"{plural}/rv")),
            Step(f"{plural}: merge patch dry run", "PATCH", one,
                 {"metadata": {"labels": {"dry": "1"}}}, content_type=MERGE,
                 query={"dryRun": "All"}, observe=_label("dry")),
            Step(f"{plural}: merge patch that changes spec", "PATCH", one,
                 _spec_change(plural), content_type=MERGE, observe=_generation),
            Step(f"{plural}: get after dry-run patch", "GET", one,
                 observe=lambda a: (_label("dry")(a), _generation(a))),
        ]
        steps += [
            Step(f"{plural}: get for a status-setting update", "GET", one,
                 observe=keep(f"{plural}/more")),
            with_status(f"{plural}/more", one),
        ] if has_status else []
        if has_status:
            steps += [
                Step(f"{plural}/status: get for a spec-changing update", "GET",
                     f"{one}/status", observe=keep(f"{plural}/more-status")),
                status_with_spec(f"{plural}/more-status", f"{one}/status"),
                Step(f"{plural}/status: JSON patch of labels", "PATCH", f"{one}/status",
                     [{"op": "add", "path": "/metadata/labels/js", "value": "1"}],
                     content_type=JSON_PATCH, observe=_label("js")),
                Step(f"{plural}/status: strategic merge patch of labels", "PATCH",
                     f"{one}/status", {"metadata": {"labels": {"ss": "1"}}},
                     content_type=STRATEGIC, observe=_label("ss")),
                Step(f"{plural}/status: apply of labels", "PATCH", f"{one}/status", {
                    "apiVersion": api_version, "kind": kind,
                    "metadata": {"name": name, "labels": {"as": "1"}}},
                     content_type=APPLY, query={"fieldManager": "parity-status"},
                     observe=_label("as")),
            ]
        steps += [
            Step(f"{plural}: get for a dry-run update", "GET", one,
                 observe=keep(f"{plural}/dry-run")),
            dry_run_update(f"{plural}/dry-run", one),
            *(pod_update_steps(one, state) if plural == "pods" else []),
            Step(f"{plural}: create a second", "POST", base, _body_of(plural, second, label),
                 expect=(201, "")),
            Step(f"{plural}: list across namespaces, limit 1", "GET", cluster_wide,
                 query={**selector, "limit": "1"}, observe=lambda a, k=f"{plural}/continue": (
                     state.__setitem__(k, (a.body.get("metadata") or {}).get("continue")),
                     _page(a))[1]),
            lambda k=f"{plural}/continue", cw=cluster_wide, p=plural: Step(
                f"{p}: list across namespaces, the next page", "GET", cw,
                query={**selector, "limit": "1", "continue": state[k] or ""},
                observe=_names),
            Step(f"{plural}: watch one object with watch=true", "GET", one,
                 query={"watch": "true", "timeoutSeconds": "1"}, observe=_watch),
            Step(f"{plural}: delete with a wrong uid precondition", "DELETE", one,
                 {"kind": "DeleteOptions", "apiVersion": "v1",
                  "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}},
                 expect=(409, "Conflict")),
            Step(f"{plural}: delete dry run", "DELETE", one, query={"dryRun": "All"},
                 observe=lambda a: a.body.get("kind")),
            Step(f"{plural}: get after dry-run delete", "GET", one,
                 observe=_meta("name", "labels")),
            Step(f"{plural}: delete", "DELETE", one, observe=lambda a: a.body.get("kind")),
            lambda rv=f"{plural}/rv", p=plural, b=base: Step(
                f"{p}: watch replayed from a resourceVersion", "GET", b, query={
                    **selector, "watch": "true", "resourceVersion": state[rv],
                    "timeoutSeconds": "1"}, observe=_watch),
            lambda rv=f"{plural}/rv", p=plural, w=f"{watch_base}/{name}": Step(
                f"{p}: watch through the /watch/ path", "GET", w, query={
                    "resourceVersion": state[rv], "timeoutSeconds": "1"}, observe=_watch),
            Step(f"{plural}: deletecollection of the rest", "DELETE", base, query=selector,
                 observe=_deleted_names),
        ]
    return steps


CLEANUP_SUFFIXES = ("-slice", "-slice-unknown", "-slice-quantity", "-slice-rp-ok", "-slice-137")
"""Slices a run leaves behind (deleted by the tests when done)."""


def run(client: Client, prefix: str) -> list[tuple[Step, Answer, Any]]:
    """Send the sequence; (step, answer, observation) for each step."""
    state: dict[str, Any] = {}
    out = []
    for item in sequence(prefix, state):
        step = item() if callable(item) else item
        answer = client.send(step.method, step.path, step.body, content_type=step.content_type,
                             query=step.query, accept=step.accept)
        observed = step.observe(answer) if step.observe and answer.code < 300 else None
        out.append((step, answer, observed))
    for suffix in CLEANUP_SUFFIXES:
        client.send("DELETE", f"{SLICES}/{prefix}{suffix}")
    for suffix in ("-node", "-plain-node"):
        client.send("DELETE", f"{NODES}/{prefix}{suffix}")
    return out
