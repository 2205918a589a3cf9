"""The vendor's guide says what the publisher leaves out of a pool that breaks an API rule
(docs/vendor-guide.md, "drakit names the culprit"): each outcome it names is what
``validate_pool`` does for such a pool, and every action of the code has its row."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from drakit.discovery import Counter, CounterSet, Device, DeviceAttribute, Pool
from drakit.discovery.model import DeviceCounterConsumption
from drakit.plugin.slices.validate import Action, validate_pool

GUIDE = (Path(__file__).resolve().parents[2] / "docs" / "vendor-guide.md").read_text()
DRIVER = "gpu.example.com"


def _device(name: str = "dev-0", **kwargs: object) -> Device:
    return Device(name=name, **kwargs)  # type: ignore[arg-type]


# the guide's outcome → (a pool that breaks a rule that way, the action of the code)
CASES: dict[str, tuple[Pool, Action]] = {
    "only that attribute is dropped; the device is published without it": (
        Pool(name="node-1", devices=[_device(attributes={
            "model": DeviceAttribute(string="x" * 65), "ok": DeviceAttribute(int_=1)})]),
        "attribute dropped"),
    "the device is left out, the rest of the pool published": (
        Pool(name="node-1", devices=[
            _device("dev-0", consumes_counters=[DeviceCounterConsumption(
                counter_set="nosuch", counters={"memory": Counter(value="1Gi")})]),
            _device("dev-1")]),
        "device dropped"),
    "the counter set is left out, and with it every device that consumes from it": (
        Pool(name="node-1", counter_sets=[CounterSet(name="Bad_Set", counters={
            "memory": Counter(value="1Gi")})]),
        "counter set dropped"),
    "the whole pool is left out": (Pool(name="Bad Pool", devices=[_device()]), "pool skipped"),
    "only that field is dropped": (
        Pool(name="node-1", devices=[_device()],
             partition_type_attribute="gpu.example.com/partitionType"),
        "field dropped"),
}


@pytest.mark.parametrize("outcome", CASES)
def test_each_outcome_the_guide_names_is_what_the_publisher_does(outcome: str) -> None:
    assert f"| {outcome} |" in GUIDE, outcome
    pool, action = CASES[outcome]
    result = validate_pool(pool, DRIVER, "node-1")
    assert [i.action for i in result.issues] == [action], result.issues
    if action == "attribute dropped":
        assert result.pool is not None
        [device] = result.pool.devices
        assert device["attributes"] == {"ok": {"int": 1}}
    if action == "device dropped":
        assert result.pool is not None
        assert [d["name"] for d in result.pool.devices] == ["dev-1"]


def test_every_action_of_the_publisher_has_its_row() -> None:
    assert {action for _, action in CASES.values()} == set(get_args(Action))
