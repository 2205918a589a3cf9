"""Options of the ``hostdev`` discoverer (``discovery.hostdev`` in the ``--config`` file).

Shape (camelCase keys; unknown keys are errors)::

    pool: my-pool                 # default: the node name
    rules:
      - name: kvm                 # a DNS label; device names start with it
        match: ['KERNEL=="kvm", SUBSYSTEM=="misc"']   # any of these rules (udev syntax)
        sharing: shared           # exclusive (default) | shared | a number of slots
        env: KVM_DEVICE           # KVM_DEVICE=<path in the container>
      - name: serial
        match: ['SUBSYSTEM=="tty", ATTRS{idVendor}=="0403", ATTRS{idProduct}=="6001"']
        links: ["/dev/serial/by-id/*"]   # symlinks to the node go along
        permissions: rw           # cgroup access r/w/m (default rwm)
        containerPath: /dev/ttyUSB0       # default: the host path; {devname} {kernel}
        uid: 1000
        gid: 20
        fileMode: "0660"
      - name: gpu
        match: ['SUBSYSTEM=="drm", KERNEL=="card[0-9]*|renderD*"']
        group: parent             # the nodes of one parent device are one device
        mounts: [{hostPath: /usr/share/vulkan, containerPath: /usr/share/vulkan}]

Every error is a ``ValueError`` that :func:`~drakit.discovery.plugin.parse_plugin_options`
turns into ``discovery.hostdev.rules.<i>.<field>: …``; a rule with a syntax error names its
column.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from drakit.discovery.builtin._common import PoolName
from drakit.discovery.builtin.hostdev.rules import Rule, parse_rule
from drakit.discovery.names import is_dns_label

RULE_NAME_MAX = 40
"""Room left in a 63-byte device name for the identity after ``<rule name>-``."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_PLACEHOLDERS = ("{devname}", "{kernel}")
MAX_SLOTS = 1_000_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              frozen=True)


def _absolute(path: str, what: str) -> str:
    """``path`` normalised, with one leading ``/`` (POSIX keeps ``//dev`` as it is)."""
    if not path.startswith("/") or "\x00" in path or ".." in path.split("/"):
        raise ValueError(f"{what} must be an absolute path without '..': {path!r}")
    return "/" + os.path.normpath(path).lstrip("/")


class HostMount(_Strict):
    """A bind mount from the host into the container. Mounting ``/``, ``/dev`` or anything
    above a device directory is refused: hostdev hands out device nodes one by one."""

    host_path: str
    container_path: str
    read_only: bool = True

    @field_validator("host_path", "container_path")
    @classmethod
    def _path(cls, v: str) -> str:
        norm = _absolute(v, "a mount path")
        if norm == "/" or norm.split("/")[1] in ("dev", "sys", "proc"):
            raise ValueError(f"{v!r}: hostdev never mounts /, /dev, /sys, /proc or a part "
                             "of them (device nodes go in one by one)")
        return norm


class RuleSpec(_Strict):
    """One named rule: what it matches and how its devices are offered and prepared."""

    name: str
    match: list[str] = Field(min_length=1)
    sharing: Literal["exclusive", "shared"] | int = "exclusive"
    group: Literal["none", "parent"] = "none"
    links: list[str] = Field(default_factory=list)
    permissions: str | None = None
    container_path: str | None = None
    uid: int | None = Field(default=None, ge=0, le=2**32 - 1)
    gid: int | None = Field(default=None, ge=0, le=2**32 - 1)
    file_mode: int | None = None
    mounts: list[HostMount] = Field(default_factory=list)
    env: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not is_dns_label(v) or len(v) > RULE_NAME_MAX:
            raise ValueError(f"{v!r} is not a DNS label of at most {RULE_NAME_MAX} characters "
                             "(lower-case letters, digits, '-')")
        return v

    @field_validator("match", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("match")
    @classmethod
    def _rules(cls, v: list[str]) -> list[str]:
        for i, text in enumerate(v):
            try:
                rule = parse_rule(text)
            except ValueError as e:   # RuleSyntaxError names the column
                raise ValueError(f"match[{i}]: {e}") from None
            if rule.path_glob is not None and not rule.path_glob.startswith("/dev/"):
                raise ValueError(f"match[{i}]: a path glob is below /dev: {text!r}")
        return v

    @field_validator("sharing", mode="before")
    @classmethod
    def _not_a_bool(cls, v: object) -> object:
        if isinstance(v, bool):   # YAML's true/yes: an int to pydantic, one slot
            raise ValueError(f"sharing is exclusive, shared or a number of slots, not {v}")
        return v

    @field_validator("sharing")
    @classmethod
    def _slots(cls, v: str | int) -> str | int:
        if isinstance(v, int) and not 1 <= v <= MAX_SLOTS:
            raise ValueError(f"a number of slots is 1 to {MAX_SLOTS}, not {v}")
        return v

    @field_validator("links")
    @classmethod
    def _links(cls, v: list[str]) -> list[str]:
        for glob in v:
            if not os.path.normpath(_absolute(glob, "a link glob")).startswith("/dev/"):
                raise ValueError(f"a link glob is below /dev: {glob!r}")
        return v

    @field_validator("permissions")
    @classmethod
    def _permissions(cls, v: str | None) -> str | None:
        if v is not None and (not v or set(v) - set("rwm") or len(set(v)) != len(v)):
            raise ValueError(f"permissions are some of r, w, m (cgroup access), not {v!r}")
        return v

    @field_validator("container_path")
    @classmethod
    def _container_path(cls, v: str | None) -> str | None:
        if v is None:
            return v
        plain = v
        for p in _PLACEHOLDERS:
            plain = plain.replace(p, "x")
        if "{" in plain or "}" in plain:
            raise ValueError(f"containerPath {v!r}: the placeholders are {{devname}} and "
                             "{kernel}")
        if _absolute(plain, "containerPath") == "/":
            raise ValueError(f"containerPath {v!r} names no file")
        return v

    @field_validator("file_mode", mode="before")
    @classmethod
    def _mode(cls, v: object) -> object:
        if isinstance(v, str):
            try:
                v = int(v, 8)
            except ValueError:
                raise ValueError(f"fileMode is an octal string such as '0660': {v!r}") from None
        if isinstance(v, int) and not 0 <= v <= 0o777:
            raise ValueError(f"fileMode is permission bits 0 to 0o777, not {v!r} (0o{v:o}): "
                             "write it as an octal string such as '0660'")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.fullmatch(v):
            raise ValueError(f"env is an environment variable name, not {v!r}")
        return v

    @model_validator(mode="after")
    def _one_path_per_device(self) -> RuleSpec:
        fixed = self.container_path is not None and not any(
            p in self.container_path for p in _PLACEHOLDERS)
        if fixed and (self.group == "parent" or self.links):
            raise ValueError("containerPath without {devname} or {kernel} names one node, "
                             "but group: parent or links give a device several")
        return self

    @property
    def parsed(self) -> list[Rule]:
        """The ``match`` rules, parsed."""
        return [parse_rule(text) for text in self.match]

    def container_path_for(self, host_path: str, kernel: str) -> str:
        """Where the node ``host_path`` (``/dev/…``) appears in the container."""
        if self.container_path is None:
            return host_path
        devname = host_path.removeprefix("/dev/")
        return self.container_path.replace("{devname}", devname).replace("{kernel}", kernel)


class HostdevOptions(_Strict):
    """Options of the ``hostdev`` plugin: a ``pool`` name and the ``rules``, at least one;
    rule names are unique."""

    pool: PoolName | None = None
    rules: list[RuleSpec] = Field(default_factory=list, validate_default=True)

    @field_validator("rules")
    @classmethod
    def _unique(cls, v: list[RuleSpec]) -> list[RuleSpec]:
        if not v:   # no --config, or the rules under another key: nothing could be offered
            raise ValueError("hostdev needs at least one rule (discovery.hostdev.rules in "
                             "the --config file)")
        seen: set[str] = set()
        for spec in v:
            if spec.name in seen:
                raise ValueError(f"two rules are named {spec.name!r}")
            seen.add(spec.name)
        return v
