"""Finding discovery plugins by name: entry points, built-ins, or ``module:Class``.

A name is resolved in this order:

1. ``module:Class`` (contains ``:``): the class is imported directly (local code);
2. a built-in (``net``, ``pci``, ``example``; :data:`drakit.discovery.builtin.BUILTIN_PLUGINS`);
3. an entry point of the group ``drakit.discovery`` (``importlib.metadata``): the way an
   installed vendor package registers its plugin::

       [project.entry-points."drakit.discovery"]
       acme = "drakit_acme.plugin:AcmeDiscovery"

Built-ins win over an entry point of the same name (a warning is logged), so an installed
package cannot silently replace them. Two installed distributions registering the same name
are an error when that name is loaded (:class:`PluginLoadError` naming both distributions
and their targets), never a silent first-wins: which one ``importlib.metadata`` yields first
depends on ``sys.path`` order. Errors are :class:`PluginLoadError` naming the plugin and, for
an unknown name, listing the available ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points

from drakit.discovery.builtin import BUILTIN_PLUGINS
from drakit.discovery.plugin import DiscoveryContext, DiscoveryPlugin

ENTRY_POINT_GROUP = "drakit.discovery"
"""The entry point group vendor packages register their plugin classes under."""

_log = logging.getLogger(__name__)


class PluginLoadError(Exception):
    """A discovery plugin could not be found, imported or constructed."""


class UnusedConfigSectionError(PluginLoadError):
    """A ``discovery.<name>`` section of the ``--config`` file names no loaded plugin (an
    error under ``--strict``; otherwise the same text is a warning)."""


def _dist_label(ep: EntryPoint) -> str:
    dist = ep.dist
    if dist is None:
        return "an unknown distribution"
    return f"{dist.name} {dist.version}"


def _dist_key(ep: EntryPoint) -> str:
    name = ep.dist.name if ep.dist is not None else ""
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503 normalised


def _registered() -> dict[str, list[EntryPoint]]:
    """Entry points of the group by name, one per (distribution, target): the same
    distribution seen twice on ``sys.path`` is not a conflict."""
    by_name: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN_PLUGINS:
            if ep.value != BUILTIN_PLUGINS[ep.name]:
                _log.warning("entry point %s = %s (%s) shadows a built-in plugin; ignored",
                             ep.name, ep.value, _dist_label(ep))
            continue
        known = by_name.setdefault(ep.name, [])
        if not any(_dist_key(k) == _dist_key(ep) and k.value == ep.value for k in known):
            known.append(ep)
    return by_name


def _conflict(name: str, eps: list[EntryPoint]) -> PluginLoadError:
    listed = " and ".join(f"{_dist_label(ep)} ({ep.value})" for ep in eps)
    return PluginLoadError(
        f"discovery plugin {name!r} is registered by {len(eps)} installed distributions: "
        f"{listed}; uninstall all but one, or name the class as module:Class")


def available_plugins() -> dict[str, str]:
    """Every plugin name that can be loaded → its ``module:Class`` (built-ins and entry
    points of group ``drakit.discovery``), sorted by name. A name registered by two
    distributions is left out (an error is logged; loading it raises)."""
    found: dict[str, str] = {}
    for name, eps in _registered().items():
        if len(eps) > 1:
            _log.error("%s", _conflict(name, eps))
            continue
        found[name] = eps[0].value
    found.update(BUILTIN_PLUGINS)
    return dict(sorted(found.items()))


def _one_line(exc: BaseException) -> str:
    """``exc`` as ``Type: message`` on one line; a SyntaxError names its file and line."""
    if isinstance(exc, SyntaxError) and exc.filename:
        text = f"{exc.msg} ({exc.filename}, line {exc.lineno})"
    else:
        text = str(exc)
    text = " ".join(text.split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _import(name: str, target: str) -> type[DiscoveryPlugin]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise PluginLoadError(f"discovery plugin {name!r}: {target!r} is not 'module:Class'")
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as e:  # ImportError, SyntaxError, or whatever the module raises
        raise PluginLoadError(f"discovery plugin {name!r}: importing module {module_name} "
                              f"failed: {_one_line(e)}") from e
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise PluginLoadError(f"discovery plugin {name!r}: module {module_name} has no {attr}"
                              ) from None
    if not (isinstance(obj, type) and issubclass(obj, DiscoveryPlugin)):
        raise PluginLoadError(f"discovery plugin {name!r}: {target} is not a DiscoveryPlugin "
                              "subclass")
    return obj


def load_plugin_class(name: str) -> type[DiscoveryPlugin]:
    """The plugin class for ``name`` (a registered name or ``module:Class``).

    Raises :class:`PluginLoadError`: unknown name (listing the available ones), a name two
    installed distributions register (naming both), import failure, or a target that is
    not a :class:`DiscoveryPlugin` subclass."""
    if ":" in name:
        return _import(name, name)
    if name not in BUILTIN_PLUGINS:
        eps = _registered().get(name, [])
        if len(eps) > 1:
            raise _conflict(name, eps)
    available = available_plugins()
    target = available.get(name)
    if target is None:
        listed = ", ".join(available) or "none"
        raise PluginLoadError(f"unknown discovery plugin {name!r}; available: {listed} "
                              "(or give module:Class)")
    return _import(name, target)


def section_names(specs: Iterable[str]) -> dict[str, str]:
    """Each ``--discovery`` entry (a registered name or ``module:Class``) → the name its
    plugin goes by, which is also its ``discovery.<name>`` section of the ``--config`` file
    (see :func:`plugin_name`). Empty entries are skipped. Raises :class:`PluginLoadError`
    as :func:`load_plugin_class` does."""
    out: dict[str, str] = {}
    for raw in specs:
        spec = raw.strip()
        if spec:
            out[spec] = plugin_name(spec, load_plugin_class(spec))
    return out


def unused_config_sections(sections: Iterable[str], loaded: Iterable[str],
                           source: str = "--config",
                           specs: Mapping[str, str] | None = None) -> list[str]:
    """One message per ``discovery.<name>`` section of the ``--config`` file that no loaded
    plugin reads, naming the loaded plugins, the closest name and every plugin that could
    be loaded; empty when all are used. Its options would otherwise be dropped in silence
    and the plugin run with its defaults.

    Each message starts with ``source``, where the sections come from (``--config
    FILE``). ``loaded`` are the names the loaded plugins read their sections under. ``specs`` maps
    ``--discovery`` entries to those names (:func:`section_names`): a section keyed by a
    ``module:Class`` entry is reported with the key its plugin reads (``discovery.acme``
    for ``--discovery mymod:AcmeDiscovery`` whose class says ``name = "acme"``), one key
    per plugin whichever way it was loaded."""
    used = sorted(set(loaded))
    known = sorted(set(available_plugins()) | set(used))
    loaded_text = f"loaded: {', '.join(used) or 'none'}"
    out = []
    for name in sorted(set(sections) - set(used)):
        read_as = (specs or {}).get(name)
        if read_as is not None:
            out.append(f"{source}: discovery.{name} is not a loaded plugin's name: the plugin "
                       f"of --discovery {name} reads its options from discovery.{read_as} "
                       f"({loaded_text})")
            continue
        close = difflib.get_close_matches(name, used, n=1) or \
            difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean discovery.{close[0]}?" if close else ""
        out.append(f"{source}: discovery.{name} is not a loaded plugin ({loaded_text}"
                   f"{hint}; known plugins: {', '.join(known)})")
    return out


def plugin_name(name: str, cls: type[DiscoveryPlugin]) -> str:
    """The name a loaded plugin goes by: the name it was registered under, or for
    ``module:Class`` the class's ``name`` attribute (the spec itself when that is empty)."""
    if ":" in name:
        return cls.name or name
    return name


def load_plugins(
    names: Iterable[str],
    context_factory: Callable[[str], DiscoveryContext],
) -> list[DiscoveryPlugin]:
    """Construct the plugins ``names`` in order, each with ``context_factory(plugin name)``
    (see :func:`plugin_name`; use it to hand each plugin its own ``options``). A context
    whose ``plugin_name`` is empty gets that name filled in.

    Raises :class:`PluginLoadError` for an unknown or broken plugin, a name given twice, or a
    constructor that fails (e.g. invalid options): the message names the plugin.
    """
    plugins: list[DiscoveryPlugin] = []
    seen: set[str] = set()
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        cls = load_plugin_class(name)
        pname = plugin_name(name, cls)
        if pname in seen:
            raise PluginLoadError(f"discovery plugin {pname!r} is given twice")
        seen.add(pname)
        context = context_factory(pname)
        if not context.plugin_name:
            context = dataclasses.replace(context, plugin_name=pname)
        try:
            plugins.append(cls(context))
        except PluginLoadError:
            raise
        except Exception as e:
            # a ValueError is an options error already naming discovery.<plugin>.<field>
            detail = " ".join(str(e).split()) if isinstance(e, ValueError) else _one_line(e)
            raise PluginLoadError(f"discovery plugin {pname!r}: {detail}") from e
    return plugins


def plugin_instances(plugins: object, argument: str = "plugins") -> list[DiscoveryPlugin]:
    """``plugins`` checked to be a list (or tuple) of :class:`DiscoveryPlugin` instances, the
    objects a caller constructs itself instead of naming plugins for :func:`load_plugins`.

    Raises ``TypeError`` naming ``argument`` and the position: a plugin class where an
    instance is wanted (``plugins=[AcmeDiscovery]``; the message says to pass
    ``AcmeDiscovery(DiscoveryContext(...))``), a name (plugins by name go to
    ``discovery``), any other object, or one instance not in a list."""
    if not isinstance(plugins, list | tuple):
        raise TypeError(f"{argument} must be a list of DiscoveryPlugin instances, not "
                        f"{_what(plugins)}")
    for i, p in enumerate(plugins):
        if isinstance(p, DiscoveryPlugin):
            continue
        where = f"{argument}[{i}]"
        if isinstance(p, type) and issubclass(p, DiscoveryPlugin):
            raise TypeError(f"{where} is the class {p.__name__}, not an instance of it: pass "
                            f"{p.__name__}(DiscoveryContext(driver_name=..., node_name=...)), "
                            "or its name in discovery=[...]")
        if isinstance(p, str):
            raise TypeError(f"{where} is the name {p!r}, not a DiscoveryPlugin instance: "
                            f"plugins by name go in discovery=[{p!r}]")
        raise TypeError(f"{where} is {_what(p)}, not a DiscoveryPlugin instance")
    return list(plugins)


def _what(obj: object) -> str:
    """``obj`` described for a type error: ``a dict``, ``the class Foo``, ``an AcmeDiscovery``."""
    if isinstance(obj, type):
        return f"the class {obj.__name__}"
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
