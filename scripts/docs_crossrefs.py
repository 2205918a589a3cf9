"""A griffe extension for the documentation site (mkdocs.yml): the Sphinx roles of the
docstrings (``:class:`Pool```, ``:meth:`~drakit.discovery.plugin.DiscoveryPlugin.prepare```)
become cross-references of mkdocs-autorefs, so the API reference shows links instead of the
raw roles.

A role's target is resolved the way Sphinx resolves it, in the scope of the object whose
docstring holds it (its class, its module, their imports); a leading ``~`` shows only the
last name. Each role becomes an *optional* autorefs reference: a link when the target is on
a page of the site, plain code otherwise (a target outside the reference, or one that does
not resolve), so ``mkdocs build --strict`` stays free of unresolved-reference warnings.
The docstrings in the code keep their roles (editors and ``help()`` read them).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?P<role>attr|class|data|exc|func|meth|mod|obj|const):"
                  r"`(?P<short>~?)(?P<target>[\w.]+)`")
"""A Sphinx cross-reference role of the Python domain as the docstrings write it."""


def resolve(obj: griffe.Object, target: str) -> str | None:
    """``target`` as a full path seen from ``obj``'s scope, or None when it does not resolve
    there. An absolute path (``drakit.…``) is taken as written."""
    if target.startswith("drakit.") or target == "drakit":
        return target
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = obj if obj.is_class or obj.is_module else obj.parent
    while scope is not None:
        try:
            full = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{full}.{rest}" if rest else full
    return None


def crossref(obj: griffe.Object, match: re.Match[str]) -> str:
    """The autorefs element for one role: ``<autoref identifier=… optional>``."""
    target = match["target"]
    shown = target.rsplit(".", 1)[-1] if match["short"] else target
    if match["role"] in ("func", "meth"):
        shown += "()"
    code = f"<code>{html.escape(shown)}</code>"
    full = resolve(obj, target)
    if full is None:
        return code
    # the test kit's page documents drakit.plugin.testing under its folder's name, plugin.
    other = (full.removeprefix("drakit.") if full.startswith("drakit.plugin.")
             else f"drakit.{full}" if full.startswith("plugin.") else None)
    slug = f' slug="{html.escape(other)}"' if other else ""
    return f'<autoref identifier="{html.escape(full)}"{slug} optional>{code}</autoref>'


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring of a loaded package (see the module's
    docstring); configured under the python handler's ``extensions`` in mkdocs.yml."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg, set()):
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = ROLE.sub(lambda m, o=obj: crossref(o, m),
                                               obj.docstring.value)


def _walk(obj: griffe.Object, seen: set[str]) -> list[griffe.Object]:
    """``obj`` and every object defined below it (aliases are skipped: their targets are
    walked where they are defined)."""
    if obj.path in seen:
        return []
    seen.add(obj.path)
    found = [obj]
    for member in obj.members.values():
        if isinstance(member, griffe.Object):
            found.extend(_walk(member, seen))
    return found
