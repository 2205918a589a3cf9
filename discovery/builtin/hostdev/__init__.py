"""The ``hostdev`` discoverer: the node's own device files for pods, selected by rules in the
syntax of udev rules (:mod:`.rules`), read from the device tree (:mod:`.tree`), named and
described by :mod:`.describe`, configured by :mod:`.options`; the plugin is in
:mod:`.plugin`."""

from drakit.discovery.builtin.hostdev.plugin import HostdevDiscovery

__all__ = ["HostdevDiscovery"]
