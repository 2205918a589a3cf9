"""Test vectors rewritten from k8s.io/kubernetes
pkg/apis/resource/validation/validation_resourceslice_test.go, against
drakit.plugin.slices.rules.

Each vector is a change to the baseline slice S and the errors the API server reports,
compared on (path, type) and, where the sheet gives it, the full rendered text.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from drakit.plugin.slices import formats
from drakit.plugin.slices.rules import RuleOptions, validate_slice

BAD = "!@#$%^"


def D(n: int) -> dict[str, Any]:
    return {
        "name": f"device-{n}",
        "attributes": {"int": {"int": 42}, "string": {"string": "hello world"},
                       "version": {"version": "1.2.3"}, "bool": {"bool": True}},
        "capacity": {"memory": {"value": "1Gi"}},
    }


def S(n: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "foo"},
        "spec": {"driver": "test.example.com", "nodeName": "foo",
                 "pool": {"name": "foo", "generation": 0, "resourceSliceCount": 1},
                 "devices": [D(i) for i in range(n)]},
    }


def with_(n: int, fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    s = S(n)
    fn(s["spec"])
    return s


def _taint_all(spec: dict[str, Any]) -> None:
    for d in spec["devices"]:
        d["taints"] = [{"key": "example.com/taint", "effect": "NoExecute"}]


def _consume_first(spec: dict[str, Any]) -> None:
    spec["devices"][0]["consumesCounters"] = [
        {"counterSet": "counterset-0", "counters": {"memory": {"value": "1Gi"}}}]


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def fn(spec: dict[str, Any]) -> None:
        target: Any = spec
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value
    return fn


def _many(*fns: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def fn(spec: dict[str, Any]) -> None:
        for f in fns:
            f(spec)
    return fn


def _del(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec.pop(key)


def _policy(policy: dict[str, Any], value: str = "1Gi", amr: bool = True,
            key: str = "cap", idx: int = 0) -> Callable[[dict[str, Any]], None]:
    def fn(spec: dict[str, Any]) -> None:
        dev = spec["devices"][idx]
        if amr:
            dev["allowMultipleAllocations"] = True
        dev["capacity"] = {key: {"value": value, "requestPolicy": policy}}
    return fn


SEL = {"nodeSelectorTerms": [{"matchFields": [
    {"key": "metadata.name", "operator": "In", "values": ["worker"]}]}]}
LABEL_MSG = formats.DNS_LABEL_MSG
SUB_MSG = formats.DNS_SUBDOMAIN_MSG
C_MSG = formats.C_IDENTIFIER_MSG
P1 = "spec.devices[1].capacity[cap].requestPolicy"
PA = "spec.devices[0].capacity[a].requestPolicy"

# (id, slice, expected: list of (path, type) or full texts, options)
Vector = tuple[str, dict[str, Any], list[Any], RuleOptions]
PARITY = RuleOptions()

VECTORS: list[Vector] = [
    ("1", S(128), [], PARITY),
    ("2", S(129), ["spec.devices: Too many: 129: must have at most 128 items"], PARITY),
    ("3", with_(64, _taint_all), [], PARITY),
    ("4", with_(65, _taint_all), ["spec.devices: Too many: 65: must have at most 64 items"],
     PARITY),
    ("5", with_(65, _consume_first), ["spec.devices: Too many: 65: must have at most 64 items"],
     PARITY),
    ("6", with_(1, _set(["sharedCounters"], [{"name": "counterset",
                                              "counters": {"memory": {"value": "1Gi"}}}])),
     ['spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed'], PARITY),
    ("7", with_(1, _many(_set(["nodeName"], "worker"), _set(["nodeSelector"], SEL))),
     ['spec: Invalid value: "{`nodeName`, `nodeSelector`}": exactly one of `nodeName`, '
      "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields "
      "are set"], PARITY),
    ("8", with_(1, _del("nodeName")),
     ["spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
      "`perDeviceNodeSelection` is required"], PARITY),
    ("9", with_(1, _many(_set(["nodeName"], "worker"), _set(["allNodes"], False))),
     ["spec.allNodes: Invalid value: false: must be either unset or set to true"], PARITY),
    ("10", with_(1, _many(_del("nodeName"), _set(["nodeSelector"], {}))),
     ["spec.nodeSelector.nodeSelectorTerms: Required value: must have at least one node "
      "selector term",
      "spec.nodeSelector.nodeSelectorTerms: Invalid value: null: must have exactly one node "
      "selector term"], PARITY),
    ("11", with_(1, _set(["pool"], {"name": "x/" * 126 + "xy", "resourceSliceCount": 0,
                                    "generation": -1})),
     ["spec.pool.name: Too long: may not be more than 253 bytes",
      "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero",
      "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero"], PARITY),
    ("12", with_(1, _set(["pool", "name"], "x" * 253)), [], PARITY),
    ("13", with_(1, _set(["driver"], BAD)), [f'spec.driver: Invalid value: "{BAD}": {SUB_MSG}'],
     PARITY),
    ("14", with_(3, _set(["devices", 1, "name"], BAD)),
     [f'spec.devices[1].name: Invalid value: "{BAD}": {LABEL_MSG}'], PARITY),
    ("15", with_(2, _set(["devices", 1, "attributes"], {BAD: {}})),
     [f'spec.devices[1].attributes: Invalid value: "{BAD}": {C_MSG}',
      f'spec.devices[1].attributes[{BAD}]: Invalid value: "": exactly one value must be '
      "specified"], PARITY),
    ("16", with_(1, _set(["devices", 0, "attributes"], {"foo": {"string": "x",
                                                                "version": "1.2.3"}})),
     ['spec.devices[0].attributes[foo]: Invalid value: {"string":"x","version":"1.2.3"}: '
      "exactly one value must be specified"], PARITY),
    ("17", with_(1, _set(["devices", 0, "attributes"], {"foo": {"version": "x" * 65}})),
     [f'spec.devices[0].attributes[foo].version: Invalid value: "{"x" * 65}": must be a string '
      "compatible with semver.org spec 2.0.0",
      "spec.devices[0].attributes[foo].version: Too long: may not be more than 64 bytes"],
     PARITY),
    ("18", with_(1, _set(["devices", 0, "attributes"], {"foo": {"string": "x" * 65}})),
     ["spec.devices[0].attributes[foo].string: Too long: may not be more than 64 bytes"], PARITY),
    ("19", with_(2, _set(["devices", 1, "attributes"], {
        "x" * 32: {"string": "y"}, "x" * 63 + "/" + "y" * 32: {"string": "z"}})), [], PARITY),
    ("20", with_(2, _set(["devices", 1, "attributes"], {"x" * 64 + "/" + "y" * 33:
                                                        {"string": "z"}})),
     ["spec.devices[1].attributes: Too long: may not be more than 63 bytes",
      "spec.devices[1].attributes: Too long: may not be more than 32 bytes"], PARITY),
    ("21", with_(2, _set(["devices", 1, "attributes"], {"/": {"string": "z"}})),
     ['spec.devices[1].attributes: Invalid value: "": the domain must not be empty',
      'spec.devices[1].attributes: Invalid value: "": the name must not be empty'], PARITY),
    ("22", with_(4, _many(
        _set(["devices", 3, "attributes"], {f"attr_{i}": {"string": "x"} for i in range(32)}),
        _set(["devices", 3, "capacity"], {"cap": {"value": "1Gi"}}))),
     ["spec.devices[3]: Invalid value: 33: the total number of attributes and capacities must "
      "not exceed 32"], PARITY),
    ("23", with_(2, _policy({"default": "1Mi", "validRange": {"min": "1Mi"}}, amr=False, idx=1)),
     [f"{P1}: Forbidden: allowMultipleAllocations must be true"], PARITY),
    ("24", with_(2, _policy({"default": "10Mi", "validRange": {"min": "1Mi", "max": "100Mi",
                                                              "step": "0"}}, idx=1)),
     [f'{P1}.validRange.step: Invalid value: "0": must be greater than zero'], PARITY),
    ("24b", with_(2, _policy({"default": "10Mi", "validRange": {"min": "1Mi", "max": "100Mi",
                                                               "step": "-1Mi"}}, idx=1)),
     [f'{P1}.validRange.step: Invalid value: "-1Mi": must be greater than zero'], PARITY),
    ("25", with_(1, _policy({"default": "10", "validValues": ["5", "10", "100"],
                             "validRange": {"min": "10"}}, value="100", key="a")),
     [f'{PA}: Forbidden: exactly one policy can be specified, cannot specify "validValues" and '
      '"validRange" at the same time'], PARITY),
    ("26", with_(1, _policy({"default": "1.05", "validRange": {"min": "1.1"}}, value="100",
                            key="a")),
     [f'{PA}.validRange.default: Invalid value: "1050m": default is less than min: 1100m'],
     PARITY),
    ("27", with_(1, _policy({"default": "10", "validValues": ["5", "10", "100"]}, value="-1",
                            key="a")),
     [f'{PA}.validValues[{j}]: Invalid value: "{v}": option is larger than capacity value: -1'
      for j, v in enumerate(["5", "10", "100"])], PARITY),
    ("28", with_(1, _set(["devices", 0, "taints"], [
        {"key": "example.com/taint", "effect": "NoExecute"},
        {"key": "taint", "value": "tainted", "effect": "NoSchedule",
         "timeAdded": "2025-01-01T00:00:00Z"},
        {},
        {"key": BAD, "value": BAD, "effect": "some-other-effect"}])),
     [("spec.devices[0].taints[2].key", "Invalid value"),
      ("spec.devices[0].taints[2].key", "Invalid value"),
      ("spec.devices[0].taints[2].effect", "Required value"),
      ("spec.devices[0].taints[3].key", "Invalid value"),
      ("spec.devices[0].taints[3].value", "Invalid value"),
      'spec.devices[0].taints[3].effect: Unsupported value: "some-other-effect": supported '
      'values: "NoExecute", "NoSchedule", "None"'], PARITY),
    ("E1", with_(1, _set(["devices", 0, "taints"],
                         [{"key": "example.com/taint", "effect": "NoExecute"}] * 17)),
     ["spec.devices[0].taints: Too many: 17: must have at most 16 items"], PARITY),
    ("E2", with_(1, _set(["perDeviceNodeSelection"], True)),
     [("spec", "Invalid value"), ("spec.devices[0]", "Required value")], PARITY),
    ("E3", with_(1, _many(_del("nodeName"), _set(["perDeviceNodeSelection"], True),
                          _set(["devices", 0, "nodeName"], ""),
                          _set(["devices", 0, "allNodes"], False))),
     ['spec.devices[0].nodeName: Invalid value: "": must not be empty',
      "spec.devices[0].allNodes: Invalid value: false: must be either unset or set to true",
      ("spec.devices[0]", "Required value")], PARITY),
    ("E4", with_(0, _many(_del("devices"), _set(["sharedCounters"], [
        {"name": "foo", "counters": {"c": {"value": "1"}}}] * 2))),
     ['spec.sharedCounters[1]: Duplicate value: "foo"'], PARITY),
    ("E5", with_(0, _many(_del("devices"), _set(["sharedCounters"], [
        {"name": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(9)]))),
     ["spec.sharedCounters: Too many: 9: must have at most 8 items"], PARITY),
    ("E6", with_(0, _many(_del("devices"), _set(["sharedCounters"], [
        {"name": "foo", "counters": {BAD: {"value": "1"}}}]))),
     [f'spec.sharedCounters[0].counters: Invalid value: "{BAD}": {LABEL_MSG}'], PARITY),
    ("E7", with_(1, _set(["devices", 0, "consumesCounters"], [
        {"counterSet": f"counterset-{i}", "counters": {"c": {"value": "1"}}} for i in range(3)])),
     ["spec.devices[0].consumesCounters: Too many: 3: must have at most 2 items"], PARITY),
    ("E8", with_(1, _many(_set(["devices", 0, "bindingConditions"], ["c1", "c2"]),
                          _set(["devices", 0, "bindingFailureConditions"], ["c1", "c3"]))),
     ['spec.devices[0].bindingFailureConditions[0]: Invalid value: "c1": '
      "bindingFailureConditions must not overlap with bindingConditions"], PARITY),
    ("E9", with_(1, _set(["devices", 0, "bindingFailureConditions"], ["c1", "c2"])),
     ["spec.devices[0].bindingConditions: Invalid value: null: bindingConditions are required "
      "to use bindingFailureConditions"], PARITY),
    # kube-apiserver 1.37.2 also gives the declarative union error (an empty list counts
    # as unset): tests/real/test_real_differential.py, step "list attribute empty"
    ("E10", with_(1, _set(["devices", 0, "attributes"], {"foo": {"ints": []}})),
     ["spec.devices[0].attributes[foo].ints: Invalid value: []: must not be empty if "
      "specified",
      'spec.devices[0].attributes[foo]: Invalid value: "": must specify one of: `int`, '
      "`bool`, `string`, `version`, `ints`, `bools`, `strings`, `versions`"], PARITY),
    ("E16", with_(1, _policy({"default": "0", "validRange": {"min": "-1", "step": "1"}},
                             value="10", key="a")),
     [f'{PA}.validRange.min: Invalid value: "-1": must be greater than or equal to 0'], PARITY),
    ("E17", with_(1, _policy({"default": "10", "validValues": ["9.9", "10", "100"]},
                             value="100", key="a")),
     [f'{PA}.validValues[1]: Duplicate value: "10"'], PARITY),
    ("E17-gate-on", with_(1, _policy({"default": "10", "validValues": ["9.9", "10", "100"]},
                                     value="100", key="a")),
     [], RuleOptions(fractional_capacity_range=True)),
]


def _normalize(expected: list[Any]) -> tuple[list[tuple[str, str]], list[str]]:
    keys, texts = [], []
    for e in expected:
        if isinstance(e, tuple):
            keys.append(e)
        else:
            path, _, rest = e.partition(": ")
            keys.append((path, rest.split(":", 1)[0]))
            texts.append(e)
    return sorted(keys), texts


@pytest.mark.parametrize(("obj", "expected", "opts"), [v[1:] for v in VECTORS],
                         ids=[v[0] for v in VECTORS])
def test_vector(obj: dict[str, Any], expected: list[Any], opts: RuleOptions) -> None:
    errors = validate_slice(copy.deepcopy(obj), opts)
    keys, texts = _normalize(expected)
    assert sorted(e.key() for e in errors) == keys, [str(e) for e in errors]
    rendered = {str(e) for e in errors}
    for t in texts:
        assert t in rendered


def test_e2_messages() -> None:
    errors = validate_slice(with_(1, _set(["perDeviceNodeSelection"], True)))
    text = {str(e) for e in errors}
    assert ('spec: Invalid value: "{`nodeName`, `perDeviceNodeSelection`}": exactly one of '
            "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but "
            "multiple fields are set") in text
    assert ("spec.devices[0]: Required value: exactly one of `nodeName`, `nodeSelector`, or "
            "`allNodes` is required when `perDeviceNodeSelection` is set to true in the "
            "ResourceSlice spec") in text


def test_taint_vector_28_texts() -> None:
    obj = VECTORS[[v[0] for v in VECTORS].index("28")][1]
    text = {str(e) for e in validate_slice(copy.deepcopy(obj))}
    assert 'spec.devices[0].taints[2].key: Invalid value: "": name part must be non-empty' in text
    assert ('spec.devices[0].taints[3].value: Invalid value: "!@#$%^": '
            + formats.LABEL_VALUE_MSG) in text
