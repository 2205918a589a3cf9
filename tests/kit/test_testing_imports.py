"""The test kit's modules import each other in one direction only (no cycle, counting
imports inside functions and under TYPE_CHECKING too), and no class of the kit is assembled
from a base class or mixin of another kit module: each public class *has* its parts."""

from __future__ import annotations

from kit_graph import KIT, cross_module_bases, cycles, import_graph


def test_the_kit_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 40  # the whole kit was read
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_subpackages_do_not_import_the_kit_top_level() -> None:
    """apiserver/, kubelet/ and real/ never import the kit's top level package (its
    ``__init__`` loads names lazily; the harness and pytest plugin sit above them)."""
    graph = import_graph()
    above = {KIT, f"{KIT}.harness", f"{KIT}.pytest_plugin", f"{KIT}.faultproxy"}
    offenders = {m: sorted(graph[m] & above) for m in graph
                 if m.startswith((f"{KIT}.apiserver", f"{KIT}.kubelet", f"{KIT}.real"))
                 and graph[m] & above}
    assert offenders == {}


def test_the_embedded_server_and_fake_kubelet_do_not_import_the_real_tiers() -> None:
    graph = import_graph()
    offenders = {m: sorted(x for x in graph[m] if x.startswith(f"{KIT}.real"))
                 for m in graph if m.startswith((f"{KIT}.apiserver", f"{KIT}.kubelet"))}
    assert {m: v for m, v in offenders.items() if v} == {}


def test_no_class_is_assembled_from_another_modules_class() -> None:
    assert cross_module_bases() == []
