"""Duplicate device names in the inventory name the plugin(s) that reported them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from drakit.discovery import Device, DiscoveryContext, DiscoveryPlugin, Pool
from drakit.plugin.slices.inventory import Inventory


class Dup(DiscoveryPlugin):
    name = "acme-dup"

    def discover(self) -> list[Pool]:
        return [Pool(name="node-1", devices=[Device(name="fpga-0"), Device(name="fpga-0")])]


class Other(Dup):
    name = "acme-other"


def ctx() -> DiscoveryContext:
    return DiscoveryContext(driver_name="fpga.example.com", node_name="node-1",
                            sysfs_root=Path("/nonexistent"))


def test_a_name_twice_in_one_plugin_names_that_plugin_once(
    caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="drakit.plugin.slices.inventory"):
        Inventory([Dup(ctx())]).refresh()
    [msg] = [r.getMessage() for r in caplog.records]
    assert msg == "pool node-1: device fpga-0 reported twice by plugin acme-dup; keeping the " \
                  "first", msg


def test_a_name_in_two_plugins_names_both(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="drakit.plugin.slices.inventory"):
        Inventory([Dup(ctx()), Other(ctx())]).refresh()
    msgs = [r.getMessage() for r in caplog.records]
    assert "pool node-1: device fpga-0 reported by plugins acme-dup and acme-other; keeping " \
           "the first" in msgs, msgs
