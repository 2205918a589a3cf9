"""plugin/ is grouped into rooms, and imports only go down them; no import cycle in plugin/.

The rooms, top to bottom (docs/architecture.md):

- ``ops/`` start-up and operations: the command, configuration, wiring of the parts, the
  HTTP endpoint, metrics, logs. Nothing below imports it.
- ``kubelet/`` the gRPC servers the kubelet calls, their sockets, registration, health.
- ``claims/`` one claim's life: the kubelet calls' node service, admission, vendor hooks, the
  CDI spec, claim status, the checkpoint, crash recovery, orphans.
- ``slices/`` the inventory and ResourceSlice publishing (validate, split, plan, write).
- ``api/`` the API server: HTTP transport, keep-alive connections, the one retry policy, the
  version-aware claim and slice client, the slice watch.
- the floor: the few modules directly in plugin/ that every room shares (``types``, ``names``,
  ``events``, ``klog``: verbosity levels and object keys of log lines, and ``background``,
  the one policy for background work, which imports ``events``), and the generated stubs in
  ``_proto/``.

``testing/`` (the test kit) may import everything; in plugin/ only ``ops/`` may import it (the
``drakit apiserver`` / ``fake-kubelet`` / ``demo`` commands). The cycle check leaves out
``testing/``: the kit has its own (tests/kit/test_testing_imports.py).

Imports under ``if TYPE_CHECKING:`` name a type for an annotation and never run: they are left
out of both checks (one: ``events`` names ``slices.validate.ValidationIssue`` in the
signature of ``Events.slice_validation_issue``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PLUGIN = Path(__file__).resolve().parent.parent / "plugin"
ROOMS = ("ops", "kubelet", "claims", "slices", "api")  # top to bottom
FLOOR = ("types", "names", "events", "klog", "background", "_proto")
# on the floor, only ``background`` (the supervised loops) imports another floor module
RANK = ({room: len(ROOMS) - i for i, room in enumerate(ROOMS)} | {f: 0 for f in FLOOR}
        | {"background": 0.5})
LEFT_OUT = ("testing",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PLUGIN).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["drakit", "plugin", *parts])


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PLUGIN.rglob("*.py")):
        if path.relative_to(PLUGIN).parts[0] in LEFT_OUT:
            continue
        found[module_name(path)] = path
    return found


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """ids of import nodes inside ``if TYPE_CHECKING:``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def imports_of(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """(imported drakit.plugin module, line) for every import that runs, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _type_checking_blocks(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("drakit.plugin"):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("drakit.plugin"):
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield (sub if sub in known or _is_left_out(sub) else source), node.lineno


def _is_left_out(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 2 and parts[2] in LEFT_OUT


def room_of(name: str) -> str:
    """The room of a plugin module: its folder, or its own name for the floor."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 else "plugin"


def test_every_plugin_module_is_in_a_room() -> None:
    homeless = [str(path.relative_to(PLUGIN.parent)) for name, path in modules().items()
                if room_of(name) not in RANK and name != "drakit.plugin"]
    assert not homeless, (
        f"{homeless}: not in a room; plugin/ holds only the floor {FLOOR} directly, every "
        f"other module goes into one of {ROOMS} (docs/architecture.md)")


def test_imports_only_go_down_the_rooms() -> None:
    found = modules()
    known = set(found)
    wrong = []
    for name, path in found.items():
        here = room_of(name)
        for target, line in imports_of(name, path, known):
            there = room_of(target)
            if there in LEFT_OUT:
                if here != "ops":
                    wrong.append(f"{path.relative_to(PLUGIN.parent)}:{line} imports {target} "
                                 f"(only ops/ may import the test kit)")
                continue
            if here == there or there not in RANK or here not in RANK:
                continue
            if RANK[there] >= RANK[here]:
                wrong.append(f"{path.relative_to(PLUGIN.parent)}:{line} ({here}) imports "
                             f"{target} ({there}): rooms import only rooms below them, "
                             f"top to bottom {ROOMS}, then the floor {FLOOR}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_in_plugin() -> None:
    found = modules()
    known = set(found)
    graph = {name: sorted({t for t, _ in imports_of(name, path, known) if t in known and t != name})
             for name, path in found.items()}
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    path: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node)
    assert not cycles, "import cycles in plugin/:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checks_see_a_wrong_import(tmp_path: Path) -> None:
    """The direction check reads real import statements: an upward import is found."""
    source = tmp_path / "x.py"
    source.write_text("from drakit.plugin.ops.app import App\n"
                      "if TYPE_CHECKING:\n    from drakit.plugin.kubelet.server import S\n"
                      "def f():\n    from drakit.plugin.claims.prepare import Prepare\n")
    known = {"drakit.plugin.claims.prepare", "drakit.plugin.ops.app"}
    got = sorted(imports_of("drakit.plugin.api.x", source, known))
    assert got == [("drakit.plugin.claims.prepare", 5), ("drakit.plugin.ops.app", 1)]
    assert RANK[room_of("drakit.plugin.ops.app")] > RANK[room_of("drakit.plugin.api.x")]
