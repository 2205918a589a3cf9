"""Plugin loading: built-ins, entry points (a dist-info written in tmp), module:Class."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from discovery import (
    DiscoveryContext,
    DiscoveryPlugin,
    PluginLoadError,
    available_plugins,
    load_plugin_class,
    load_plugins,
)
from discovery.builtin.example import ExampleDiscovery
from discovery.builtin.net import NetDiscovery
from discovery.builtin.pci import PciDiscovery

Ctx = Callable[..., DiscoveryContext]

PLUGIN_SOURCE = '''
from discovery import DiscoveryPlugin, Pool, Device

class TinyDiscovery(DiscoveryPlugin):
    name = "tiny"
    def discover(self):
        return [Pool(name=self.context.default_pool, devices=[Device(name="tiny-0")])]

class NotAPlugin:
    pass

class Broken(DiscoveryPlugin):
    name = "broken"
    def __init__(self, context):
        raise RuntimeError("cannot open /dev/tiny")
    def discover(self):
        return []
'''


@pytest.fixture
def tiny_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module and an installed distribution's metadata registering it as ``tiny``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "tiny_vendor.py").write_text(PLUGIN_SOURCE)
    dist = site / "tiny_vendor-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-vendor\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[drakit.discovery]\ntiny = tiny_vendor:TinyDiscovery\n"
        "broken = tiny_vendor:Broken\nnotaplugin = tiny_vendor:NotAPlugin\n"
        "net = tiny_vendor:TinyDiscovery\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    sys.modules.pop("tiny_vendor", None)


def test_builtins_load_by_name(make_ctx: Ctx) -> None:
    assert load_plugin_class("net") is NetDiscovery
    assert load_plugin_class("pci") is PciDiscovery
    assert load_plugin_class("example") is ExampleDiscovery
    plugins = load_plugins(["net", " pci", "example", ""], lambda name: make_ctx())
    assert [type(p) for p in plugins] == [NetDiscovery, PciDiscovery, ExampleDiscovery]
    assert all(isinstance(p, DiscoveryPlugin) for p in plugins)


def test_module_class(make_ctx: Ctx) -> None:
    seen: list[str] = []
    def factory(name: str) -> DiscoveryContext:
        seen.append(name)
        return make_ctx(naming="mac")
    [p] = load_plugins(["discovery.builtin.net:NetDiscovery"], factory)
    assert isinstance(p, NetDiscovery) and seen == ["net"]
    assert p.options.naming == "mac"


def test_unknown_name_lists_available() -> None:
    with pytest.raises(PluginLoadError) as e:
        load_plugin_class("gpu")
    msg = str(e.value)
    assert "'gpu'" in msg and "net" in msg and "pci" in msg and "example" in msg


@pytest.mark.parametrize(("spec", "match"), [
    ("no_such_module_xyz:Thing", "cannot import"),
    ("discovery.builtin.net:Nope", "has no Nope"),
    ("discovery.builtin.net:", "not 'module:Class'"),
    ("discovery.builtin.net:canonical_cidr", "not a DiscoveryPlugin"),
])
def test_module_class_errors(spec: str, match: str) -> None:
    with pytest.raises(PluginLoadError, match=match):
        load_plugin_class(spec)


def test_entry_points(tiny_dist: Path, make_ctx: Ctx) -> None:
    available = available_plugins()
    assert available["tiny"] == "tiny_vendor:TinyDiscovery"
    assert available["net"] == "discovery.builtin.net:NetDiscovery"  # built-in not shadowed
    [p] = load_plugins(["tiny"], lambda name: make_ctx())
    assert [d.name for d in p.discover()[0].devices] == ["tiny-0"]
    with pytest.raises(PluginLoadError, match="'broken': cannot open /dev/tiny"):
        load_plugins(["broken"], lambda name: make_ctx())
    with pytest.raises(PluginLoadError, match="not a DiscoveryPlugin"):
        load_plugins(["notaplugin"], lambda name: make_ctx())
    with pytest.raises(PluginLoadError, match="given twice"):
        load_plugins(["tiny", "tiny"], lambda name: make_ctx())


def test_invalid_options_name_plugin_and_field(make_ctx: Ctx) -> None:
    with pytest.raises(PluginLoadError, match=r"'pci'.*discovery\.pci\.vendors"):
        load_plugins(["pci"], lambda name: make_ctx(vendors=["zz"]))
