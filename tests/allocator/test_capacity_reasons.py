"""The reason a consumable capacity rules a device out names the requestPolicy it breaks,
so a claim asking more slots than a hostdev rule has says how many there are."""

from __future__ import annotations

import pytest

from drakit.allocator import AllocationFailed, allocate
from tests.allocator.alloc_helpers import claim, dclass, device, request, rslice


@pytest.mark.parametrize(("policy", "asked", "shown"), [
    ({"default": "1", "validRange": {"min": "1", "max": "3", "step": "1"}}, "5",
     "capacity slots: 5 is not allowed by its requestPolicy (validRange min 1, max 3, step 1)"),
    ({"default": "1", "validValues": ["1", "2"]}, "3",
     "capacity slots: 3 is not allowed by its requestPolicy (validValues 1, 2)"),
])
def test_the_policy_broken_is_named(policy: dict[str, object], asked: str, shown: str) -> None:
    fuse = device("fuse", caps={"slots": {"value": "3", "requestPolicy": policy}},
                  allowMultipleAllocations=True)
    req = request(capacity={"requests": {"slots": asked}})
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(req)], [rslice([fuse])], [dclass()], "node-1")
    [unmatched] = e.value.explanation.requests[0].unmatched
    assert (unmatched.reason, unmatched.detail) == ("capacity", shown)
