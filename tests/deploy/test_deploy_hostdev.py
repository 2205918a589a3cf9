"""The chart with the hostdev discoverer: one DeviceClass per rule that selects exactly that
rule's devices (checked by allocating against the rendered classes), the example class
leaving them out, the host's /dev read-only at the agent's --dev-root, and a rule whose
name would take another discoverer's class refused."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import find, gen, one, plugin_container

from drakit.allocator import AllocationFailed
from drakit.plugin.testing.harness import DriverHarness

DRIVER = "hostdev.drakit.dev"
RULES = [{"name": "kvm", "match": 'KERNEL=="kvm", SUBSYSTEM=="misc"', "sharing": "shared"},
         {"name": "tun", "match": "/dev/net/tun"}]


def values(tmp_path: Path, rules: list[dict[str, Any]]) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"driverName": DRIVER, "discovery": {
        "plugins": ["hostdev", "example"], "config": {"hostdev": {"rules": rules}}}}))
    return path


def test_one_class_per_rule_and_the_host_dev(helm: str, tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(gen.render(helm, values=[values(tmp_path, RULES)]))
            if d]
    classes = {d["metadata"]["name"]: d for d in find(docs, "DeviceClass")}
    assert set(classes) == {f"kvm.{DRIVER}", f"tun.{DRIVER}", f"example.{DRIVER}"}
    example = classes[f"example.{DRIVER}"]["spec"]["selectors"][1]["cel"]["expression"]
    assert '!("rule" in device.attributes[device.driver])' in example
    container = plugin_container(one(docs, "DaemonSet"))
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DEV_ROOT"] == "/host/dev"
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/host/dev")
    assert mount["readOnly"] is True
    volumes = one(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    volume = next(v for v in volumes if v["name"] == mount["name"])
    assert volume["hostPath"] == {"path": "/dev", "type": "Directory"}

    # the rendered classes select the rule's devices, through the scheduler's rules
    with DriverHarness(tmp_path / "h", driver_name=DRIVER, discovery=["hostdev"],
                       plugin_options={"hostdev": {"rules": RULES}}) as h:
        for cls in classes.values():
            h.apiserver.create_object("deviceclasses", {"metadata": cls["metadata"],
                                                        "spec": cls["spec"]})

        def claim(name: str, cls: str) -> dict[str, Any]:
            return {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {
                "requests": [{"name": "r", "exactly": {"deviceClassName": cls}}]}}}

        for i in range(2):
            got = h.allocate_as_scheduler(claim(f"kvm-{i}", f"kvm.{DRIVER}"))
            assert got["status"]["allocation"]["devices"]["results"][0]["device"] == "kvm"
        got = h.allocate_as_scheduler(claim("tun", f"tun.{DRIVER}"))
        assert got["status"]["allocation"]["devices"]["results"][0]["device"] == "tun"
        with pytest.raises(AllocationFailed):   # hostdev devices are not example devices
            h.allocate_as_scheduler(claim("ex", f"example.{DRIVER}"))


def test_a_rule_named_like_another_discoverer_is_refused(helm: str, tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as e:
        gen.render(helm, values=[values(tmp_path, [{"name": "net", "match": "/dev/net/tun"}])])
    assert 'a rule named "net" would share the DeviceClass name' in e.value.stderr


def test_without_hostdev_nothing_changes(helm: str) -> None:
    docs = [d for d in yaml.safe_load_all(
        gen.render(helm, set_values=("discovery.plugins={example}",))) if d]
    container = plugin_container(one(docs, "DaemonSet"))
    assert "DEV_ROOT" not in {e["name"] for e in container["env"]}
    assert all(m["mountPath"] != "/host/dev" for m in container["volumeMounts"])
    [cls] = find(docs, "DeviceClass")
    assert "rule" not in cls["spec"]["selectors"][1]["cel"]["expression"]


@pytest.mark.parametrize("rule", [{"name": "Kvm_1", "match": "/dev/kvm"},
                                  {"match": "/dev/kvm"},
                                  {"name": "k" * 41, "match": "/dev/kvm"}])
def test_a_rule_name_that_is_no_dns_label_is_refused(helm: str, tmp_path: Path,
                                                     rule: dict[str, Any]) -> None:
    # it would name an invalid DeviceClass (Kvm_1.hostdev.drakit.dev, .hostdev.drakit.dev)
    with pytest.raises(subprocess.CalledProcessError) as e:
        gen.render(helm, values=[values(tmp_path, [rule])])
    assert f'rule name "{rule.get("name", "")}" is not a DNS label' in e.value.stderr


def test_hostdev_without_rules_is_refused(helm: str, tmp_path: Path) -> None:
    # the agent would refuse to start; the render says so first
    with pytest.raises(subprocess.CalledProcessError) as e:
        gen.render(helm, values=[values(tmp_path, [])])
    assert "discovery.config.hostdev.rules: hostdev needs at least one rule" in e.value.stderr
