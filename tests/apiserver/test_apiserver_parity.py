"""The embedded API server gives kube-apiserver 1.37.2's answers: the recorded
sequence of tests/apiserver/parity.py, plus the checks that need a closer look (messages,
warnings, headers). The same sequence runs against the real server in
tests/real/test_real_differential.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from parity import APPLY, CLAIMS, DRIVER, SLICES, Client, claim_body, device, run, slice_body

from drakit.plugin.testing.apiserver import EmbeddedAPIServer


@pytest.fixture
def http(server: EmbeddedAPIServer) -> Client:
    return Client(server.url, server.token)


def test_recorded_sequence(http: Client) -> None:
    results = run(http, "emb")
    wrong = [f"{step.name}: {answer.code} {answer.reason} {answer.message[:300]} "
             f"(kube-apiserver: {step.expect[0]} {step.expect[1]})"
             for step, answer, _ in results if (answer.code, answer.reason) != step.expect]
    assert not wrong, "\n".join(wrong)
    seen = {step.name: observed for step, _, observed in results}
    assert seen["create slice (taint without timeAdded)"] is True
    assert seen["unknown device field dropped"] == ["attributes", "capacity", "name"]
    assert seen["quantities rendered canonically"] == {
        "memory": {"value": "1Gi"}, "cores": {"value": "500m"}}
    assert seen["list by spec.pool.name"] == ["emb-slice"]
    assert seen["list by spec.driver and spec.nodeName"] == ["emb-slice"]
    assert seen["watch from the list's resourceVersion"] == [("MODIFIED", "emb-slice")]
    assert seen["apply status.devices"] == [("gpu-0", ["Ready"])]
    assert seen["withdraw status.devices"] == []
    assert seen["openapi v3 root"] is True
    assert seen["openapi v3 resource.k8s.io/v1"][0] is True
    assert seen["openapi v2"] is True
    spec = seen["1.37 fields accepted"]
    assert spec["partitionTypeAttribute"] == f"{DRIVER}/profile"
    assert spec["skipNodeOperations"] == ["NodeUnprepareResources"]
    assert spec["devices"][0]["consumesCounters"][0]["compatibilityGroups"] == ["half", "mixed"]
    assert spec["devices"][0]["nodeAllocatableResources"]["memory"]["overhead"] == {
        "perPod": "64Mi"}


def test_stale_uid_in_apply_is_422_immutable(http: Client) -> None:
    created = http.send("POST", CLAIMS, claim_body("c1")).body
    old_uid = created["metadata"]["uid"]
    http.send("DELETE", f"{CLAIMS}/c1")
    http.send("POST", CLAIMS, claim_body("c1"))
    answer = http.send("PATCH", f"{CLAIMS}/c1/status", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "default", "uid": old_uid}, "status": {}},
        content_type=APPLY, query={"fieldManager": DRIVER})
    assert (answer.code, answer.reason) == (422, "Invalid")
    assert answer.message == (f'ResourceClaim.resource.k8s.io "c1" is invalid: metadata.uid: '
                              f'Invalid value: "{old_uid}": field is immutable')
    put = http.send("PUT", f"{CLAIMS}/c1", {**claim_body("c1"),
                                           "metadata": {"name": "c1", "uid": old_uid}})
    assert (put.code, put.reason) == (409, "Conflict")


def test_protobuf_is_415_naming_json(http: Client) -> None:
    """client-go v0.37 writes built-in types as protobuf by default; the embedded server
    speaks JSON only and says so (415, not a 500 of a failed decode)."""
    body = b"k8s\x00\n\x1a\n\x13resource.k8s.io/v1\x12\rResourceSlice\x12\xff\xfe"
    answer = http.send("POST", SLICES, body, content_type="application/vnd.kubernetes.protobuf",
                       accept="application/vnd.kubernetes.protobuf, application/json")
    assert (answer.code, answer.reason) == (415, "UnsupportedMediaType")
    assert "application/json" in answer.message
    assert answer.message.startswith("the body of the request was in an unknown format")


def test_invalid_utf8_json_is_400(http: Client) -> None:
    answer = http.send("POST", SLICES, b'{"metadata": "\xff"}')
    assert (answer.code, answer.reason) == (400, "BadRequest")


def test_apply_patch_json_is_415(http: Client) -> None:
    http.send("POST", SLICES, slice_body("s1", "p1"))
    answer = http.send("PATCH", f"{SLICES}/s1", slice_body("s1", "p1"),
                       content_type="application/apply-patch+json",
                       query={"fieldManager": "x"})
    assert (answer.code, answer.reason) == (415, "UnsupportedMediaType")
    assert answer.message == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, "
        "application/strategic-merge-patch+json, application/apply-patch+yaml")


def test_unknown_fields_dropped_with_warning(http: Client, server: EmbeddedAPIServer) -> None:
    body = slice_body("s1", "p1", [device("gpu-0", bogus=1)])
    body["spec"]["extra"] = {"x": 1}
    answer = http.send("POST", SLICES, body)
    assert answer.code == 201
    assert "bogus" not in answer.body["spec"]["devices"][0]
    assert "extra" not in answer.body["spec"]
    stored = server.get_object("resourceslices", "s1")
    assert stored is not None and "extra" not in stored["spec"]
    assert sorted(answer.warnings) == ['299 - "unknown field \\"spec.devices[0].bogus\\""',
                                       '299 - "unknown field \\"spec.extra\\""']
    strict = http.send("POST", SLICES, slice_body("s2", "p1", [device("gpu-0", bogus=1)]),
                       query={"fieldValidation": "Strict"})
    assert (strict.code, strict.reason) == (400, "BadRequest")
    assert strict.message == 'strict decoding error: unknown field "spec.devices[0].bogus"'


def test_opaque_data_and_parameters_are_kept(http: Client) -> None:
    """RawExtension fields (status.devices[].data, opaque config parameters) are not pruned."""
    claim = claim_body("c2")
    claim["spec"]["devices"]["config"] = [{"requests": ["req-0"], "opaque": {
        "driver": DRIVER, "parameters": {"anything": {"nested": True}}}}]
    created = http.send("POST", CLAIMS, claim)
    assert created.code == 201
    assert created.body["spec"]["devices"]["config"][0]["opaque"]["parameters"] == {
        "anything": {"nested": True}}


def test_malformed_quantity_is_400(http: Client) -> None:
    for where in ("capacity", "counter"):
        if where == "capacity":
            body = slice_body("q1", "p1", [device("gpu-0", capacity={"m": {"value": "lots"}})])
        else:
            body = slice_body("q1", "p1")
            del body["spec"]["devices"]
            body["spec"]["sharedCounters"] = [{"name": "c", "counters": {"m": {"value": "1Q"}}}]
        answer = http.send("POST", SLICES, body)
        assert (answer.code, answer.reason) == (400, "BadRequest"), where
        assert answer.message == (
            'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: quantities '
            "must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


@pytest.mark.parametrize(("dev", "field", "message"), [
    (device("gpu-0", capacity={"m": {"value": "1Gi", "requestPolicy": {"default": "1Gi"}}}),
     "spec.devices[0].capacity[m].requestPolicy",
     "Forbidden: allowMultipleAllocations must be true"),
    (device("gpu-0", allowMultipleAllocations=True, capacity={"m": {
        "value": "4Gi", "requestPolicy": {"default": "3Gi", "validValues": ["1Gi", "2Gi"]}}}),
     "spec.devices[0].capacity[m].requestPolicy.validValues",
     'Invalid value: "3Gi": default value is not valid according to the requestPolicy'),
    (device("gpu-0", taints=[{"key": "k", "effect": "PreferNoSchedule"}]),
     "spec.devices[0].taints[0].effect",
     'Unsupported value: "PreferNoSchedule": supported values: "NoExecute", "NoSchedule", '
     '"None"'),
    (device("gpu-0", attributes={"v": {"version": "1.0"}}),
     "spec.devices[0].attributes[v].version",
     'Invalid value: "1.0": must be a string compatible with semver.org spec 2.0.0'),
])
def test_rejected_like_the_real_server(http: Client, dev: dict[str, Any], field: str,
                                       message: str) -> None:
    answer = http.send("POST", SLICES, slice_body("r1", "p1", [dev]))
    assert (answer.code, answer.reason) == (422, "Invalid")
    assert answer.cause_messages == [f"{field}: {message}"]


def test_taint_time_added_defaulted_and_kept(http: Client) -> None:
    taint = {"key": "example.com/t", "effect": "NoSchedule"}
    created = http.send("POST", SLICES, slice_body("t1", "p1", [device("gpu-0", taints=[taint])]))
    stamp = created.body["spec"]["devices"][0]["taints"][0]["timeAdded"]
    assert stamp.endswith("Z") and "T" in stamp
    given = {**taint, "timeAdded": "2025-01-01T00:00:00Z"}
    second = http.send("POST", SLICES, slice_body("t2", "p2", [device("gpu-0", taints=[given])]))
    assert second.body["spec"]["devices"][0]["taints"][0]["timeAdded"] == "2025-01-01T00:00:00Z"


def test_field_selector_pool_name(http: Client) -> None:
    http.send("POST", SLICES, slice_body("a", "pool-a"))
    http.send("POST", SLICES, slice_body("b", "pool-b"))
    answer = http.send("GET", SLICES, query={"fieldSelector": "spec.pool.name=pool-b"})
    assert [i["metadata"]["name"] for i in answer.body["items"]] == ["b"]


KUBECTL_CANDIDATES = (Path.home() / ".cache/drakit/k8s-v1.37.2/bin/kubectl",)


def _kubectl() -> str | None:
    for candidate in KUBECTL_CANDIDATES:
        if candidate.is_file():
            return str(candidate)
    return shutil.which("kubectl")


def test_kubectl_create_with_validation(server: EmbeddedAPIServer, tmp_path: Path) -> None:
    """``kubectl create -f claim.yaml`` with validation on (kubectl's default) needs the
    server's OpenAPI: it looks for the fieldValidation parameter and then lets the server
    validate (``fieldValidation=Strict``)."""
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl binary (scripts/build-k8s.sh builds one)")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    manifest = tmp_path / "claim.yaml"
    manifest.write_text(json.dumps(claim_body("from-kubectl")))
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "create", "-f", str(manifest)],
                        capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0, ok.stderr
    assert server.get_object("resourceclaims", "from-kubectl", "default") is not None
    bad = claim_body("bad-field")
    bad["spec"]["devices"]["bogus"] = 1
    manifest.write_text(json.dumps(bad))
    refused = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "create", "-f",
                              str(manifest)], capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode != 0
    assert 'unknown field "spec.devices.bogus"' in refused.stderr


def test_the_recorded_sequence_covers_every_resource_and_verb_served(
        http: Client, server: EmbeddedAPIServer) -> None:
    """What the differential test against kube-apiserver sends (this sequence) reaches every
    resource the embedded server serves with every verb, every status subresource with get,
    update and patch, and every patch type, so no rule of the kit goes unchecked."""
    from drakit.plugin.testing.apiserver.errors import PATCH_MEDIA_TYPES
    from drakit.plugin.testing.apiserver.resources import ALL_RESOURCES

    server.clear_requests()
    run(http, "cov")
    seen = {(r.full_resource, r.verb) for r in server.requests() if r.resource}
    patch_types = {(r.full_resource, r.content_type) for r in server.requests(verb="patch")}
    verbs = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    wanted = {(plural, verb) for plural in ALL_RESOURCES for verb in verbs}
    wanted |= {(f"{plural}/status", verb) for plural, info in ALL_RESOURCES.items()
               if info.has_status for verb in ("get", "update", "patch")}
    assert wanted - seen == set()
    assert {(plural, t) for plural in ALL_RESOURCES for t in PATCH_MEDIA_TYPES} - patch_types \
        == set()
    # every patch type of every status subresource, and every write verb as a dry run
    assert {(f"{plural}/status", t) for plural, info in ALL_RESOURCES.items()
            if info.has_status for t in PATCH_MEDIA_TYPES} - patch_types == set()
    dry_runs = {(r.full_resource, r.verb) for r in server.requests()
                if r.resource and "dryRun=All" in r.query}
    assert {(plural, verb) for plural in ALL_RESOURCES
            for verb in ("create", "update", "patch", "delete")} - dry_runs == set()
