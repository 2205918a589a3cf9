"""Semantic versions (semver.org 2.0.0) as the Kubernetes CEL semver library parses and
compares them (k8s.io/apiserver ``pkg/cel/library/semverlib.go``, github.com/blang/semver/v4:
build metadata is ignored when comparing)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

_NUM: Final = r"(0|[1-9][0-9]*)"
_PRE_ID: Final = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER: Final = re.compile(
    rf"{_NUM}\.{_NUM}\.{_NUM}(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?",
    re.ASCII,
)


class SemverError(ValueError):
    pass


@dataclass(frozen=True)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: str = ""

    def compare(self, other: Semver) -> int:
        a = (self.major, self.minor, self.patch)
        b = (other.major, other.minor, other.patch)
        if a != b:
            return -1 if a < b else 1
        if not self.pre or not other.pre:
            return (len(other.pre) > 0) - (len(self.pre) > 0)
        for x, y in zip(self.pre, other.pre, strict=False):
            if x == y:
                continue
            xn, yn = x.isdigit(), y.isdigit()
            if xn and yn:
                return -1 if int(x) < int(y) else 1
            if xn != yn:
                return -1 if xn else 1
            return -1 if x < y else 1
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __str__(self) -> str:
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            s += "-" + ".".join(self.pre)
        if self.build:
            s += "+" + self.build
        return s


@lru_cache(maxsize=4096)
def parse(text: str) -> Semver:
    m = _SEMVER.fullmatch(text)
    if not m:
        raise SemverError(f"{text!r} is not a semantic version (semver.org 2.0.0)")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return Semver(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre, m.group(5) or "")


def parse_normalized(text: str) -> Semver:
    """``semver(s, true)``: a leading ``v`` and leading zeros dropped, ``1`` / ``1.2`` filled
    up with zeros."""
    s = text.removeprefix("v")
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or not p[0].isdigit():
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse(".".join(parts))
