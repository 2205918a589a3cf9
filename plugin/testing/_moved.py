"""The kit's module paths before it was cut into subpackages by job, kept importable for one
release (drakit 0.2 removes them).

``import drakit.plugin.testing.realcluster`` (or ``from ... import RealAPIServer``) still
works: a finder on :data:`sys.meta_path` answers for every old path in :data:`MOVED` with a
stand-in module that warns once (DeprecationWarning naming the new module) and looks each
name up in the new modules, in order, so every object is the very one the new path gives
(``isinstance`` holds across both). Names that were parts of a class assembled from mixins
(``VerbHandlers``, ``RegistryWrites``, ``NodeLayout`` as a base ...) went away with the
mixins; everything public is there.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

PACKAGE = "drakit.plugin.testing"

#: old module (below drakit.plugin.testing) → the new modules its names are in, the main first
MOVED: dict[str, tuple[str, ...]] = {
    "apiserver_access": ("apiserver.access",),
    "apiserver_apply": ("apiserver.apply",),
    "apiserver_claims": ("apiserver.claims",),
    "apiserver_cli": ("apiserver.cli",),
    "apiserver_convert": ("apiserver.convert",),
    "apiserver_errors": ("apiserver.errors",),
    "apiserver_faults": ("apiserver.faults",),
    "apiserver_fixtures": ("apiserver.fixtures",),
    "apiserver_http": ("apiserver.http.server", "apiserver.http.routes",
                       "apiserver.http.watch"),
    "apiserver_http_base": ("apiserver.http.answer",),
    "apiserver_http_verbs": ("apiserver.http.verbs",),
    "apiserver_http_watch": ("apiserver.http.watch",),
    "apiserver_json": ("apiserver.jsondoc",),
    "apiserver_log": ("apiserver.requestlog",),
    "apiserver_patch": ("apiserver.patch",),
    "apiserver_pods": ("apiserver.resources",),
    "apiserver_registry": ("apiserver.registry", "apiserver.request", "apiserver.admission"),
    "apiserver_registry_base": ("apiserver.decode", "apiserver.request",
                                "apiserver.admission", "apiserver.registry"),
    "apiserver_registry_writes": ("apiserver.registry",),
    "apiserver_resources": ("apiserver.resources",),
    "apiserver_routes": ("apiserver.http.routes",),
    "apiserver_schema": ("apiserver.schema",),
    "apiserver_selectors": ("apiserver.selectors",),
    "apiserver_store": ("apiserver.store",),
    "apiserver_validate": ("apiserver.validation",),
    "fake_kubelet": ("kubelet.fake", "kubelet.model", "kubelet.calls", "kubelet.health",
                     "kubelet.cli"),
    "fake_kubelet_calls": ("kubelet.calls",),
    "fake_kubelet_cli": ("kubelet.cli",),
    "fake_kubelet_health": ("kubelet.health",),
    "fake_kubelet_registration": ("kubelet.registration", "kubelet.plugins"),
    "fake_kubelet_types": ("kubelet.model",),
    "realcluster": ("real.controlplane", "real.binaries", "real.process", "real.audit",
                    "real.objects"),
    "realcluster_audit": ("real.audit",),
    "realcluster_identity": ("real.identity",),
    "realcluster_objects": ("real.objects",),
    "realcluster_process": ("real.process",),
    "realcluster_rest": ("real.rest",),
    "realnode": ("real.node", "real.agent", "real.host", "real.images"),
    "realnode_containerd": ("real.containerd",),
    "realnode_drakit": ("real.agent",),
    "realnode_host": ("real.host",),
    "realnode_images": ("real.images",),
    "realnode_kubelet": ("real.kubelet",),
    "realnode_layout": ("real.layout",),
    "realnode_pods": ("real.pods",),
}


class MovedModule(types.ModuleType):
    """The stand-in for an old module path: its names come from the new modules."""

    _targets: Sequence[types.ModuleType]

    def __getattr__(self, name: str) -> Any:
        targets = self.__dict__.get("_targets", ())
        if name.startswith("__") or not targets:
            raise AttributeError(name)
        for target in targets:
            if hasattr(target, name):
                return getattr(target, name)
        raise AttributeError(
            f"{self.__name__!r} (moved to {targets[0].__name__}) has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        targets = self.__dict__.get("_targets", ())
        return sorted({n for t in targets for n in dir(t) if not n.startswith("__")})


def new_paths(old: str) -> tuple[str, ...]:
    """The full new module names of an old one (``realcluster`` or the dotted path)."""
    short = old.removeprefix(PACKAGE + ".")
    return tuple(f"{PACKAGE}.{m}" for m in MOVED[short])


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return MovedModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        assert isinstance(module, MovedModule)
        paths = new_paths(module.__name__)
        warnings.warn(
            f"{module.__name__} is deprecated (removed in drakit 0.2): import from "
            f"{' / '.join(paths)} instead", DeprecationWarning, stacklevel=2)
        module._targets = [importlib.import_module(p) for p in paths]
        names = {n for t in module._targets for n in getattr(t, "__all__", ())}
        module.__dict__["__all__"] = sorted(names)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        parent, _, short = fullname.rpartition(".")
        if parent != PACKAGE or short not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _LOADER)


_LOADER = _Loader()
_FINDER = _Finder()


def install() -> None:
    """Put the finder on sys.meta_path (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
