"""One recorded sequence of API requests, and a raw HTTP client to send it to any server.

The sequence covers what a DRA node driver (and a user with kubectl) sends to
kube-apiserver: valid and invalid ResourceSlices (1.37 fields included), field selectors,
merge and server-side-apply patches, ResourceClaim status writes (also with a stale uid
after the claim was re-created), watches, content types and OpenAPI. Each step records
what kube-apiserver 1.37.2 answered (code and reason, from runs against the real server
and shared/reference/real-control-plane.md) and, for some, an observation of the answer
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
        Step("openapi v2", "GET", "/openapi/v2",
             observe=lambda a: "io.k8s.api.resource.v1.ResourceSlice" in a.body["definitions"]),
    ]


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
