"""String formats, quantities, content keys and version conversion."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from drakit.plugin.api.convert import (
    claim_from_version,
    claim_to_version,
    slice_from_version,
    slice_to_version,
)
from drakit.plugin.slices import formats
from drakit.plugin.slices.compare import carry_time_added, content_key
from drakit.plugin.slices.quantity import QuantityError, parse
from drakit.plugin.slices.rules import RuleOptions, validate_capacity


@pytest.mark.parametrize(("text", "value", "canonical"), [
    ("1.05", Decimal("1.05"), "1050m"),
    ("1.5Gi", Decimal(1610612736), "1536Mi"),
    ("1024Mi", Decimal(1073741824), "1Gi"),
    ("1000", Decimal(1000), "1k"),
    ("1500", Decimal(1500), "1500"),
    ("-1", Decimal(-1), "-1"),
    ("1e3", Decimal(1000), "1e3"),
    ("1E", Decimal(10) ** 18, "1E"),
    ("0.0000000001", Decimal("1e-9"), "1n"),
    ("100m", Decimal("0.1"), "100m"),
    (5, Decimal(5), "5"),
])
def test_quantity(text: Any, value: Decimal, canonical: str) -> None:
    q = parse(text)
    assert q.value == value and str(q) == canonical


@pytest.mark.parametrize("text", ["", "1e", "abc", "1 Gi", ".", "1Ki2", "Gi", "1.2.3", True])
def test_bad_quantity(text: Any) -> None:
    with pytest.raises(QuantityError):
        parse(text)


@pytest.mark.parametrize(("key", "ok"), [
    ("model", True), ("_x9", True), ("x" * 32, True), ("x" * 33, False), ("9x", False),
    ("gpu.example.com/model", True), ("GPU.Example.COM/model", True), ("a/b/c", False),
    ("/x", False), ("x/", False), ("", False), ("bad domain/x", False),
])
def test_qualified_names(key: str, ok: bool) -> None:
    assert (formats.qualified_name(key, "p") == []) is ok


@pytest.mark.parametrize(("key", "ok"), [
    ("example.com/taint", True), ("taint", True), ("a" * 63, True), ("a" * 64, False),
    ("/taint", False), ("example.com/", False), ("a/b/c", False), ("-x", False),
])
def test_label_keys(key: str, ok: bool) -> None:
    assert (formats.label_key(key, "p") == []) is ok


@pytest.mark.parametrize(("v", "ok"), [
    ("1.2.3", True), ("0.0.0", True), ("1.0.0-rc.1+build.5", True), ("v1.2.3", False),
    ("1.2", False), ("01.2.3", False), ("1.2.3\n", False), ("1.2.3-01", False),
])
def test_semver(v: str, ok: bool) -> None:
    assert (formats.semver(v, "p") == []) is ok


def test_lengths_count_utf8_bytes() -> None:
    assert formats.nbytes("é" * 32) == 64
    assert formats.dns_label("é", "p")
    assert formats.is_label_value("") and not formats.is_label_value("-a")


def test_dns_label_with_dots_says_so() -> None:
    [err] = formats.dns_label("a.b", "spec.devices[0].name")
    assert err.detail == "must not contain dots"


@pytest.mark.parametrize(("policy", "value", "paths"), [
    ({"default": "1", "validValues": ["1", "3", "2"]}, "10", ["P.validValues[2]"]),
    ({"validValues": ["1"]}, "10", ["P.default"]),
    ({"default": "4", "validValues": ["1", "2"]}, "10", ["P.validValues"]),
    ({"default": "1", "validValues": [str(i) for i in range(11)]}, "100",
     ["P.validValues", "P.validValues"]),
    ({"default": "5", "validRange": {"min": "1", "max": "20"}}, "10", ["P.validRange.max"]),
    ({"default": "5", "validRange": {"min": "4", "max": "2"}}, "10",
     ["P.validRange.default", "P.validRange.max"]),
    ({"default": "5", "validRange": {"min": "1", "step": "2", "max": "8"}}, "10",
     ["P.validRange.step"]),
    ({"default": "5", "validRange": {"min": "1", "step": "2", "max": "9"}}, "10", []),
    ({"default": "5", "validRange": {"max": "9"}}, "10", ["P.validRange.min"]),
    ({"default": "5", "validRange": {"min": "9", "step": "2"}}, "10",
     ["P.validRange.default", "P.validRange.step"]),
    ({"default": "6", "validRange": {"min": "1", "step": "2"}}, "10", ["P.validRange.step"]),
])
def test_request_policy_rules(policy: dict[str, Any], value: str, paths: list[str]) -> None:
    errors = validate_capacity("c", {"value": value, "requestPolicy": policy}, "m", True)
    prefix = "m[c].requestPolicy"
    assert sorted(e.field.replace(prefix, "P") for e in errors) == sorted(paths), \
        [str(e) for e in errors]


def test_fractional_gate_milli_mode() -> None:
    policy = {"default": "0.5", "validRange": {"min": "0.0001"}}
    errors = validate_capacity("c", {"value": "1", "requestPolicy": policy}, "m", True,
                               RuleOptions(fractional_capacity_range=True))
    assert [e.detail for e in errors] == ["value cannot be represented as a milli value"]


def test_content_key_ignores_server_spelling() -> None:
    sent = {"driver": "d", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "a", "attributes": {}, "capacity": {"m": {"value": "1024Mi"}},
                         "taints": [{"key": "k", "effect": "NoSchedule"}]}]}
    stored = {"driver": "d", "pool": {"name": "p", "generation": 5, "resourceSliceCount": 2},
              "devices": [{"name": "a", "capacity": {"m": {"value": "1Gi"}},
                           "taints": [{"key": "k", "effect": "NoSchedule",
                                       "timeAdded": "2025-01-01T00:00:00Z"}]}]}
    assert content_key(sent) == content_key(stored)
    stored["devices"][0]["capacity"]["m"]["value"] = "2Gi"
    assert content_key(sent) != content_key(stored)
    carried = carry_time_added(sent, stored)
    assert carried["devices"][0]["taints"][0]["timeAdded"] == "2025-01-01T00:00:00Z"
    assert "timeAdded" not in sent["devices"][0]["taints"][0]


def test_slice_conversion_round_trip() -> None:
    v1 = {"metadata": {"name": "s"}, "spec": {"driver": "d", "nodeName": "n",
          "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
          "devices": [{"name": "a", "attributes": {"x": {"int": 1}},
                       "consumesCounters": [{"counterSet": "s", "counters": {}}]}]}}
    beta1 = slice_to_version(v1, "v1beta1")
    assert beta1["apiVersion"] == "resource.k8s.io/v1beta1"
    assert beta1["spec"]["devices"][0] == {"name": "a", "basic": {
        "attributes": {"x": {"int": 1}}, "consumesCounters": [{"counterSet": "s",
                                                                "counters": {}}]}}
    back = slice_from_version(beta1, "v1beta1")
    assert back["spec"] == v1["spec"] and "basic" not in v1["spec"]["devices"][0]
    assert slice_to_version(v1, "v1beta2")["spec"] == v1["spec"]
    with pytest.raises(ValueError):
        slice_to_version(v1, "v2")


def test_claim_conversion() -> None:
    beta1 = {"spec": {"devices": {"requests": [
        {"name": "gpu", "deviceClassName": "c", "count": 2, "allocationMode": "ExactCount"},
        {"name": "alt", "firstAvailable": [{"name": "s", "deviceClassName": "c"}]}]}},
        "status": {"allocation": {"devices": {"results": [{"request": "gpu"}]}}}}
    v1 = claim_from_version(beta1, "v1beta1")
    assert v1["spec"]["devices"]["requests"][0] == {"name": "gpu", "exactly": {
        "deviceClassName": "c", "count": 2, "allocationMode": "ExactCount"}}
    assert v1["spec"]["devices"]["requests"][1] == beta1["spec"]["devices"]["requests"][1]
    assert v1["status"] == beta1["status"]
    assert claim_to_version(v1, "v1beta1")["spec"] == beta1["spec"]
