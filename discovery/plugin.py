"""The interface a vendor implements: one class that finds devices and says how to prepare them.

A discovery plugin is constructed once with a :class:`DiscoveryContext` and then asked to
``discover()`` its pools (again after each hot-plug event in one of its ``subsystems``).
drakit routes each allocated device to the plugin whose inventory holds it and calls
``prepare`` with the device and its typed opaque config; everything else (sockets, kubelet
versions, checkpoint, CDI files, ResourceSlices, claim status, health stream) is drakit's.

Plugins are found through the entry point group ``drakit.discovery`` (name → class) or as
``module:Class`` (see :mod:`drakit.discovery.loader`).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.cdi.spec import ContainerEdits, DeviceNode
from drakit.discovery.model import Condition as Condition  # the status models live there
from drakit.discovery.model import Device, DeviceHealth, DeviceStatus, Pool
from drakit.discovery.model import NetworkData as NetworkData

ModelT = TypeVar("ModelT", bound=BaseModel)


def _accepted_keys(model: type[BaseModel]) -> set[str]:
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        keys.add(name)
        if info.alias:
            keys.add(info.alias)
        if isinstance(info.validation_alias, str):
            keys.add(info.validation_alias)
    return keys


def parse_plugin_options(model: type[ModelT], plugin: str, options: dict[str, Any]) -> ModelT:
    """``options`` (a plugin's ``discovery.<plugin>`` section of the ``--config`` file)
    validated into ``model``, a pydantic model the plugin defines.

    Unknown keys are errors even when ``model`` would ignore extras (a typo must not be
    silently dropped). Raises ``ValueError`` naming the config section and the field, e.g.
    ``discovery.net.naming: Input should be 'name' or 'mac'``; the loader turns it into a
    :class:`~drakit.discovery.loader.PluginLoadError` for that plugin.
    """
    unknown = sorted(set(options) - _accepted_keys(model))
    if unknown and model.model_config.get("extra") != "allow":
        raise ValueError(f"discovery.{plugin}.{unknown[0]}: Extra inputs are not permitted "
                         f"(known: {', '.join(sorted(model.model_fields)) or 'none'})")
    try:
        return model.model_validate(options)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        msg = str(err["msg"]).removeprefix("Value error, ")  # pydantic's prefix of ValueError
        raise ValueError(f"discovery.{plugin}.{loc}: {msg}") from None


@dataclass(frozen=True)
class DiscoveryContext:
    """What a plugin gets at construction.

    ``sysfs_root`` replaces ``/sys`` (tests pass a synthetic tree); ``dev_root`` replaces
    ``/dev``. ``options`` are the plugin's own settings from the ``--config`` file
    (``discovery.<plugin name>`` section) as plain YAML data; a plugin declares their type
    with a pydantic model and reads them with :meth:`parse_options`. ``plugin_name`` is the
    name the plugin was loaded under (the loader fills it in when it is empty).
    """

    driver_name: str
    node_name: str
    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    options: dict[str, Any] = field(default_factory=dict)
    plugin_name: str = ""

    def parse_options(self, model: type[ModelT]) -> ModelT:
        """This plugin's ``options`` validated into ``model`` (typed: returns a ``model``).

        Call it in ``__init__``: an invalid section then stops the agent at start-up with
        ``discovery plugin 'NAME': discovery.NAME.FIELD: ...``. Unknown keys are errors.
        Raises ``ValueError`` (see :func:`parse_plugin_options`)."""
        return parse_plugin_options(model, self.plugin_name or "<plugin>", self.options)

    @property
    def default_pool(self) -> str:
        """The conventional node-local pool name: the node name."""
        return self.node_name


class ClaimRef(BaseModel):
    """A ResourceClaim as the kubelet names it: namespace, name and UID."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    uid: str


class DeviceRequest(BaseModel):
    """One allocated device handed to :meth:`DiscoveryPlugin.prepare`.

    ``request`` is the allocation result's request name (``main`` or ``main/sub`` for a
    firstAvailable subrequest). ``share_id`` is the allocation result's shareID
    (DRAConsumableCapacity), ``admin_access`` its adminAccess flag. ``config`` is the
    plugin's ``config_model`` instance built from the opaque configs meant for this driver
    and this request (class configs first, then claim configs; later keys win), or None
    when the plugin declares no model. ``consumed_capacity`` maps capacity names to quantity
    strings.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    claim: ClaimRef
    request: str
    pool: str
    device: Device
    share_id: str | None = None
    admin_access: bool = False
    config: BaseModel | None = None
    consumed_capacity: dict[str, str] = Field(default_factory=dict)

    def config_as(self, model: type[ModelT]) -> ModelT | None:
        """``config`` typed as the plugin's ``config_model`` (None when the claim carries no
        opaque config for this request). Raises ``TypeError`` when it is another model."""
        if self.config is None:
            return None
        if not isinstance(self.config, model):
            raise TypeError(f"opaque config is a {type(self.config).__name__}, "
                            f"not a {model.__name__}")
        return self.config


class PreparedDevice(BaseModel):
    """The answer of a prepare hook for one device.

    ``edits`` go into the claim's CDI spec under this device (must not be empty; drakit
    adds an env var naming the device when it is). ``state`` is any JSON object the plugin
    wants back at unprepare; it is recorded in the checkpoint.
    """

    edits: ContainerEdits = Field(default_factory=ContainerEdits)
    status: DeviceStatus | None = None
    state: dict[str, Any] = Field(default_factory=dict)


class UnprepareRequest(BaseModel):
    """One previously prepared device handed to :meth:`DiscoveryPlugin.unprepare`. It is built
    from the checkpoint alone: the claim may no longer exist in the API."""

    claim: ClaimRef
    request: str
    pool: str
    device: str
    share_id: str | None = None
    state: dict[str, Any] = Field(default_factory=dict)


def env_name(device_name: str) -> str:
    """An environment-variable-safe upper-case form of a device name (``gpu-0`` → ``GPU_0``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", device_name).upper()


class DiscoveryPlugin(ABC):
    """Base class of every discovery plugin.

    Class attributes:

    - ``name``: the plugin's registry name (``--discovery NAME``).
    - ``subsystems``: udev subsystems whose add/remove/change events trigger re-discovery
      (e.g. ``("net",)``); empty means no hot-plug.
    - ``config_model``: a pydantic model of the opaque configuration parameters, or None.
      Unknown fields are errors. ``config_api_version`` / ``config_kind``, when set, must
      match ``apiVersion`` / ``kind`` of the opaque object.
    - ``config_strict``: the parameters are validated as JSON in pydantic's strict mode
      (default True: ``true`` is not an int and ``"150"`` is not a number, as Go's
      encoding/json decodes them; a string still fills an enum or date-time field);
      False validates in lax mode.
    - ``prepare_changes_node``: whether :meth:`prepare` changes something on the node (a
      device configured, a file written) that a crash in the middle of a prepare must roll
      back through :meth:`unprepare`. ``True`` (default): every claim is recorded
      ``PrepareStarted`` before the hook runs and ``PrepareCompleted`` after it (two
      checkpoint writes). A plugin whose ``prepare`` only computes container edits, status
      and state declares ``False`` on purpose: its hooks run before admission and its claims
      are recorded in one checkpoint write instead of two (what that saves per claim is
      measured in bench/README.md and quoted in the vendor's guide): the record comes
      before the CDI spec, and a crash between them leaves a record whose spec the
      start-up recovery writes. Nothing is inferred
      from which methods a class overrides (a plugin that keeps the default ``prepare``
      declares ``False`` too, to get the one write).
    """

    name: ClassVar[str] = ""
    subsystems: ClassVar[tuple[str, ...]] = ()
    config_model: ClassVar[type[BaseModel] | None] = None
    config_api_version: ClassVar[str | None] = None
    config_kind: ClassVar[str | None] = None
    config_strict: ClassVar[bool] = True
    prepare_changes_node: ClassVar[bool] = True

    @classmethod
    def changes_node_on_prepare(cls) -> bool:
        """``prepare_changes_node``: what the plugin declared (default True)."""
        return bool(cls.prepare_changes_node)

    def __init__(self, context: DiscoveryContext) -> None:
        self.context = context

    def watched_subsystems(self) -> tuple[str, ...]:
        """The udev subsystems whose uevents re-run this instance's :meth:`discover`: the
        class's ``subsystems``. A plugin whose subsystems follow from its options (the
        built-in ``hostdev``: from its rules) overrides this; it is read once, at start."""
        return tuple(self.subsystems)

    @abstractmethod
    def discover(self) -> list[Pool]:
        """Return this plugin's pools with all their devices (the complete current inventory).

        Must be cheap enough to run after every hot-plug event; must not raise for one odd
        device (skip it and log instead).
        """

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        """Prepare one device for a claim; return its CDI container edits and status.

        The default puts the device's ``device_nodes`` and ``env`` into the edits, plus
        ``DRAKIT_DEVICE_<NAME>=<pool>/<device>``. Raise an exception to fail the claim; its
        message becomes the claim's error at the kubelet.
        """
        device = request.device
        env = [f"{k}={v}" for k, v in sorted(device.env.items())]
        env.append(f"DRAKIT_DEVICE_{env_name(device.name)}={request.pool}/{device.name}")
        nodes = [DeviceNode(path=p) for p in device.device_nodes]
        return PreparedDevice(edits=ContainerEdits(env=env, device_nodes=nodes or None))

    def unprepare(self, request: UnprepareRequest) -> None:  # noqa: B027 - optional hook
        """Undo ``prepare`` for one device; the default does nothing. Must be idempotent."""

    def health(self) -> dict[tuple[str, str], DeviceHealth]:
        """Health by (pool, device) for devices that are not simply healthy; the default
        reports nothing, which means every discovered device is healthy."""
        return {}
