"""Opaque configs with random JSON through drakit.plugin.claims.resourceclaim (opaque_configs +
typed_config) into strict models: the example plugin's ExampleConfig and a model with many field
types.

Property: either a model instance comes back, or a ClaimError whose message names the
claim and the config path; nothing else is raised.
"""

from __future__ import annotations

from typing import Any, Literal

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field
from reliability_helpers import CASES, fuzz_settings, hostile_strings, json_values

from drakit.discovery.builtin.example import ExampleConfig
from drakit.plugin.claims.resourceclaim import ClaimError, opaque_configs, typed_config

DRIVER = "drakit.example.com"
API = "drakit.example.com/v1alpha1"
KIND = "ExampleDeviceConfig"


class WideConfig(BaseModel):
    """Many field types, strict: what a vendor's config model may look like."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    mode: Literal["a", "b"] = "a"
    count: int = Field(default=1, ge=0, le=64)
    ratio: float | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    names: list[str] = Field(default_factory=list, max_length=8)
    nested: ExampleConfig | None = None
    device_path: str | None = Field(default=None, alias="devicePath", max_length=4096)


def _claim(configs: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "cfg-claim", "uid": "u-1"},
        "status": {"allocation": {"devices": {"results": [], "config": configs}}},
    }


params = st.one_of(
    st.dictionaries(st.sampled_from(["apiVersion", "kind", "sharing", "mode", "count", "ratio",
                                     "labels", "names", "nested", "devicePath", "device_path"]),
                    json_values, max_size=6),
    st.dictionaries(hostile_strings, json_values, max_size=4),
    st.fixed_dictionaries({"apiVersion": st.just(API), "kind": st.just(KIND)},
                          optional={"sharing": json_values}),
    json_values,
)
config_entry = st.one_of(
    st.fixed_dictionaries(
        {"opaque": st.fixed_dictionaries({"driver": st.just(DRIVER), "parameters": params})},
        optional={"source": st.one_of(st.sampled_from(["FromClass", "FromClaim"]), json_values),
                  "requests": st.one_of(st.lists(st.sampled_from(["r", "main", "main/x"])),
                                        json_values)},
    ),
    json_values,
)
configs = st.one_of(st.lists(config_entry, max_size=5), json_values)


@fuzz_settings(300)
@given(configs, st.sampled_from(["r", "main/x", "other"]),
       st.sampled_from([(ExampleConfig, API, KIND), (WideConfig, None, None)]))
def test_fuzz_opaque_config(cfgs: Any, request: str, model: tuple[Any, Any, Any]) -> None:
    with CASES.case("opaque-config"):
        claim = _claim(cfgs)
        try:
            found = opaque_configs(claim, DRIVER)
            out = typed_config(claim, found, request, *model)
        except ClaimError as e:
            msg = str(e)
            assert msg.startswith("ResourceClaim ns/cfg-claim: "), msg
            assert "status.allocation.devices.config" in msg or "opaque config" in msg, msg
            return
        assert isinstance(out, model[0])


def test_unknown_field_and_wrong_kind_are_named() -> None:
    claim = _claim([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {
        "apiVersion": API, "kind": "Nope"}}}])
    try:
        typed_config(claim, opaque_configs(claim, DRIVER), "r", ExampleConfig, API, KIND)
    except ClaimError as e:
        assert "config[0].opaque.parameters.kind: Unsupported value: 'Nope'" in str(e)
    else:
        raise AssertionError("a wrong kind was accepted")
    claim = _claim([{"opaque": {"driver": DRIVER, "parameters": {"shell": "rm -rf /"}}}])
    try:
        typed_config(claim, opaque_configs(claim, DRIVER), "r", ExampleConfig, API, KIND)
    except ClaimError as e:
        assert "config[0].opaque.parameters.shell: unknown field" in str(e)
    else:
        raise AssertionError("an unknown field was accepted")
