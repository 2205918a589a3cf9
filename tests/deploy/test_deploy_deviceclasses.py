"""DeviceClass and example-claim selectors select the right devices of the real built-in
discoverers.

Devices come from the discoverers themselves (``net`` and ``pci`` on a synthetic sysfs with a
PCI NIC, its interface, a virtual interface and a PCI GPU; ``example`` on its shipped demo
inventory), turned into resource.k8s.io/v1 JSON and presented to the CEL expressions the way
the scheduler presents a device. A CEL runtime error (an attribute read before it is known
to exist) aborts allocation in Kubernetes, so it fails these tests too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import (
    DRIVER_NAME,
    cel_eval,
    cel_program,
    device_input,
    example_files,
    find,
    load_docs,
    render_base,
)

from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.discovery.builtin.net import NetDiscovery
from drakit.discovery.builtin.pci import PciDiscovery
from drakit.discovery.plugin import DiscoveryContext
from drakit.discovery.testing import SysfsBuilder

CLASS_OF = {"net": "net.drakit.example.com", "pci": "pci.drakit.example.com",
            "example": "example.drakit.example.com"}


@pytest.fixture
def devices(tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    """Discoverer name → its devices as v1 JSON."""
    sysfs = SysfsBuilder(tmp_path / "sys")
    sysfs.numa_node(0, cpulist="0-3")
    sysfs.pci_device("0000:3b:00.0", vendor=0x15B3, device=0x1017, pci_class=0x020000,
                     numa_node=0, driver="mlx5_core")
    sysfs.pci_device("0000:5e:00.0", vendor=0x10DE, device=0x2330, pci_class=0x030200,
                     numa_node=0, driver="nvidia")
    sysfs.net_interface("ens1f0", mac="0c:42:a1:00:00:01", pci="0000:3b:00.0",
                        driver="mlx5_core")
    sysfs.net_interface("veth0", mac="02:00:00:00:00:09")
    out: dict[str, list[dict[str, Any]]] = {}
    for name, cls in (("net", NetDiscovery), ("pci", PciDiscovery), ("example", ExampleDiscovery)):
        ctx = DiscoveryContext(driver_name=DRIVER_NAME, node_name="node-a",
                               sysfs_root=sysfs.root)
        pools = cls(ctx).discover()
        out[name] = [d.to_api() for pool in pools for d in pool.devices]
        assert out[name], f"discoverer {name} found nothing"
    return out


def _class_selectors(name: str) -> list[str]:
    (device_class,) = find(render_base(), "DeviceClass", name)
    return [s["cel"]["expression"] for s in device_class["spec"]["selectors"]]


def _matches(expressions: list[str], device: dict[str, Any]) -> bool:
    """All expressions true, evaluated in order and stopping at the first false (as the
    allocator does); a runtime error or a non-bool raises."""
    activation = {"device": device_input(DRIVER_NAME, device)}
    for e in expressions:
        result = cel_eval(e, activation)
        assert isinstance(result, bool), f"{e!r} gave {result!r}, not a bool"
        if not result:
            return False
    return True


def test_every_class_starts_with_the_driver() -> None:
    for name in CLASS_OF.values():
        assert _class_selectors(name)[0] == f'device.driver == "{DRIVER_NAME}"'


def test_selectors_compile() -> None:
    for name in CLASS_OF.values():
        for e in _class_selectors(name):
            cel_program(e)


@pytest.mark.parametrize("discoverer", sorted(CLASS_OF))
def test_class_selects_exactly_its_discoverers_devices(
        discoverer: str, devices: dict[str, list[dict[str, Any]]]) -> None:
    selectors = _class_selectors(CLASS_OF[discoverer])
    for source, devs in devices.items():
        for d in devs:
            assert _matches(selectors, d) is (source == discoverer), (
                f"class {CLASS_OF[discoverer]} on {source} device {d['name']}")


def test_classes_ignore_other_drivers(devices: dict[str, list[dict[str, Any]]]) -> None:
    d = devices["net"][0]
    for name in CLASS_OF.values():
        activation = {"device": {**device_input(DRIVER_NAME, d), "driver": "other.example"}}
        assert cel_eval(_class_selectors(name)[0], activation) is False


def _claim(path: Path) -> tuple[str, list[str]]:
    template = next(d for d in load_docs(path) if d["kind"] == "ResourceClaimTemplate")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    selectors = [s["cel"]["expression"] for s in exactly.get("selectors", [])]
    return exactly["deviceClassName"], selectors


EXPECTED_EXAMPLE_MATCHES = {
    "net-interface.yaml": ("net", {"ens1f0"}),  # the physical one, not veth0
    "pci-function.yaml": ("pci", {"pci-0000-3b-00-0"}),  # the NIC (class 02), not the GPU
}


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_example_claims_select_the_intended_devices(
        path: Path, devices: dict[str, list[dict[str, Any]]]) -> None:
    class_name, selectors = _claim(path)
    assert class_name in CLASS_OF.values(), f"{path.name}: unknown class {class_name}"
    source = next(k for k, v in CLASS_OF.items() if v == class_name)
    chosen = {d["name"] for src in devices.values() for d in src
              if _matches(_class_selectors(class_name) + selectors, d)}
    assert chosen, f"{path.name} matches no device"
    assert chosen <= {d["name"] for d in devices[source]}
    if path.name in EXPECTED_EXAMPLE_MATCHES:
        assert (source, chosen) == EXPECTED_EXAMPLE_MATCHES[path.name]
    # the pod uses the claim it declares
    pod = next(d for d in load_docs(path) if d["kind"] == "Pod")
    template = next(d for d in load_docs(path) if d["kind"] == "ResourceClaimTemplate")
    (claim,) = pod["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": claim["name"]}]


def test_a_careless_selector_is_caught(devices: dict[str, list[dict[str, Any]]]) -> None:
    import celpy

    careless = [f'device.driver == "{DRIVER_NAME}"',
                "device.attributes[device.driver].interfaceName != \"\""]
    with pytest.raises(celpy.CELEvalError):
        for src in devices.values():
            for d in src:
                _matches(careless, d)
