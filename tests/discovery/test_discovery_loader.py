"""Plugin loading: built-ins, entry points (a dist-info written in tmp), module:Class."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from drakit.discovery import (
    DiscoveryContext,
    DiscoveryPlugin,
    PluginLoadError,
    Pool,
    available_plugins,
    load_plugin_class,
    load_plugins,
    parse_plugin_options,
)
from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.discovery.builtin.net import NetDiscovery
from drakit.discovery.builtin.pci import PciDiscovery
from drakit.discovery.loader import plugin_instances, section_names, unused_config_sections

Ctx = Callable[..., DiscoveryContext]

PLUGIN_SOURCE = '''
from drakit.discovery import DiscoveryPlugin, Pool, Device

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
    [p] = load_plugins(["drakit.discovery.builtin.net:NetDiscovery"], factory)
    assert isinstance(p, NetDiscovery) and seen == ["net"]
    assert p.options.naming == "mac"


def test_unknown_name_lists_available() -> None:
    with pytest.raises(PluginLoadError) as e:
        load_plugin_class("gpu")
    msg = str(e.value)
    assert "'gpu'" in msg and "net" in msg and "pci" in msg and "example" in msg


@pytest.mark.parametrize(("spec", "match"), [
    ("no_such_module_xyz:Thing", "importing module no_such_module_xyz failed: "
                                 "ModuleNotFoundError"),
    ("drakit.discovery.builtin.net:Nope", "has no Nope"),
    ("drakit.discovery.builtin.net:", "not 'module:Class'"),
    ("drakit.discovery.builtin.net:canonical_cidr", "not a DiscoveryPlugin"),
])
def test_module_class_errors(spec: str, match: str) -> None:
    with pytest.raises(PluginLoadError, match=match):
        load_plugin_class(spec)


def test_entry_points(tiny_dist: Path, make_ctx: Ctx) -> None:
    available = available_plugins()
    assert available["tiny"] == "tiny_vendor:TinyDiscovery"
    assert available["net"] == "drakit.discovery.builtin.net:NetDiscovery"  # built-in not shadowed
    [p] = load_plugins(["tiny"], lambda name: make_ctx())
    assert [d.name for d in p.discover()[0].devices] == ["tiny-0"]
    with pytest.raises(PluginLoadError, match="'broken': RuntimeError: cannot open /dev/tiny"):
        load_plugins(["broken"], lambda name: make_ctx())
    with pytest.raises(PluginLoadError, match="not a DiscoveryPlugin"):
        load_plugins(["notaplugin"], lambda name: make_ctx())
    with pytest.raises(PluginLoadError, match="given twice"):
        load_plugins(["tiny", "tiny"], lambda name: make_ctx())


def test_invalid_options_name_plugin_and_field(make_ctx: Ctx) -> None:
    with pytest.raises(PluginLoadError, match=r"'pci'.*discovery\.pci\.vendors"):
        load_plugins(["pci"], lambda name: make_ctx(vendors=["zz"]))


OTHER_SOURCE = '''
from drakit.discovery import DiscoveryPlugin

class OtherTiny(DiscoveryPlugin):
    name = "tiny"
    def discover(self):
        return []
'''


def _dist(site: Path, module: str, dist: str, version: str, source: str, entry: str) -> None:
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[drakit.discovery]\n{entry}\n")


def test_same_name_from_two_distributions_is_an_error_naming_both(
    tiny_dist: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_ctx: Ctx,
    caplog: pytest.LogCaptureFixture,
) -> None:
    site2 = tmp_path / "site2"
    site2.mkdir()
    _dist(site2, "other_vendor", "other-vendor", "2.0", OTHER_SOURCE,
          "tiny = other_vendor:OtherTiny")
    monkeypatch.syspath_prepend(str(site2))
    importlib.invalidate_caches()
    try:
        with pytest.raises(PluginLoadError) as e:
            load_plugins(["tiny"], lambda name: make_ctx())
        msg = str(e.value)
        assert "'tiny'" in msg
        assert "tiny-vendor 1.0 (tiny_vendor:TinyDiscovery)" in msg
        assert "other-vendor 2.0 (other_vendor:OtherTiny)" in msg
        # whichever sys.path order: never first-wins
        monkeypatch.syspath_prepend(str(tiny_dist))
        importlib.invalidate_caches()
        with pytest.raises(PluginLoadError, match=r"other-vendor 2\.0"):
            load_plugin_class("tiny")
        assert "tiny" not in available_plugins()
        assert "registered by 2 installed distributions" in caplog.text
        # the other names of the first distribution still load; module:Class still works
        assert load_plugin_class("broken").__name__ == "Broken"
        assert load_plugin_class("other_vendor:OtherTiny").__name__ == "OtherTiny"
    finally:
        sys.modules.pop("other_vendor", None)


def test_the_same_distribution_twice_on_sys_path_is_no_conflict(
    tiny_dist: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tiny_dist))  # now on sys.path twice
    sys.path.append(str(tiny_dist))
    try:
        importlib.invalidate_caches()
        assert load_plugin_class("tiny").__name__ == "TinyDiscovery"
    finally:
        sys.path.remove(str(tiny_dist))


class _TypedOptions(BaseModel):
    mode: Literal["fast", "safe"] = "safe"
    limit: int = 4


class _TypedPlugin(DiscoveryPlugin):
    name = "typed"

    def __init__(self, context: DiscoveryContext) -> None:
        super().__init__(context)
        self.options = context.parse_options(_TypedOptions)

    def discover(self) -> list[Pool]:
        return []


def test_a_vendor_plugin_declares_typed_options(make_ctx: Ctx) -> None:
    spec = f"{__name__}:_TypedPlugin"
    [p] = load_plugins([spec], lambda name: make_ctx(mode="fast", limit="7"))
    assert isinstance(p, _TypedPlugin)
    assert p.options == _TypedOptions(mode="fast", limit=7)
    assert p.context.plugin_name == "typed"  # filled in by the loader
    with pytest.raises(PluginLoadError, match=r"'typed'.*discovery\.typed\.mode: Input should"):
        load_plugins([spec], lambda name: make_ctx(mode="turbo"))
    # the model ignores extras by default; drakit refuses them (a typo must not vanish)
    with pytest.raises(PluginLoadError, match=r"discovery\.typed\.limt: Extra inputs"):
        load_plugins([spec], lambda name: make_ctx(limt=3))


def test_parse_plugin_options_is_the_builtins_rule() -> None:
    with pytest.raises(ValueError, match=r"^discovery\.acme\.limit: Input should be a valid"):
        parse_plugin_options(_TypedOptions, "acme", {"limit": "many"})
    assert parse_plugin_options(_TypedOptions, "acme", {}) == _TypedOptions()


EXAMPLE_SPEC = "drakit.discovery.builtin.example:ExampleDiscovery"


def test_section_names_are_the_names_plugins_go_by() -> None:
    assert section_names(["net", f" {EXAMPLE_SPEC} ", ""]) == {"net": "net",
                                                                EXAMPLE_SPEC: "example"}


def test_a_section_keyed_by_module_class_names_the_key_its_plugin_reads() -> None:
    specs = section_names([EXAMPLE_SPEC])
    [problem] = unused_config_sections([EXAMPLE_SPEC, "example"], specs.values(),
                                       "--config /etc/drakit.yaml", specs)
    assert problem == (f"--config /etc/drakit.yaml: discovery.{EXAMPLE_SPEC} is not a loaded "
                       f"plugin's name: the plugin of --discovery {EXAMPLE_SPEC} reads its "
                       "options from discovery.example (loaded: example)")


def test_a_section_no_plugin_reads_names_the_loaded_and_closest() -> None:
    [problem] = unused_config_sections(["exmaple", "net"], ["example", "net"])
    assert problem.startswith("--config: discovery.exmaple is not a loaded plugin (loaded: "
                              "example, net; did you mean discovery.example?; known plugins: ")
    assert unused_config_sections(["net"], ["net"]) == []


class _Tiny(DiscoveryPlugin):
    name = "tiny"

    def discover(self) -> list[Pool]:
        return []


@pytest.mark.parametrize("plugins,message", [
    ([_Tiny], "plugins[0] is the class _Tiny, not an instance of it: pass "
              "_Tiny(DiscoveryContext(driver_name=..., node_name=...)), or its name in "
              "discovery=[...]"),
    (["example"], "plugins[0] is the name 'example', not a DiscoveryPlugin instance: plugins "
                  "by name go in discovery=['example']"),
    ([{"name": "tiny"}], "plugins[0] is a dict, not a DiscoveryPlugin instance"),
    (_Tiny, "plugins must be a list of DiscoveryPlugin instances, not the class _Tiny"),
    ("example", "plugins must be a list of DiscoveryPlugin instances, not a str"),
])
def test_plugin_objects_of_the_wrong_type_are_a_type_error(plugins: object, message: str) -> None:
    with pytest.raises(TypeError) as e:
        plugin_instances(plugins)
    assert str(e.value) == message


def test_plugin_instances_pass(make_ctx: Ctx) -> None:
    tiny = _Tiny(make_ctx())
    assert plugin_instances((tiny,)) == [tiny]
    with pytest.raises(TypeError, match=r"^plugins\[1\] is an int"):
        plugin_instances([tiny, 3])
