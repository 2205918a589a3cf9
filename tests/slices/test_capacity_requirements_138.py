"""Kubernetes 1.38 limits a request's ``capacity.requests`` and an allocation result's
``consumedCapacity`` to ``MaxCapacityRequirements`` = 32 entries of non-negative quantities
(resource.k8s.io/v1 ``CapacityRequirements``, ``maxProperties=32``). drakit checks an
allocation it reads the same way: a result beyond that is refused for that claim, naming the
field."""

from __future__ import annotations

from typing import Any

import pytest

from drakit.plugin.claims.resourceclaim import ClaimError, allocated_devices
from drakit.plugin.slices.rules import MAX_CAPACITY_REQUIREMENTS, validate_capacity_amounts

DRIVER = "gpu.example.com"


def _claim(consumed: dict[str, Any]) -> dict[str, Any]:
    result = {"request": "r", "driver": DRIVER, "pool": "p", "device": "d", "shareID": None,
              "consumedCapacity": consumed}
    return {"metadata": {"namespace": "ns", "name": "c", "uid": "u1"},
            "status": {"allocation": {"devices": {"results": [result]}}}}


def test_limit_is_32() -> None:
    assert MAX_CAPACITY_REQUIREMENTS == 32
    assert validate_capacity_amounts({f"c{i}": "1" for i in range(32)}, "requests") == []
    [err] = validate_capacity_amounts({f"c{i}": "1" for i in range(33)}, "requests")
    assert str(err) == "requests: Too many: 33: must have at most 32 items"


def test_negative_bad_quantity_and_bad_name() -> None:
    errs = validate_capacity_amounts({"memory": "-1Gi", "bw": "fast", "bad name": "1"}, "p")
    assert sorted(e.field for e in errs) == ["p", "p[bw]", "p[memory]"]
    assert "must be greater than or equal to 0" in str(
        next(e for e in errs if e.field == "p[memory]"))


def test_allocation_with_33_consumed_capacities_is_refused_naming_the_field() -> None:
    ok = allocated_devices(_claim({f"c{i}": "1" for i in range(32)}), DRIVER)
    assert len(ok[0].consumed_capacity) == 32
    with pytest.raises(ClaimError, match=r"results\[0\]\.consumedCapacity: Too many: 33"):
        allocated_devices(_claim({f"c{i}": "1" for i in range(33)}), DRIVER)
