"""DriverHarness refuses wrong arguments at once, before it starts anything: a plugin class
where an instance is wanted, names where objects are wanted, and ``plugin_options`` that no
loaded plugin reads (``drakit run`` warns about such a section; a test bench refuses it)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from drakit.discovery import DiscoveryContext
from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.plugin.ops.app import App
from drakit.plugin.ops.config import Settings
from drakit.plugin.testing import DriverHarness

EXAMPLE_SPEC = "drakit.discovery.builtin.example:ExampleDiscovery"


def _refused(tmp_path: Path, error: type[Exception], **kwargs: Any) -> str:
    start = time.monotonic()
    with pytest.raises(error) as e:
        DriverHarness(tmp_path / "h", **kwargs)
    assert time.monotonic() - start < 10  # not the start-up wait for slices
    assert not (tmp_path / "h").exists()  # nothing made
    return str(e.value)


def test_a_plugin_class_is_refused_saying_to_pass_an_instance(tmp_path: Path) -> None:
    message = _refused(tmp_path, TypeError, plugins=[ExampleDiscovery])
    assert message == ("plugins[0] is the class ExampleDiscovery, not an instance of it: pass "
                       "ExampleDiscovery(DiscoveryContext(driver_name=..., node_name=...)), or "
                       "its name in discovery=[...]")


@pytest.mark.parametrize("kwargs,message", [
    ({"plugins": ["example"]}, "plugins[0] is the name 'example', not a DiscoveryPlugin "
                               "instance: plugins by name go in discovery=['example']"),
    ({"plugins": ExampleDiscovery}, "plugins must be a list of DiscoveryPlugin instances, not "
                                    "the class ExampleDiscovery"),
    ({"discovery": "example"}, "discovery must be a list of plugin names, not 'example' "
                               "(discovery=['example'])"),
    ({"discovery": [ExampleDiscovery]}, "discovery[0] is <class "
     "'drakit.discovery.builtin.example.ExampleDiscovery'>, not a plugin name: plugin objects "
     "go in plugins=[...]"),
    ({"plugin_options": {"example": 3}}, "plugin_options must map plugin names to their "
                                         "options (dicts), not {'example': 3}"),
])
def test_other_wrong_types_are_refused(tmp_path: Path, kwargs: dict[str, Any],
                                       message: str) -> None:
    assert _refused(tmp_path, TypeError, **kwargs) == message


def test_the_agent_refuses_a_plugin_class_too(tmp_path: Path) -> None:
    settings = Settings(driver_name="drakit.example.com", node_name="node-1",
                        plugins_dir=tmp_path / "plugins")
    with pytest.raises(TypeError, match=r"^plugins\[0\] is the class ExampleDiscovery"):
        App(settings, plugins=[ExampleDiscovery], api_client=object())  # type: ignore[list-item]
    assert not (tmp_path / "plugins").exists()


def test_options_for_plugin_objects_are_refused(tmp_path: Path) -> None:
    plugin = ExampleDiscovery(DiscoveryContext(driver_name="drakit.example.com",
                                               node_name="node-1"))
    message = _refused(tmp_path, ValueError, plugins=[plugin],
                       plugin_options={"example": {"generate": {"count": 2}}})
    assert message == ("plugin_options (example) are read only by plugins loaded by name "
                       "(discovery=[...]); a plugin object gets its options from its own "
                       "DiscoveryContext(options=...)")


def test_options_no_loaded_plugin_reads_are_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, ValueError, discovery=["example"],
                       plugin_options={"exmaple": {}})
    assert message.startswith("plugin_options: discovery.exmaple is not a loaded plugin "
                              "(loaded: example; did you mean discovery.example?; known "
                              "plugins: "), message


def test_options_keyed_by_module_class_name_the_key_to_use(tmp_path: Path) -> None:
    message = _refused(tmp_path, ValueError, discovery=[EXAMPLE_SPEC],
                       plugin_options={EXAMPLE_SPEC: {"generate": {"count": 3}}})
    assert message == (f"plugin_options: discovery.{EXAMPLE_SPEC} is not a loaded plugin's "
                       f"name: the plugin of --discovery {EXAMPLE_SPEC} reads its options "
                       "from discovery.example (loaded: example)")


def test_options_keyed_by_the_plugins_name_reach_a_module_class_plugin(tmp_path: Path) -> None:
    with DriverHarness(tmp_path / "h", discovery=[EXAMPLE_SPEC],
                       plugin_options={"example": {"generate": {"count": 3,
                                                                "prefix": "dev"}}}) as h:
        assert [d for _, d in h.devices()] == ["dev-0", "dev-1", "dev-2"]
