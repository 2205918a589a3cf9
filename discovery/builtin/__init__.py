"""The discovery plugins shipped with drakit: ``net``, ``pci``, ``example`` and
``hostdev``.

They are registered under the entry point group ``drakit.discovery`` (pyproject.toml);
:data:`BUILTIN_PLUGINS` names them too, so they load even from a source checkout that was
never installed.
"""

from __future__ import annotations

BUILTIN_PLUGINS: dict[str, str] = {
    "net": "drakit.discovery.builtin.net:NetDiscovery",
    "pci": "drakit.discovery.builtin.pci:PciDiscovery",
    "example": "drakit.discovery.builtin.example:ExampleDiscovery",
    "hostdev": "drakit.discovery.builtin.hostdev:HostdevDiscovery",
}
"""Built-in plugin name → ``module:Class``."""

__all__ = ["BUILTIN_PLUGINS"]
