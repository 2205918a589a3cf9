"""Reading allocation results and opaque configs from ResourceClaims."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.claims.resourceclaim import (
    ClaimError,
    allocated_devices,
    check_claim,
    opaque_configs,
    typed_config,
)

DRIVER = "gpu.example.com"


def claim(
    results: list[dict[str, Any]], config: list[dict[str, Any]] | None = None, uid: str = "u1"
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": uid},
        "status": {"allocation": {"devices": {"results": results, "config": config or []}}},
    }


def res(device: str, request: str = "r", driver: str = DRIVER, **kw: Any) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": "node1", "device": device, **kw}


REF = ClaimRef(namespace="ns", name="c", uid="u1")


def test_uid_mismatch_names_the_replacement() -> None:
    with pytest.raises(ClaimError, match="replaced"):
        check_claim(claim([res("a")], uid="other"), REF)


def test_not_allocated() -> None:
    c = {"metadata": {"namespace": "ns", "name": "c", "uid": "u1"}, "status": {}}
    with pytest.raises(ClaimError, match=r"status\.allocation: not allocated"):
        check_claim(c, REF)


def test_only_our_driver_and_base_request() -> None:
    c = claim([res("a", driver="other.example.com"), res("b", request="main/sub", shareID="s1")])
    devs = allocated_devices(c, DRIVER)
    assert [(d.device, d.base_request, d.share_id, d.index) for d in devs] == [
        ("b", "main", "s1", 1)
    ]


def test_no_results_for_our_driver() -> None:
    with pytest.raises(ClaimError, match="no allocation results for driver"):
        allocated_devices(claim([res("a", driver="x.example.com")]), DRIVER)


def test_malformed_result_names_path() -> None:
    c = claim([{"request": "r", "driver": DRIVER, "pool": "p"}])
    with pytest.raises(ClaimError, match=r"results\[0\]\.device: Required value"):
        allocated_devices(c, DRIVER)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: str = "exclusive"
    slices: int = 1


def cfg(
    source: str, params: dict[str, Any], requests: list[str] | None = None, driver: str = DRIVER
) -> dict[str, Any]:
    return {
        "source": source,
        "requests": requests or [],
        "opaque": {"driver": driver, "parameters": params},
    }


def test_class_first_then_claim_later_wins() -> None:
    c = claim(
        [res("a")],
        [
            cfg("FromClaim", {"mode": "shared"}),
            cfg("FromClass", {"mode": "class", "slices": 4}),
            cfg("FromClaim", {"slices": 2}, driver="other.example.com"),
        ],
    )
    configs = opaque_configs(c, DRIVER)
    assert [x.source for x in configs] == ["FromClass", "FromClaim"]
    got = typed_config(c, configs, "r", Params)
    assert got == Params(mode="shared", slices=4)


def test_request_scoped_config_only_to_its_request_and_subrequests() -> None:
    c = claim([res("a")], [cfg("FromClaim", {"slices": 3}, requests=["main"])])
    configs = opaque_configs(c, DRIVER)
    assert typed_config(c, configs, "main/sub", Params) == Params(slices=3)
    assert typed_config(c, configs, "other", Params) == Params()


def test_unknown_field_is_an_error_naming_it() -> None:
    c = claim([res("a")], [cfg("FromClaim", {"slicez": 3})])
    with pytest.raises(ClaimError, match=r"config\[0\]\.opaque\.parameters\.slicez: unknown field"):
        typed_config(c, opaque_configs(c, DRIVER), "r", Params)


def test_wrong_type_names_field() -> None:
    c = claim([res("a")], [cfg("FromClaim", {"slices": "many"})])
    with pytest.raises(ClaimError, match="slices"):
        typed_config(c, opaque_configs(c, DRIVER), "r", Params)


@pytest.mark.parametrize("value", [True, "4", 4.5])
def test_config_is_validated_as_strict_json(value: Any) -> None:
    """A JSON bool or string is not a number (Go's encoding/json refuses both too)."""
    c = claim([res("a")], [cfg("FromClaim", {"slices": value})])
    with pytest.raises(ClaimError, match="slices"):
        typed_config(c, opaque_configs(c, DRIVER), "r", Params)
    if value != 4.5:  # lax mode (config_strict = False) coerces them
        assert typed_config(c, opaque_configs(c, DRIVER), "r", Params,
                            strict=False) == Params(slices=int(value))


def test_kind_mismatch() -> None:
    c = claim([res("a")], [cfg("FromClaim", {"apiVersion": "v9", "kind": "X"})])
    with pytest.raises(ClaimError, match="apiVersion"):
        typed_config(c, opaque_configs(c, DRIVER), "r", Params, api_version="v1", kind="X")


def test_no_model_means_no_config() -> None:
    c = claim([res("a")], [cfg("FromClaim", {"anything": 1})])
    assert typed_config(c, opaque_configs(c, DRIVER), "r", None) is None


def test_every_error_of_an_opaque_config_in_one_message_one_style() -> None:
    """Two configs, three mistakes (an unknown field, a wrong type, a wrong kind): one
    ClaimError lists all of them, each as ``<config's parameters path>.<field>: <why>``."""
    c = claim([res("a")], [
        cfg("FromClass", {"kind": "Y", "slices": "many"}),
        cfg("FromClaim", {"slicez": 3}),
    ])
    with pytest.raises(ClaimError) as e:
        typed_config(c, opaque_configs(c, DRIVER), "r", Params, kind="X")
    msg = str(e.value)
    base = "status.allocation.devices.config[{}].opaque.parameters."
    assert msg.startswith("ResourceClaim ns/c: opaque config for request 'r': "), msg
    assert base.format(0) + "kind: Unsupported value: 'Y'" in msg
    assert base.format(0) + "slices: Input should be a valid integer" in msg
    assert base.format(1) + "slicez: unknown field (not in Params)" in msg
    assert msg.count("; ") == 2, msg
