"""The import graph and the class bases of the test kit (drakit.plugin.testing), read from the
source with ast: every import anywhere in a module (top level, functions, TYPE_CHECKING)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KIT_DIR = REPO / "plugin" / "testing"
KIT = "drakit.plugin.testing"


def kit_modules() -> dict[str, Path]:
    """Module name → file, for every module of the kit."""
    out: dict[str, Path] = {}
    for path in sorted(KIT_DIR.rglob("*.py")):
        parts = list(path.relative_to(KIT_DIR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([KIT, *parts])] = path
    return out


def _resolve(module: str, path: Path, level: int, current: str) -> str:
    if level == 0:
        return module
    package = current if path.name == "__init__.py" else current.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{module}" if module else package


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The kit modules ``name`` imports (``from pkg import mod`` counts as mod)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", path, node.level, name)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = kit_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def cross_module_bases() -> list[str]:
    """``module.Class(Base)`` where Base is a class of another kit module (a mixin or base
    class assembled across files)."""
    modules = kit_modules()
    found: list[str] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        imported: dict[str, str] = {}  # local name → defining kit module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", path, node.level, name)
                if base in modules:
                    for a in node.names:
                        imported[a.asname or a.name] = base
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for b in node.bases:
                    if isinstance(b, ast.Name) and b.id in imported:
                        found.append(f"{name}.{node.name}({b.id} from {imported[b.id]})")
    return found
