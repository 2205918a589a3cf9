"""The match rules of the ``hostdev`` discoverer: the match keys of udev rules (udev(7)).

A rule is one line of comma-separated match keys, as operators write them for udev::

    SUBSYSTEM=="tty", ATTRS{idVendor}=="0403", ATTRS{idProduct}=="6001"

or a plain absolute path glob for a node without a useful sysfs device (``/dev/fuse``,
``/dev/video*``). :func:`parse_rule` turns the text into a :class:`Rule` or raises
:class:`RuleSyntaxError` naming the column; :meth:`Rule.matches` tests one device.

Keys (udev(7) "Match keys"; values are shell globs, ``*`` ``?`` ``[…]``, with ``|``
separating alternatives; ``==`` matches, ``!=`` must not match):

- ``KERNEL`` / ``SUBSYSTEM`` / ``DRIVER``: the device's kernel name, subsystem, and the
  driver bound to the device itself (empty when none);
- ``ATTR{file}``: a sysfs attribute of the device (a path below the device directory such
  as ``loop/backing_file`` is allowed; ``..`` is not);
- ``ENV{key}``: a device property: the kernel's uevent properties, and where udevd runs its
  database properties (``ID_SERIAL``, ``ID_PATH`` …);
- ``KERNELS`` / ``SUBSYSTEMS`` / ``DRIVERS`` / ``ATTRS{file}``: the same, searched on the
  device and its parents upwards; as in udev, **all** of these keys of one rule must match
  on one and the same device of that chain.

As in udev, a missing attribute, property or driver reads as the empty string, and
trailing whitespace of an attribute value is ignored unless the pattern itself ends with
whitespace. Assignment keys (``NAME=``, ``SYMLINK+=``, ``MODE:=`` …) are refused: hostdev
rules only select devices.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

Operator = Literal["==", "!="]

DEVICE_KEYS = ("KERNEL", "SUBSYSTEM", "DRIVER", "ATTR", "ENV")
"""Keys tested on the device itself."""
PARENT_KEYS = ("KERNELS", "SUBSYSTEMS", "DRIVERS", "ATTRS")
"""Keys tested on the device or one of its parents (all on the same one)."""
_ARG_KEYS = frozenset({"ATTR", "ATTRS", "ENV"})
KNOWN_KEYS = DEVICE_KEYS + PARENT_KEYS
ASSIGN_OPERATORS = ("+=", "-=", ":=", "=")

_KEY_RE = re.compile(r"[A-Za-z_]+")
_ARG_RE = re.compile(r"[A-Za-z0-9_./:-]+")
_PATH_GLOB_RE = re.compile(r"/[^\x00\s\"]*")


class DeviceView(Protocol):
    """What a rule reads of one device (a pyudev device, or a device of a sysfs tree)."""

    @property
    def sys_name(self) -> str: ...

    @property
    def subsystem(self) -> str: ...

    @property
    def driver(self) -> str: ...

    @property
    def parent(self) -> DeviceView | None: ...

    def attribute(self, name: str) -> str | None: ...

    def env(self, name: str) -> str | None: ...


class RuleSyntaxError(ValueError):
    """A rule that cannot be parsed: ``column`` is 1-based in ``text``."""

    def __init__(self, text: str, column: int, message: str) -> None:
        super().__init__(f"column {column}: {message} in rule {text!r}")
        self.text = text
        self.column = column
        self.message = message


@dataclass(frozen=True)
class Match:
    """One ``KEY{arg}<op>"pattern"`` of a rule."""

    key: str
    arg: str | None
    op: Operator
    pattern: str

    def _value(self, device: DeviceView) -> str:
        key = self.key.removesuffix("S") if self.key in PARENT_KEYS else self.key
        if key == "KERNEL":
            return device.sys_name
        if key == "SUBSYSTEM":
            return device.subsystem
        if key == "DRIVER":
            return device.driver
        if key == "ENV":
            return device.env(self.arg or "") or ""
        value = device.attribute(self.arg or "") or ""
        if not self.pattern[-1:].isspace():
            value = value.rstrip()
        return value

    def test(self, device: DeviceView) -> bool:
        """This key on ``device`` alone (no parent walk)."""
        hit = glob_match(self._value(device), self.pattern)
        return hit if self.op == "==" else not hit

    def __str__(self) -> str:
        arg = f"{{{self.arg}}}" if self.arg is not None else ""
        return f'{self.key}{arg}{self.op}"{self.pattern}"'


def glob_match(value: str, pattern: str) -> bool:
    """``value`` against a udev pattern: shell globs (:func:`fnmatch.fnmatchcase`), ``|``
    between alternatives; an empty pattern matches only the empty value."""
    return any(fnmatch.fnmatchcase(value, alt) for alt in pattern.split("|"))


def ancestry(device: DeviceView) -> Iterator[DeviceView]:
    """``device`` and then its parents upwards."""
    current: DeviceView | None = device
    while current is not None:
        yield current
        current = current.parent


@dataclass(frozen=True)
class Rule:
    """A parsed rule: udev match keys, or one absolute ``path_glob``."""

    text: str
    matches: tuple[Match, ...] = ()
    path_glob: str | None = None

    @property
    def device_matches(self) -> tuple[Match, ...]:
        return tuple(m for m in self.matches if m.key in DEVICE_KEYS)

    @property
    def parent_matches(self) -> tuple[Match, ...]:
        return tuple(m for m in self.matches if m.key in PARENT_KEYS)

    def subsystems(self) -> frozenset[str] | None:
        """The subsystems this rule can match: the literal values of its ``SUBSYSTEM==``
        keys, or None when it does not pin one (any subsystem)."""
        literal = [m.pattern for m in self.matches
                   if m.key == "SUBSYSTEM" and m.op == "==" and not _has_glob(m.pattern)]
        if not literal:
            return None
        return frozenset(literal[0].split("|"))

    def matches_device(self, device: DeviceView) -> bool:
        """True when every device key matches ``device`` and every parent key matches on
        one device of ``device``'s chain (udev(7) semantics). A path-glob rule never
        matches here (see :attr:`path_glob`)."""
        if self.path_glob is not None:
            return False
        if not all(m.test(device) for m in self.device_matches):
            return False
        walk = self.parent_matches
        if not walk:
            return True
        return any(all(m.test(d) for m in walk) for d in ancestry(device))


def _has_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def parse_rule(text: str) -> Rule:
    """Parse one rule (see the module docstring). Raises :class:`RuleSyntaxError` with the
    1-based column of the first problem: an unknown key, an assignment, a missing or
    unterminated quote, a missing ``{arg}`` of ``ATTR``/``ATTRS``/``ENV``, an empty rule."""
    stripped = text.strip()
    if not stripped:
        raise RuleSyntaxError(text, 1, "empty rule")
    if stripped.startswith("/"):
        start = text.index("/")
        m = _PATH_GLOB_RE.fullmatch(stripped)
        if m is None or any(part == ".." for part in stripped.split("/")):
            bad = next((i for i, c in enumerate(stripped) if c.isspace() or c in '"\x00'),
                       stripped.find(".."))
            raise RuleSyntaxError(text, start + max(bad, 0) + 1,
                                  "a path glob is one absolute path without spaces, "
                                  "quotes or '..'")
        return Rule(text=text, path_glob=stripped)
    matches: list[Match] = []
    pos = 0
    n = len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        key_m = _KEY_RE.match(text, pos)
        if key_m is None:
            raise RuleSyntaxError(text, pos + 1, "expected a key such as KERNEL or "
                                  "ATTRS{idVendor}" if pos < n else "expected a key after ','")
        key = key_m.group()
        if key not in KNOWN_KEYS:
            raise RuleSyntaxError(text, pos + 1, f"unknown key {key!r} (known: "
                                  f"{', '.join(KNOWN_KEYS)})")
        pos = key_m.end()
        arg: str | None = None
        if pos < n and text[pos] == "{":
            end = text.find("}", pos)
            arg_m = _ARG_RE.fullmatch(text, pos + 1, end) if end > 0 else None
            if key not in _ARG_KEYS:
                raise RuleSyntaxError(text, pos + 1, f"{key} takes no {{…}} argument")
            if arg_m is None or ".." in arg_m.group().split("/") or \
                    arg_m.group().startswith("/"):
                raise RuleSyntaxError(text, pos + 2, f"{key}{{…}} needs a name below the "
                                      "device (letters, digits, '_', '.', '/', ':', '-'; no "
                                      "leading '/', no '..') and a '}'")
            arg = arg_m.group()
            pos = end + 1
        elif key in _ARG_KEYS:
            raise RuleSyntaxError(text, pos + 1, f"{key} needs an argument: {key}{{name}}")
        while pos < n and text[pos] in " \t":
            pos += 1
        op = text[pos:pos + 2]
        if op not in ("==", "!="):
            assign = next((a for a in ASSIGN_OPERATORS if text.startswith(a, pos)
                           and text[pos + len(a):].lstrip(" \t").startswith('"')), None)
            if assign is not None:
                raise RuleSyntaxError(text, pos + 1, f"assignment {key}{assign} is not "
                                      "supported: hostdev rules only match (== or !=)")
            raise RuleSyntaxError(text, pos + 1, "expected == or !=")
        pos += 2
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n or text[pos] != '"':
            raise RuleSyntaxError(text, pos + 1, 'expected a value in double quotes')
        end = text.find('"', pos + 1)
        if end < 0:
            raise RuleSyntaxError(text, pos + 1, "unterminated quoted value")
        matches.append(Match(key=key, arg=arg, op=op, pattern=text[pos + 1:end]))  # type: ignore[arg-type]
        pos = end + 1
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            break
        if text[pos] != ",":
            raise RuleSyntaxError(text, pos + 1, "expected ',' between keys")
        pos += 1
    return Rule(text=text, matches=tuple(matches))
