"""Device discovery for drakit: the device model, the plugin interface vendors implement,
plugin loading, name helpers, sysfs readers, the hot-plug monitor and test helpers.

A vendor needs only these names (see examples/drakit-example-vendor)::

    from drakit.discovery import Device, DiscoveryPlugin, Pool, Sysfs, dns_label

It knows nothing about gRPC or the kubelet: ``drakit.discovery`` never imports ``drakit.plugin``.
"""

if __name__ != "drakit.discovery":  # the checkout's top-level folder, imported by its own name
    raise ImportError(f"{__name__} is a folder of the drakit checkout, not a package of its "
                      f"own (a second copy of every module): import drakit.discovery instead")

from typing import TYPE_CHECKING, Any

from drakit.discovery.loader import (
    ENTRY_POINT_GROUP,
    PluginLoadError,
    available_plugins,
    load_plugin_class,
    load_plugins,
)
from drakit.discovery.model import (
    CapacityRequestPolicy,
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceCounterConsumption,
    DeviceHealth,
    DeviceTaint,
    Pool,
    ValidRange,
    version,
)
from drakit.discovery.names import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    dns_label,
    dns_labels,
    is_c_identifier,
    is_dns_label,
    is_qualified_name,
    qualified_name,
)
from drakit.discovery.plugin import (
    ClaimRef,
    Condition,
    DeviceRequest,
    DeviceStatus,
    DiscoveryContext,
    DiscoveryPlugin,
    NetworkData,
    PreparedDevice,
    UnprepareRequest,
    env_name,
    parse_plugin_options,
)
from drakit.discovery.sysfs import Sysfs

if TYPE_CHECKING:
    from drakit.discovery.hotplug import HotplugMonitor
    from drakit.discovery.testing import SysfsBuilder, device_node_stand_in

# Imported on first use: the agent starts the hot-plug monitor (pyudev) only when a loaded
# plugin names a subsystem, and the test helpers never (~1 MB of the idle agent's RSS).
_LAZY = {"HotplugMonitor": "drakit.discovery.hotplug", "SysfsBuilder": "drakit.discovery.testing",
         "device_node_stand_in": "drakit.discovery.testing"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ENTRY_POINT_GROUP",
    "NUMA_NODE",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "CapacityRequestPolicy",
    "ClaimRef",
    "Condition",
    "Counter",
    "CounterSet",
    "Device",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceCounterConsumption",
    "DeviceHealth",
    "DeviceRequest",
    "DeviceStatus",
    "DeviceTaint",
    "DiscoveryContext",
    "DiscoveryPlugin",
    "HotplugMonitor",
    "NetworkData",
    "PluginLoadError",
    "Pool",
    "PreparedDevice",
    "Sysfs",
    "SysfsBuilder",
    "UnprepareRequest",
    "ValidRange",
    "available_plugins",
    "device_node_stand_in",
    "dns_label",
    "dns_labels",
    "env_name",
    "is_c_identifier",
    "is_dns_label",
    "is_qualified_name",
    "load_plugin_class",
    "load_plugins",
    "parse_plugin_options",
    "qualified_name",
    "version",
]
