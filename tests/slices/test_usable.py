"""Checks the API server does not make (drakit.plugin.slices.usable): a device that could
never be allocated, or whose quantities mix kinds of unit, is named and left out; --strict
refuses it."""

from __future__ import annotations

import pytest

from drakit.discovery.model import CounterSet, Device, DeviceCounterConsumption, Pool
from drakit.plugin.slices.usable import unit_kind
from drakit.plugin.slices.validate import SliceValidationError, validate_pool

DRIVER = "fpga.example.com"
NODE = "node-1"


def partitioned(held: dict[str, str | int], *consumed: dict[str, str | int]) -> Pool:
    return Pool(name=NODE, counter_sets=[CounterSet(name="card-0", counters=held)],
                devices=[Device(name=f"slot-{i}", consumes_counters=[
                    DeviceCounterConsumption(counter_set="card-0", counters=c)])
                    for i, c in enumerate(consumed)])


def test_a_device_consuming_more_than_its_counter_set_holds_is_dropped() -> None:
    pool = partitioned({"memory": 1_000_000, "cores": 4},
                       {"memory": 250_000, "cores": 1}, {"memory": 2_000_000, "cores": 1})
    res = validate_pool(pool, DRIVER, NODE)
    assert res.pool is not None
    assert [d["name"] for d in res.pool.devices] == ["slot-0"]
    [issue] = res.issues
    assert issue.device == "slot-1" and issue.action == "device dropped"
    assert issue.field == "spec.devices[1].consumesCounters[0].counters[memory].value"
    assert "consumes more than counter set card-0 holds (memory: 1000000)" in str(issue)


def test_each_counter_is_checked_on_its_own() -> None:
    """Memory fits, cores do not: the device is still dead."""
    res = validate_pool(partitioned({"memory": "16Gi", "cores": "4"},
                                    {"memory": "4Gi", "cores": "5"}), DRIVER, NODE)
    assert [i.field for i in res.issues] == [
        "spec.devices[0].consumesCounters[0].counters[cores].value"]


def test_equal_amounts_in_different_suffixes_of_one_kind_fit() -> None:
    res = validate_pool(partitioned({"memory": "16Gi"}, {"memory": "16384Mi"},
                                    {"memory": 17179869184}), DRIVER, NODE)
    assert res.issues == []


def test_a_counter_in_two_kinds_of_unit_is_named() -> None:
    res = validate_pool(partitioned({"memory": "16Gi"}, {"memory": "4G"}), DRIVER, NODE)
    [issue] = res.issues
    assert issue.field == "spec.devices[0].consumesCounters[0].counters[memory].value"
    assert "a decimal unit cannot be compared with the binary unit of counter memory in " \
           "counter set card-0 (16Gi)" in str(issue)


def test_a_capacity_policy_in_another_kind_of_unit_is_named() -> None:
    dev = Device(name="fpga-0", allow_multiple_allocations=True, capacity={
        "memory": {"value": "16Gi", "request_policy": {
            "default": "2G", "valid_range": {"min": "1G"}}}})
    res = validate_pool(Pool(name=NODE, devices=[dev]), DRIVER, NODE)
    assert [i.field for i in res.issues] == [
        "spec.devices[0].capacity[memory].requestPolicy.default",
        "spec.devices[0].capacity[memory].requestPolicy.validRange.min"]
    assert "binary unit of capacity memory's value (16Gi)" in str(res.issues[0])


def test_strict_refuses_and_says_so() -> None:
    from drakit.plugin.slices.plan import desired_state
    from drakit.plugin.slices.rules import DRAKIT_DEFAULT

    pool = partitioned({"memory": 1_000_000}, {"memory": 2_000_000})
    with pytest.raises(SliceValidationError) as err:
        desired_state([pool], DRIVER, NODE, DRAKIT_DEFAULT, strict=True)
    text = str(err.value)
    assert "refused" in text and "(device dropped)" not in text, text
    assert text.splitlines()[1].endswith("(refused)"), text


@pytest.mark.parametrize(("text", "kind"), [
    ("16Gi", "binary"), ("4G", "decimal"), ("500m", "decimal"), ("98", None), (98, None),
    ("1e9", None), ("16GB", None)])
def test_unit_kind(text: str | int, kind: str | None) -> None:
    assert unit_kind(text) == kind
