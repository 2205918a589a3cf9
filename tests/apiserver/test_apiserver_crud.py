"""CRUD, errors, selectors and status semantics through the real kubernetes client."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from apiserver_helpers import DRIVER, NODE, make_slice
from kubernetes import client, config

from drakit.plugin.testing.apiserver import AllocatedDevice, EmbeddedAPIServer

GROUP, VERSION = "resource.k8s.io", "v1"


def status_of(exc: client.ApiException) -> dict:
    body = json.loads(exc.body)
    assert body["kind"] == "Status"
    assert body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def test_kubeconfig_drives_unchanged_client(server: EmbeddedAPIServer, tmp_path: Path) -> None:
    path = server.write_kubeconfig(tmp_path / "kc.yaml")
    assert path.stat().st_mode & 0o777 == 0o600
    api = config.new_client_from_config(config_file=str(path))
    try:
        server.create_node(NODE)
        nodes = client.CoreV1Api(api).list_node()
        assert [n.metadata.name for n in nodes.items] == [NODE]
    finally:
        api.close()


def test_discovery_documents(server: EmbeddedAPIServer, api_client: client.ApiClient) -> None:
    groups = client.ApisApi(api_client).get_api_versions()
    assert [g.name for g in groups.groups] == [GROUP]
    assert groups.groups[0].preferred_version.group_version == "resource.k8s.io/v1"
    resources = client.ResourceApi(api_client).get_api_group()
    assert resources.versions[0].version == "v1"
    listing = client.ResourceV1Api(api_client).get_api_resources()
    names = {r.name for r in listing.resources}
    assert {"resourceslices", "resourceclaims", "resourceclaims/status", "deviceclasses"} <= names
    # The embedded server applies the 1.37 rules whatever versions it serves.
    assert client.VersionApi(api_client).get_code().minor == "37"
    assert client.CoreV1Api(api_client).get_api_resources().group_version == "v1"


def test_slice_crud_and_not_found(resource_api: client.ResourceV1Api) -> None:
    created = resource_api.create_resource_slice(make_slice())
    meta = created.metadata
    assert meta.uid and meta.resource_version and meta.generation == 1
    assert meta.creation_timestamp is not None
    got = resource_api.read_resource_slice("node-a-gpu")
    assert got.spec.devices[0].name == "gpu-0"
    assert got.metadata.resource_version == meta.resource_version

    deleted = resource_api.delete_resource_slice("node-a-gpu")
    assert deleted.metadata.name == "node-a-gpu"
    with pytest.raises(client.ApiException) as info:
        resource_api.read_resource_slice("node-a-gpu")
    body = status_of(info.value)
    assert info.value.status == 404 and body["reason"] == "NotFound"
    assert body["message"] == 'resourceslices.resource.k8s.io "node-a-gpu" not found'
    assert body["details"] == {"name": "node-a-gpu", "group": GROUP, "kind": "resourceslices"}


def test_create_twice_is_already_exists(resource_api: client.ResourceV1Api) -> None:
    resource_api.create_resource_slice(make_slice())
    with pytest.raises(client.ApiException) as info:
        resource_api.create_resource_slice(make_slice())
    body = status_of(info.value)
    assert info.value.status == 409 and body["reason"] == "AlreadyExists"


def test_generate_name(resource_api: client.ResourceV1Api) -> None:
    body = make_slice()
    body["metadata"] = {"generateName": "node-a-gpu.example.com-"}
    first = resource_api.create_resource_slice(body).metadata.name
    second = resource_api.create_resource_slice(body).metadata.name
    assert first != second
    for name in (first, second):
        assert name.startswith("node-a-gpu.example.com-")
        assert len(name) == len("node-a-gpu.example.com-") + 5


def test_stale_resource_version_is_conflict(resource_api: client.ResourceV1Api) -> None:
    created = resource_api.create_resource_slice(make_slice()).to_dict(serialize=True)
    fresh = dict(created)
    fresh["spec"] = {**created["spec"], "pool": {**created["spec"]["pool"], "generation": 2}}
    updated = resource_api.replace_resource_slice("node-a-gpu", fresh)
    assert updated.metadata.generation == 2
    assert updated.metadata.resource_version != created["metadata"]["resourceVersion"]

    stale = dict(created)  # still carries the first resourceVersion
    with pytest.raises(client.ApiException) as info:
        resource_api.replace_resource_slice("node-a-gpu", stale)
    body = status_of(info.value)
    assert info.value.status == 409 and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]


def test_unchanged_update_keeps_resource_version(resource_api: client.ResourceV1Api) -> None:
    created = resource_api.create_resource_slice(make_slice()).to_dict(serialize=True)
    again = resource_api.replace_resource_slice("node-a-gpu", created)
    assert again.metadata.resource_version == created["metadata"]["resourceVersion"]
    assert again.metadata.generation == 1


def test_invalid_slice_is_422_with_causes(custom_api: client.CustomObjectsApi) -> None:
    body = make_slice(devices=2)
    body["spec"]["devices"][1]["name"] = "GPU_1"
    del body["spec"]["driver"]  # the typed client would refuse to send this
    with pytest.raises(client.ApiException) as info:
        custom_api.create_cluster_custom_object(GROUP, VERSION, "resourceslices", body)
    status = status_of(info.value)
    assert info.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["kind"] == "ResourceSlice"
    fields = {c["field"] for c in status["details"]["causes"]}
    assert fields == {"spec.driver", "spec.devices[1].name"}
    assert status["message"].startswith('ResourceSlice.resource.k8s.io "node-a-gpu" is invalid: [')


def test_field_and_label_selectors(resource_api: client.ResourceV1Api,
                                  custom_api: client.CustomObjectsApi) -> None:
    resource_api.create_resource_slice(make_slice("a", node="node-a"))
    resource_api.create_resource_slice(make_slice("b", node="node-b"))
    other = make_slice("c", node="node-a", driver="nic.example.com")
    other["metadata"]["labels"] = {"tier": "net"}
    resource_api.create_resource_slice(other)

    def names(**kwargs: str) -> list[str]:
        return [s.metadata.name for s in resource_api.list_resource_slice(**kwargs).items]

    assert names(field_selector="spec.nodeName=node-a") == ["a", "c"]
    assert names(field_selector=f"spec.nodeName=node-a,spec.driver={DRIVER}") == ["a"]
    assert names(field_selector="spec.driver!=gpu.example.com") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(label_selector="tier=net") == ["c"]
    assert names(label_selector="tier in (net,storage)") == ["c"]
    assert names(label_selector="!tier") == ["a", "b"]
    # spec.pool.name is a ResourceSlice field label on the real server
    assert names(field_selector="spec.pool.name=node-a") == ["a", "c"]
    assert names(field_selector="spec.pool.name=node-b,spec.driver=gpu.example.com") == ["b"]
    with pytest.raises(client.ApiException) as info:
        names(field_selector="spec.pool.generation=1")
    assert info.value.status == 400
    assert "field label not supported" in status_of(info.value)["message"]
    assert "spec.pool.generation" in status_of(info.value)["message"]
    listed = custom_api.list_cluster_custom_object(GROUP, VERSION, "resourceslices")
    assert listed["kind"] == "ResourceSliceList" and len(listed["items"]) == 3


def test_list_pagination(resource_api: client.ResourceV1Api) -> None:
    for name in ("a", "b", "c"):
        resource_api.create_resource_slice(make_slice(name))
    page = resource_api.list_resource_slice(limit=2)
    assert [s.metadata.name for s in page.items] == ["a", "b"]
    assert page.metadata.var_continue
    rest = resource_api.list_resource_slice(limit=2, _continue=page.metadata.var_continue)
    assert [s.metadata.name for s in rest.items] == ["c"]
    assert not rest.metadata.var_continue


def test_delete_collection_by_field_selector(server: EmbeddedAPIServer,
                                            resource_api: client.ResourceV1Api) -> None:
    resource_api.create_resource_slice(make_slice("a", node="node-a"))
    resource_api.create_resource_slice(make_slice("b", node="node-b"))
    resource_api.create_resource_slice(make_slice("c", node="node-a", driver="nic.example.com"))
    resource_api.delete_collection_resource_slice(
        field_selector=f"spec.nodeName=node-a,spec.driver={DRIVER}"
    )
    assert [s["metadata"]["name"] for s in server.list_objects("resourceslices")] == ["b", "c"]
    assert server.requests(verb="deletecollection")[0].status_code == 200


def test_merge_and_json_patch(custom_api: client.CustomObjectsApi,
                              resource_api: client.ResourceV1Api) -> None:
    resource_api.create_resource_slice(make_slice())
    patched = custom_api.patch_cluster_custom_object(
        GROUP, VERSION, "resourceslices", "node-a-gpu",
        {"metadata": {"labels": {"x": "1"}}, "spec": {"pool": {"generation": 5}}},
        _content_type="application/merge-patch+json",
    )
    assert patched["metadata"]["labels"] == {"x": "1"}
    assert patched["spec"]["pool"] == {"name": NODE, "generation": 5, "resourceSliceCount": 1}
    assert patched["metadata"]["generation"] == 2
    patched = custom_api.patch_cluster_custom_object(
        GROUP, VERSION, "resourceslices", "node-a-gpu",
        [{"op": "replace", "path": "/spec/devices/0/name", "value": "gpu-9"}],
        _content_type="application/json-patch+json",
    )
    assert patched["spec"]["devices"][0]["name"] == "gpu-9"
    with pytest.raises(client.ApiException) as info:
        custom_api.patch_cluster_custom_object(
            GROUP, VERSION, "resourceslices", "node-a-gpu", {"spec": {"driver": "other.io"}},
            _content_type="application/merge-patch+json",
        )
    causes = status_of(info.value)["details"]["causes"]
    assert causes == [{"reason": "FieldValueInvalid", "field": "spec.driver",
                       "message": 'Invalid value: "other.io": field is immutable'}]


def test_claim_status_subresource(server: EmbeddedAPIServer,
                                  resource_api: client.ResourceV1Api) -> None:
    server.create_claim("ns1", "claim", [AllocatedDevice(DRIVER, NODE, "gpu-0")],
                        node_name=NODE)
    claim = resource_api.read_namespaced_resource_claim("claim", "ns1").to_dict(serialize=True)
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"

    # A PUT of the object ignores status; a PUT of status ignores everything else.
    claim["status"]["devices"] = [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
    claim["metadata"]["labels"] = {"a": "b"}
    main = resource_api.replace_namespaced_resource_claim("claim", "ns1", claim)
    assert main.status.devices is None and main.metadata.labels == {"a": "b"}
    claim["metadata"]["resourceVersion"] = main.metadata.resource_version
    claim["metadata"]["labels"] = {"c": "d"}
    status = resource_api.replace_namespaced_resource_claim_status("claim", "ns1", claim)
    assert status.status.devices[0].device == "gpu-0"
    assert status.metadata.labels == {"a": "b"}


def test_claim_create_drops_status_and_status_must_match_allocation(
    resource_api: client.ResourceV1Api,
) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {
            "deviceClassName": "gpu"}}]}},
        "status": {"devices": [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]},
    }
    created = resource_api.create_namespaced_resource_claim("default", body)
    assert created.status is None or created.status.devices is None
    body["metadata"] = {"name": "c"}
    with pytest.raises(client.ApiException) as info:
        resource_api.replace_namespaced_resource_claim_status("c", "default", body)
    cause = status_of(info.value)["details"]["causes"][0]
    assert cause["field"] == "status.devices[0]"
    assert cause["message"].endswith("must be an allocated device in the claim")


def test_node_delete_answers_status(core_api: client.CoreV1Api,
                                   server: EmbeddedAPIServer) -> None:
    server.create_node(NODE)
    answer = core_api.delete_node(NODE)
    answer = answer if isinstance(answer, dict) else answer.to_dict()
    assert answer["kind"] == "Status" and answer["status"] == "Success"
    assert server.get_object("nodes", NODE) is None


def test_dry_run_does_not_store(resource_api: client.ResourceV1Api,
                                server: EmbeddedAPIServer) -> None:
    resource_api.create_resource_slice(make_slice(), dry_run="All")
    assert server.list_objects("resourceslices") == []


def _raw(server: EmbeddedAPIServer, method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
    request = urllib.request.Request(server.url + path, data=body or None, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_unknown_paths_and_methods(server: EmbeddedAPIServer) -> None:
    code, body = _raw(server, "GET", "/apis/resource.k8s.io/v1/widgets")
    assert (code, body["reason"]) == (404, "NotFound")
    code, body = _raw(server, "GET", "/apis/resource.k8s.io/v1beta1/resourceslices")
    assert code == 404
    code, body = _raw(server, "POST", "/apis/resource.k8s.io/v1/resourceslices/x", b"{}")
    assert (code, body["reason"]) == (405, "MethodNotAllowed")
    code, body = _raw(server, "POST", "/apis/resource.k8s.io/v1/resourceslices", b"{not json")
    assert (code, body["reason"]) == (400, "BadRequest")
    code, body = _raw(server, "PUT", "/apis/resource.k8s.io/v1/resourceslices", b"{}")
    assert code == 405
    code, body = _raw(server, "GET", "/api")
    assert body["kind"] == "APIVersions" and body["versions"] == ["v1"]


def test_device_classes_and_node_selectors(server: EmbeddedAPIServer,
                                           resource_api: client.ResourceV1Api,
                                           core_api: client.CoreV1Api) -> None:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu.example.com"},
            "spec": {"selectors": [{"cel": {"expression":
                                            'device.driver == "gpu.example.com"'}}]}}
    created = resource_api.create_device_class(body)
    assert created.metadata.generation == 1
    listed = resource_api.list_device_class(field_selector="metadata.name=gpu.example.com")
    assert listed.items[0].spec.selectors[0].cel.expression.startswith("device.driver")
    resource_api.delete_device_class("gpu.example.com")
    assert resource_api.list_device_class().items == []

    server.create_node("node-a", labels={"zone": "a"})
    server.create_node("node-b")
    names = [n.metadata.name for n in core_api.list_node(label_selector="zone=a").items]
    assert names == ["node-a"]
    only_b = core_api.list_node(field_selector="metadata.name=node-b")
    names = [n.metadata.name for n in only_b.items]
    assert names == ["node-b"]
    node = core_api.read_node("node-a")
    assert node.status.conditions[0].type == "Ready"


def test_concurrent_writers(server: EmbeddedAPIServer, api_client: client.ApiClient) -> None:
    server.create_object("resourceslices", make_slice())
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        custom = client.CustomObjectsApi(api_client)
        try:
            for i in range(10):
                custom.patch_cluster_custom_object(
                    GROUP, VERSION, "resourceslices", "node-a-gpu",
                    {"metadata": {"labels": {f"w{n}-{i}": "x"}}},
                    _content_type="application/merge-patch+json")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    stored = server.get_object("resourceslices", "node-a-gpu")
    assert stored is not None and len(stored["metadata"]["labels"]) == 40
    patches = server.requests(verb="patch")
    assert len(patches) == 40 and all(r.status_code == 200 for r in patches)


def test_list_objects_without_copies_reads_the_stored_objects(
        server: EmbeddedAPIServer, resource_api: client.ResourceV1Api) -> None:
    """``copy=False`` hands out the stored objects (read-only, for wait loops); the default
    hands out copies the caller may change."""
    resource_api.create_resource_slice(make_slice("s1"))
    a = server.list_objects("resourceslices", copy=False)
    b = server.list_objects("resourceslices", copy=False)
    assert [o["metadata"]["name"] for o in a] == ["s1"] and a[0] is b[0]
    mine = server.list_objects("resourceslices")
    assert mine == a and mine[0] is not a[0]
    mine[0]["spec"]["devices"] = []
    assert server.list_objects("resourceslices", copy=False)[0]["spec"]["devices"]
