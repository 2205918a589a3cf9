"""Import only the parts of the ``kubernetes`` package the agent uses.

``import kubernetes.client`` runs ``kubernetes/__init__.py`` first, which imports every
subpackage: ``dynamic`` (and through it ``kubernetes_validate`` and ``jsonschema`` when they
are installed), ``watch``, ``stream`` (websocket-client), ``utils``, ``leaderelection`` and
``informer``. The agent needs ``client`` and ``config`` only; the rest cost ~6 MB of RSS and
~0.1 s of start-up (``make bench``: rss_idle, start_to_registered).

:func:`lean_kubernetes` registers the package as a module whose subpackages load on first
use (PEP 562 module ``__getattr__``), so ``kubernetes.watch`` and friends still work for a
plugin that wants them. The package's own modules run unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

PACKAGE = "kubernetes"


def lean_kubernetes() -> bool:
    """Register ``kubernetes`` without running its ``__init__``; True when done, False when
    it is already imported (nothing to gain) or not installed. Call before anything
    imports it."""
    if PACKAGE in sys.modules:
        return False
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)
    assert isinstance(module, types.ModuleType)

    def __getattr__(name: str) -> Any:  # PEP 562 hook
        if name == "__version__":
            from importlib.metadata import version

            return version(PACKAGE)
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return importlib.import_module(f"{PACKAGE}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}") from None

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[PACKAGE] = module
    return True
