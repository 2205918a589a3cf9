"""Settings of the node agent: command-line flags, each with an environment variable, and an
optional YAML ``--config`` file for per-plugin options.

Flag names follow the Go drivers (``--node-name``, ``--kubelet-registrar-directory-path``,
``--kubelet-plugins-directory-path``, ``--cdi-root``); every flag can also be set through the
environment variable named in its help (NODE_NAME, …). Flags win over the environment.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from drakit.plugin.names import check_driver_name


class Settings(BaseModel):
    """Everything ``drakit run`` needs. Paths are host paths (the same inside the pod)."""

    model_config = ConfigDict(extra="forbid")

    driver_name: str
    node_name: str
    kubeconfig: str | None = None
    registrar_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    plugins_dir: Path = Path("/var/lib/kubelet/plugins")
    cdi_root: Path = Path("/var/run/cdi")
    cdi_class: str = "device"
    cdi_version_max: str | None = None
    discovery: list[str] = Field(default_factory=lambda: ["net"])
    config_file: Path | None = None
    plugin_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    sysfs_root: Path = Path("/sys")
    #: Where the host's ``/dev`` is: the discovery context's ``dev_root`` and the CDI
    #: host-node check's view of ``/dev/...`` paths (tests without root).
    dev_root: Path = Path("/dev")
    pod_uid: str | None = None
    health: bool = True
    health_resend_seconds: float = 10.0
    #: Write AllocatedDeviceStatus (``status.devices[]``) of prepared claims. Off for a
    #: cluster without the DRAResourceClaimDeviceStatus feature gate or without RBAC for
    #: ``resourceclaims/status``: prepare and unprepare then never touch the API for status.
    device_status: bool = True
    http_endpoint: str | None = None
    strict: bool = False
    log_format: str = "text"
    verbosity: int = 0
    resync_seconds: float = 30.0
    rescan_seconds: float = 30.0
    orphan_grace_seconds: float = 300.0
    orphan_check_seconds: float = 60.0

    @field_validator("http_endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v:
            from drakit.plugin.ops.http import parse_endpoint

            parse_endpoint(v)
        return v

    @field_validator("cdi_version_max")
    @classmethod
    def _cdi_version(cls, v: str | None) -> str | None:
        from drakit.cdi.version import CDI_VERSIONS

        if v is not None and v not in CDI_VERSIONS:
            raise ValueError(f"--cdi-version-max {v!r}: not a CDI specification version; "
                             f"known: {', '.join(CDI_VERSIONS)}")
        return v

    @field_validator("discovery")
    @classmethod
    def _some_discovery(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("--discovery: name at least one discovery plugin")
        return v

    @field_validator("verbosity")
    @classmethod
    def _verbosity(cls, v: int) -> int:
        if not 0 <= v <= 10:
            raise ValueError(f"-v/--verbosity: must be 0 to 10 (7 shows every line), got {v}")
        return v

    @field_validator("orphan_grace_seconds")
    @classmethod
    def _not_negative(cls, v: float) -> float:
        if not v >= 0:
            raise ValueError(f"--orphan-grace-seconds: must be zero or more, got {v}")
        return v

    @field_validator(
        "resync_seconds", "rescan_seconds", "health_resend_seconds", "orphan_check_seconds"
    )
    @classmethod
    def _positive(cls, v: float, info: Any) -> float:
        if not v > 0:
            flag = "--" + str(info.field_name).replace("_", "-")
            raise ValueError(f"{flag}: must be greater than zero, got {v}")
        return v

    @field_validator("driver_name")
    @classmethod
    def _driver(cls, v: str) -> str:
        return check_driver_name(v, "--driver-name")

    @property
    def data_dir(self) -> Path:
        """The plugin data dir: ``<plugins dir>/<driver>`` (checkpoint, DRA socket)."""
        return self.plugins_dir / self.driver_name


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(name, default)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _env_bool(name: str) -> bool:
    """A boolean environment variable; anything but the usual spellings is an error."""
    raw = os.environ.get(name, "").strip().lower()
    if raw not in _TRUE + _FALSE:
        raise ValueError(f"environment variable {name}={raw!r}: expected true or false")
    return raw in _TRUE


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``drakit run`` (each defaults to its environment variable). A malformed
    environment value is a usage error naming the variable."""
    try:
        _add_run_arguments(p)
    except ValueError as e:
        p.error(str(e))


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--driver-name", default=_env("DRIVER_NAME"), help="DRA driver name [DRIVER_NAME]"
    )
    p.add_argument("--node-name", default=_env("NODE_NAME"), help="this node's name [NODE_NAME]")
    p.add_argument(
        "--kubeconfig",
        default=_env("KUBECONFIG"),
        help="kubeconfig file; in-cluster config when unset [KUBECONFIG]",
    )
    p.add_argument(
        "--kubelet-registrar-directory-path",
        default=_env("KUBELET_REGISTRAR_DIRECTORY_PATH", "/var/lib/kubelet/plugins_registry"),
        help="kubelet plugin registration dir [KUBELET_REGISTRAR_DIRECTORY_PATH]",
    )
    p.add_argument(
        "--kubelet-plugins-directory-path",
        default=_env("KUBELET_PLUGINS_DIRECTORY_PATH", "/var/lib/kubelet/plugins"),
        help="kubelet plugins dir; data dir is <this>/<driver> [KUBELET_PLUGINS_DIRECTORY_PATH]",
    )
    p.add_argument(
        "--cdi-root", default=_env("CDI_ROOT", "/var/run/cdi"), help="CDI spec dir [CDI_ROOT]"
    )
    p.add_argument(
        "--cdi-class",
        default=_env("CDI_CLASS", "device"),
        help="class part of the CDI kind <driver>/<class> [CDI_CLASS]",
    )
    p.add_argument(
        "--cdi-version-max",
        default=_env("CDI_VERSION_MAX"),
        help="highest cdiVersion to write, e.g. 0.5.0 for podman 4.3 [CDI_VERSION_MAX]",
    )
    p.add_argument(
        "--discovery",
        default=_env("DISCOVERY", "net"),
        help="comma-separated discovery plugins: entry point names or module:Class [DISCOVERY]",
    )
    p.add_argument(
        "--config",
        default=_env("DRAKIT_CONFIG"),
        help="YAML file; its 'discovery' map holds per-plugin options [DRAKIT_CONFIG]",
    )
    p.add_argument(
        "--sysfs-root", default=_env("SYSFS_ROOT", "/sys"), help="sysfs root [SYSFS_ROOT]"
    )
    p.add_argument(
        "--dev-root", default=_env("DEV_ROOT", "/dev"),
        help="where the host's /dev is: plugins' dev_root and the CDI spec's host device "
        "nodes are looked up below it [DEV_ROOT]",
    )
    p.add_argument(
        "--pod-uid",
        default=_env("POD_UID"),
        help="pod UID: per-pod socket names for rolling updates [POD_UID]",
    )
    p.add_argument(
        "--no-health",
        action="store_true",
        default=_env_bool("DISABLE_HEALTH"),
        help="do not serve or advertise the dra-health stream [DISABLE_HEALTH]",
    )
    p.add_argument(
        "--no-device-status",
        action="store_true",
        default=_env_bool("DISABLE_DEVICE_STATUS"),
        help="do not write AllocatedDeviceStatus of prepared claims [DISABLE_DEVICE_STATUS]",
    )
    p.add_argument(
        "--http-endpoint",
        default=_env("HTTP_ENDPOINT"),
        help="host:port for /metrics, /healthz, /readyz [HTTP_ENDPOINT]",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        default=_env_bool("STRICT"),
        help="refuse to publish when any device breaks an API rule [STRICT]",
    )
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=_env("LOG_FORMAT", "text"),
        help="log format [LOG_FORMAT]",
    )
    p.add_argument(
        "-v",
        "--v",
        "--verbosity",
        dest="verbosity",
        type=int,
        default=_env("VERBOSITY", "0"),
        help="log verbosity as klog's -v: 0 = start-up, changes and problems; 2 = one line "
        "per claim and outcome; 4-5 = debug; 6 = each API request and kubelet call; 7 = all "
        "[VERBOSITY]",
    )
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=_env("RESYNC_SECONDS", "30"),
        help="ResourceSlice resync period [RESYNC_SECONDS]",
    )
    p.add_argument(
        "--orphan-grace-seconds",
        type=float,
        default=_env("ORPHAN_GRACE_SECONDS", "300"),
        help="seconds a prepared claim's ResourceClaim must be gone (and no pod on this node "
        "reference it) before it is unprepared locally [ORPHAN_GRACE_SECONDS]",
    )
    p.add_argument(
        "--orphan-check-seconds",
        type=float,
        default=_env("ORPHAN_CHECK_SECONDS", "60"),
        help="period of the orphan claim sweep [ORPHAN_CHECK_SECONDS]",
    )


def settings_from_args(ns: argparse.Namespace) -> Settings:
    """Build Settings from parsed flags; raises ValueError with the flag name when a required
    value is missing or the config file is unreadable."""
    for flag, value in (("--driver-name", ns.driver_name), ("--node-name", ns.node_name)):
        if not value:
            raise ValueError(f"{flag} is required (or its environment variable)")
    try:
        settings = _settings(ns, {})
    except ValidationError as e:
        raise ValueError("; ".join(_describe(err) for err in e.errors())) from None
    if ns.kubeconfig:
        check_file(ns.kubeconfig, "--kubeconfig")
    if ns.config:
        check_file(ns.config, "--config")
        settings.plugin_options = read_config_file(ns.config)
    return settings


def check_file(path: str, flag: str) -> None:
    """ValueError naming ``flag`` when ``path`` does not exist or is not a readable file."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{flag} {path}: no such file")
    if not p.is_file():
        raise ValueError(f"{flag} {path}: not a file")
    if not os.access(p, os.R_OK):
        raise ValueError(f"{flag} {path}: not readable")


def _describe(err: Any) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    return msg if msg.startswith("-") else f"{'.'.join(map(str, err['loc']))}: {msg}"


def read_config_file(path: str) -> dict[str, dict[str, Any]]:
    """The ``discovery`` map of a ``--config`` YAML file: plugin name → options. Any other
    top-level key, or a plugin entry that is not a map, is an error naming it."""
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"--config {path}: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"--config {path}: must be a YAML map with a 'discovery' key")
    unknown = sorted(str(k) for k in doc if k != "discovery")
    if unknown:
        raise ValueError(f"--config {path}: unknown key(s) {', '.join(unknown)} "
                         "(the file holds only 'discovery')")
    disc = doc.get("discovery") or {}
    if not isinstance(disc, dict):
        raise ValueError(f"--config {path}: 'discovery' must be a map of plugin name to options")
    for name, opts in disc.items():
        if opts is not None and not isinstance(opts, dict):
            raise ValueError(f"--config {path}: discovery.{name}: must be a map of options")
    return {str(k): dict(v or {}) for k, v in disc.items()}


def _settings(ns: argparse.Namespace, options: dict[str, dict[str, Any]]) -> Settings:
    return Settings(
        driver_name=ns.driver_name,
        node_name=ns.node_name,
        kubeconfig=ns.kubeconfig,
        registrar_dir=Path(ns.kubelet_registrar_directory_path),
        plugins_dir=Path(ns.kubelet_plugins_directory_path),
        cdi_root=Path(ns.cdi_root),
        cdi_class=ns.cdi_class,
        cdi_version_max=ns.cdi_version_max,
        discovery=[d.strip() for d in ns.discovery.split(",") if d.strip()],
        config_file=Path(ns.config) if ns.config else None,
        plugin_options=options,
        sysfs_root=Path(ns.sysfs_root),
        dev_root=Path(ns.dev_root),
        pod_uid=ns.pod_uid or None,
        health=not ns.no_health,
        device_status=not ns.no_device_status,
        http_endpoint=ns.http_endpoint,
        strict=ns.strict,
        log_format=ns.log_format,
        verbosity=ns.verbosity,
        resync_seconds=ns.resync_seconds,
        orphan_grace_seconds=ns.orphan_grace_seconds,
        orphan_check_seconds=ns.orphan_check_seconds,
    )
