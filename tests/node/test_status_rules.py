"""AllocatedDeviceStatus validation at and beyond each API limit
(ValidateResourceClaimStatusUpdate, KEP-4817)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from drakit.discovery.model import DeviceStatus, NetworkData
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.status import StatusError, build_entries, build_entry
from drakit.plugin.events import RecordedEvents

NOW = "2026-01-01T00:00:00Z"


def dev(status: dict[str, Any] | None, share: str | None = None) -> PreparedDeviceRecord:
    return PreparedDeviceRecord(request="r", pool="p", device="d", share_id=share, status=status)


def entry(status: dict[str, Any] | None) -> dict[str, Any]:
    return build_entry("drv.example.com", dev(status), "status.devices[0]", NOW)


def cond(i: int, **kw: Any) -> dict[str, Any]:
    return {"type": f"T{i}", "status": "True", "reason": "Ok", "message": "", **kw}


def test_default_ready_condition() -> None:
    e = entry(None)
    assert e["conditions"] == [{"type": "Ready", "status": "True", "reason": "Prepared",
                                "message": "device prepared by drakit",
                                "lastTransitionTime": NOW}]
    assert (e["driver"], e["pool"], e["device"]) == ("drv.example.com", "p", "d")


def test_share_id_is_part_of_the_key() -> None:
    e = build_entry("drv.example.com", dev(None, share="5f1c0f9e-6c39-4a53-9f6c-1d2e3f4a5b6c"),
                    "x", NOW)
    assert e["shareID"] == "5f1c0f9e-6c39-4a53-9f6c-1d2e3f4a5b6c"


def test_eight_conditions_ok_nine_not() -> None:
    assert len(entry({"conditions": [cond(i) for i in range(8)]})["conditions"]) == 8
    with pytest.raises(StatusError, match=r"conditions: Too many: 9"):
        entry({"conditions": [cond(i) for i in range(9)]})


@pytest.mark.parametrize("bad,match", [
    ({"status": "Maybe"}, "Unsupported value"),
    ({"reason": ""}, "reason: Required value"),
    ({"reason": "has space"}, "reason: Invalid value"),
    ({"reason": "R" * 1025}, "reason: Invalid value"),
    ({"message": "m" * 32769}, "message: Too long"),
    ({"type": "bad type!"}, "type: Invalid value"),
    ({"type": "/x"}, "prefix part must be non-empty"),
])
def test_invalid_condition(bad: dict[str, Any], match: str) -> None:
    with pytest.raises(StatusError, match=match):
        entry({"conditions": [cond(0, **bad)]})


def test_duplicate_condition_type() -> None:
    with pytest.raises(StatusError, match="Duplicate value"):
        entry({"conditions": [cond(0), cond(0)]})


def test_data_limit_10_kib() -> None:
    ok = {"k": "x" * (10240 - len('{"k":""}'))}
    assert entry({"data": ok})["data"] == ok
    with pytest.raises(StatusError, match="data: Too long"):
        entry({"data": {"k": "x" * 10240}})
    with pytest.raises(StatusError, match="valid JSON object"):
        entry({"data": [1, 2]})


def test_network_data_limits() -> None:
    nd = {"interface_name": "i" * 256, "hardware_address": "h" * 128,
          "ips": [f"10.0.0.{i}/24" for i in range(16)]}
    got = entry({"network_data": nd})["networkData"]
    assert len(got["ips"]) == 16 and len(got["interfaceName"]) == 256
    for key, value, match in [
        ("interface_name", "i" * 257, "interfaceName: Too long"),
        ("hardware_address", "h" * 129, "hardwareAddress: Too long"),
        ("ips", [f"10.0.0.{i}/24" for i in range(17)], "ips: Too many: 17"),
        ("ips", ["10.0.0.1/24", "10.0.0.1/24"], r"ips\[1\]: Duplicate value"),
    ]:
        with pytest.raises(StatusError, match=match):
            entry({"network_data": {**nd, key: value}})


@pytest.mark.parametrize("ip", ["10.9.8.7/24", "10.9.8.0/24", "2001:db8::1/64", "::1/128"])
def test_canonical_ips(ip: str) -> None:
    assert NetworkData(ips=[ip]).ips == [ip]


@pytest.mark.parametrize("ip,match", [
    ("10.9.8.7", "CIDR form"), ("300.9.8.0/24", "CIDR form"),
    ("2001:0db8::1/64", 'canonical form \\(\'2001:db8::1/64\'\\)'),
    ("::ffff:10.0.0.1/120", "canonical form \\('10.0.0.1/24'\\)"),
    ("2001:DB8::1/64", "canonical form"),
])
def test_non_canonical_ips(ip: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        NetworkData(ips=[ip])


def test_invalid_entry_left_out_and_counted() -> None:
    rec = ClaimRecord(uid="u", namespace="ns", name="c", devices=[
        PreparedDeviceRecord(request="r", pool="p", device="good"),
        PreparedDeviceRecord(request="r", pool="p", device="bad",
                             status={"data": [1]}),
    ])
    events = RecordedEvents()
    entries = build_entries("drv.example.com", rec, events)
    reasons = [reason for (reason,) in events.named("status_invalid")]
    assert [e["device"] for e in entries] == ["good"]
    assert len(reasons) == 1 and "status.devices[1].data" in reasons[0]


@pytest.mark.parametrize("status,field,match", [
    ({"conditions": [cond(i) for i in range(9)]}, "conditions", "Too many: 9"),
    ({"conditions": [cond(0), cond(0)]}, "conditions", "Duplicate value: 'T0'"),
    ({"conditions": [cond(0, status="Maybe")]}, "conditions.0.status", "Unsupported value"),
    ({"conditions": [cond(0, observed_generation=-1)]}, "conditions.0.observed_generation",
     "greater than or equal to zero"),
    ({"data": {"k": "x" * 10240}}, "data", "Too long"),
    ({"network_data": {"interface_name": "i" * 257}}, "network_data.interface_name",
     "may not be more than 256 bytes"),
    ({"network_data": {"hardware_address": "h" * 129}}, "network_data.hardware_address",
     "may not be more than 128 bytes"),
    ({"network_data": {"ips": ["10.0.0.1"]}}, "network_data.ips.0", "CIDR form"),
])
def test_the_vendor_gets_the_error_where_it_builds_the_status(
        status: dict[str, Any], field: str, match: str) -> None:
    """DeviceStatus checks the API rules at construction (the plugin's prepare), naming
    the field; the same rules as the entry conversion above."""
    with pytest.raises(ValidationError, match=match) as err:
        DeviceStatus.model_validate(status)
    assert [".".join(str(x) for x in e["loc"]) for e in err.value.errors()] == [field]


def test_assignment_is_checked_too() -> None:
    network = NetworkData(interface_name="eth0")
    with pytest.raises(ValidationError, match="interface_name"):
        network.interface_name = "i" * 257
