"""The embedded server's (modest) validation, with vectors rewritten from
k8s.io/kubernetes pkg/apis/resource/validation/validation_resourceslice_test.go."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from apiserver_helpers import make_slice

from drakit.plugin.testing.apiserver import ApiError, EmbeddedAPIServer
from drakit.plugin.testing.apiserver.validation import check_interface_address


def S(devices: int = 1) -> dict[str, Any]:
    body = make_slice("foo", devices=devices, node="foo", driver="test.example.com")
    body["spec"]["pool"] = {"name": "foo", "generation": 0, "resourceSliceCount": 1}
    return body


def causes_of(server: EmbeddedAPIServer, body: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ApiError) as info:
        server.create_object("resourceslices", body)
    assert info.value.code == 422 and info.value.reason == "Invalid"
    return [(c["field"], c["message"]) for c in info.value.details["causes"]]


def test_valid_slices(server: EmbeddedAPIServer) -> None:
    server.create_object("resourceslices", S(128))  # vector 1
    twelve = S()
    twelve["metadata"]["name"] = "twelve"
    twelve["spec"]["pool"]["name"] = "x" * 253  # vector 12
    server.create_object("resourceslices", twelve)
    tainted = S(64)  # vector 3
    tainted["metadata"]["name"] = "tainted"
    for d in tainted["spec"]["devices"]:
        d["taints"] = [{"key": "example.com/taint", "effect": "NoExecute"}]
    server.create_object("resourceslices", tainted)
    upper = S()
    upper["metadata"]["name"] = "upper"
    upper["spec"]["driver"] = "GPU.Example.COM"  # accepted (lower-cased for the check)
    server.create_object("resourceslices", upper)


def test_too_many_devices(server: EmbeddedAPIServer) -> None:
    assert causes_of(server, S(129)) == [
        ("spec.devices", "Too many: 129: must have at most 128 items")]
    tainted = S(65)
    tainted["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoExecute"}]
    assert causes_of(server, tainted) == [
        ("spec.devices", "Too many: 65: must have at most 64 items")]


def test_node_selection_one_of(server: EmbeddedAPIServer) -> None:
    both = S()
    both["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["worker"]}]}]}
    [(field, message)] = causes_of(server, both)
    assert field == "spec"
    assert message.startswith('Invalid value: "{`nodeName`, `nodeSelector`}": exactly one of')
    none = S()
    del none["spec"]["nodeName"]
    assert causes_of(server, none) == [("spec", "Required value: exactly one of `nodeName`, "
                                        "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` "
                                        "is required")]
    false = S()
    false["spec"]["allNodes"] = False
    assert causes_of(server, false) == [
        ("spec.allNodes", "Invalid value: false: must be either unset or set to true")]


def test_pool_and_driver(server: EmbeddedAPIServer) -> None:
    body = S()
    body["spec"]["pool"] = {"name": "x/" * 126 + "xy", "resourceSliceCount": 0,
                            "generation": -1}
    assert causes_of(server, body) == [
        ("spec.pool.name", "Too long: may not be more than 253 bytes"),
        ("spec.pool.generation", "Invalid value: -1: must be greater than or equal to zero"),
        ("spec.pool.resourceSliceCount", "Invalid value: 0: must be greater than zero"),
    ]
    bad_driver = S()
    bad_driver["spec"]["driver"] = "!@#$%^"
    [(field, message)] = causes_of(server, bad_driver)
    assert field == "spec.driver"
    assert message.startswith('Invalid value: "!@#$%^": a lowercase RFC 1123 subdomain')
    both = S()
    both["spec"]["sharedCounters"] = [{"name": "counterset", "counters": {
        "memory": {"value": "1Gi"}}}]
    assert causes_of(server, both) == [
        ("spec", 'Invalid value: "": only one of `sharedCounters` or `devices` is allowed')]


def test_devices(server: EmbeddedAPIServer) -> None:
    body = S(3)
    body["spec"]["devices"][1]["name"] = "!@#$%^"
    body["spec"]["devices"][2]["name"] = "gpu-0"
    causes = causes_of(server, body)
    assert causes[0][0] == "spec.devices[1].name"
    assert "a lowercase RFC 1123 label" in causes[0][1]
    assert causes[1] == ("spec.devices[2]", 'Duplicate value: "gpu-0"')

    attrs = S()
    attrs["spec"]["devices"][0]["attributes"] = {
        "foo": {"string": "x", "version": "1.2.3"}, "long": {"string": "x" * 65}}
    causes = causes_of(server, attrs)
    assert causes[0][0] == "spec.devices[0].attributes[foo]"
    assert causes[0][1].endswith("exactly one value must be specified")
    assert causes[1] == ("spec.devices[0].attributes[long].string",
                         "Too long: may not be more than 64 bytes")

    many = S()
    many["spec"]["devices"][0]["attributes"] = {f"attr_{i}": {"string": "s"} for i in range(32)}
    assert causes_of(server, many) == [("spec.devices[0]", "Invalid value: 33: the total number "
                                        "of attributes and capacities must not exceed 32")]


def test_attribute_shapes(server: EmbeddedAPIServer) -> None:
    """Each attribute on its own: one member (checked without building paths), the
    64-byte limit in bytes, and the shapes that are not exactly one member."""
    body = S(2)
    body["spec"]["devices"][1]["attributes"] = {
        "ok_int": {"int": 5}, "ok_bool": {"bool": False}, "ok_version": {"version": "1.2.3"},
        "ok_multibyte": {"string": "é" * 32}, "too_long_multibyte": {"string": "é" * 33},
        "long_version": {"version": "1." * 40}, "empty": {}, "unknown": {"float": 1.5},
        "not_a_map": "x", "list": {"ints": [1, 2]}, "null": {"string": None}}
    one = 'Invalid value: "": exactly one value must be specified'
    too_long = "Too long: may not be more than 64 bytes"
    p = "spec.devices[1].attributes"
    assert causes_of(server, body) == [
        (f"{p}[too_long_multibyte].string", too_long), (f"{p}[long_version].version", too_long),
        (f"{p}[empty]", one), (f"{p}[unknown]", one), (f"{p}[not_a_map]", one),
        (f"{p}[null]", one),
        # the real server checks semver and length separately (validation_resourceslice_test.go)
        (f"{p}[long_version].version", f'Invalid value: "{"1." * 40}": '
                                       "must be a string compatible with semver.org spec 2.0.0")]


def test_immutable_fields_on_update(server: EmbeddedAPIServer) -> None:
    created = server.create_object("resourceslices", S())
    changed = copy.deepcopy(created)
    changed["spec"]["nodeName"] = "bar"
    with pytest.raises(ApiError) as info:
        server.update_object("resourceslices", changed)
    assert info.value.details["causes"][0]["field"] == "spec.nodeName"


# ---------------------------------------------------------------------- claim status


def claim_with_status(server: EmbeddedAPIServer, devices: list[dict[str, Any]]) -> None:
    server.create_claim("default", "c", [{"request": "foo", "driver": "foo", "pool": "foo",
                                          "device": "foo"}])
    stored = server.get_object("resourceclaims", "c", "default")
    assert stored is not None
    stored["status"]["devices"] = devices
    server.update_object("resourceclaims", stored, subresource="status")


def cond(t: str) -> dict[str, Any]:
    return {"type": t, "status": "True", "reason": "test_reason",
            "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 0}


def test_status_at_every_limit_is_valid(server: EmbeddedAPIServer) -> None:  # vector 29
    ips = ["10.9.8.0/24", "2001:db8::/64", "10.9.8.1/24", "2001:db8::1/64"] + [
        f"10.9.8.{i}/24" for i in range(2, 14)]
    claim_with_status(server, [{
        "driver": "foo", "pool": "foo", "device": "foo",
        "conditions": [cond(f"test-{i}") for i in range(8)],
        "data": {"kind": "foo", "apiVersion": "dra.example.com/v1", "pad": "x" * 10150},
        "networkData": {"interfaceName": "x" * 256, "hardwareAddress": "x" * 128, "ips": ips},
    }])


def status_causes(server: EmbeddedAPIServer, devices: list[dict[str, Any]]) -> list[
        tuple[str, str]]:
    with pytest.raises(ApiError) as info:
        claim_with_status(server, devices)
    assert info.value.code == 422
    return [(c["field"], c["message"]) for c in info.value.details["causes"]]


def test_status_network_data_limits(server: EmbeddedAPIServer) -> None:  # vector 30
    causes = status_causes(server, [{"driver": "foo", "pool": "foo", "device": "foo",
                                     "networkData": {
                                         "interfaceName": "x" * 257,
                                         "hardwareAddress": "x" * 129,
                                         "ips": ["300.9.8.0/24", "010.009.008.000/24",
                                                 "2001:0db8::1/64"]}}])
    p = "status.devices[0].networkData"
    assert causes == [
        (f"{p}.interfaceName", "Too long: may not be more than 256 bytes"),
        (f"{p}.hardwareAddress", "Too long: may not be more than 128 bytes"),
        (f"{p}.ips[0]", 'Invalid value: "300.9.8.0/24": must be a valid address in CIDR form, '
                        "(e.g. 10.9.8.7/24 or 2001:db8::1/64)"),
        (f"{p}.ips[1]", 'Invalid value: "010.009.008.000/24": must be in canonical form '
                        '("10.9.8.0/24")'),
        (f"{p}.ips[2]", 'Invalid value: "2001:0db8::1/64": must be in canonical form '
                        '("2001:db8::1/64")'),
    ]


def test_status_over_limits_and_duplicates(server: EmbeddedAPIServer) -> None:  # E13, E15
    causes = status_causes(server, [
        {"driver": "foo", "pool": "foo", "device": "foo",
         "conditions": [cond(f"c{i}") for i in range(9)],
         "data": {"pad": "x" * 10240},
         "networkData": {"ips": [f"10.0.0.{i}/24" for i in range(17)]}},
        {"driver": "foo", "pool": "foo", "device": "foo",
         "networkData": {"ips": ["2001:db8::1/64", "2001:db8::1/64"]}},
    ])
    fields = [f for f, _ in causes]
    assert ("status.devices[0].conditions", "Too many: 9: must have at most 8 items") in causes
    assert ("status.devices[0].data", "Too long: may not be more than 10240 bytes") in causes
    assert ("status.devices[0].networkData.ips",
            "Too many: 17: must have at most 16 items") in causes
    assert ("status.devices[1].networkData.ips[1]",
            'Duplicate value: "2001:db8::1/64"') in causes
    assert "status.devices[1]" in fields  # the duplicated entry


def test_status_entry_must_be_allocated(server: EmbeddedAPIServer) -> None:  # E12
    causes = status_causes(server, [{"driver": "b", "pool": "a", "device": "r"}])
    assert causes == [("status.devices[0]", 'Invalid value: {"Driver":"b","Pool":"a",'
                       '"Device":"r","ShareID":""}: must be an allocated device in the claim')]


@pytest.mark.parametrize(("value", "ok"), [
    ("10.9.8.7/24", True), ("10.9.8.0/24", True), ("2001:db8::1/64", True),
    ("10.9.8.7", False), ("::ffff:10.1.2.3/120", False), ("10.9.8.7/33", False),
    ("2001:DB8::1/64", False), ("10.9.8.7/024", False),
])
def test_interface_address(value: str, ok: bool) -> None:
    assert (check_interface_address("ips[0]", value) == []) is ok
