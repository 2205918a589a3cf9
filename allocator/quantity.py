"""Kubernetes resource quantities (``resource.Quantity`` of k8s.io/apimachinery) as exact
fractions: what the allocator compares, adds and rounds for counters and consumable capacity.

Grammar (apimachinery ``pkg/api/resource``): optional sign, digits with an optional ``.``
fraction, then one suffix: binary ``Ki Mi Gi Ti Pi Ei``, decimal ``n u m "" k M G T P E``,
or ``e``/``E`` and a signed exponent. Values are rounded up (away from zero) to nanos, as the
API server stores them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final

_NUMBER: Final = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)", re.ASCII | re.DOTALL)
_EXPONENT: Final = re.compile(r"[eE]([+-]?[0-9]+)", re.ASCII)
_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                   "E": 18}
_NANO: Final = Fraction(1, 10**9)


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def _round_up_nano(value: Fraction) -> Fraction:
    scaled = value / _NANO
    n = math.ceil(scaled) if value >= 0 else math.floor(scaled)
    return n * _NANO


@dataclass(frozen=True, order=False)
class Quantity:
    """An exact quantity; ``binary`` says whether its suffix was a binary one (for printing)."""

    value: Fraction
    binary: bool = False

    def cmp(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.binary)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self.binary)

    def ceil_int(self) -> int:
        """``Value()``: rounded up, away from zero, to an integer."""
        return math.ceil(self.value) if self.value >= 0 else math.floor(self.value)

    def ceil_milli(self) -> int:
        """``MilliValue()``: ``ceil(x*1000)`` away from zero."""
        v = self.value * 1000
        return math.ceil(v) if v >= 0 else math.floor(v)

    def is_integer(self) -> bool:
        return self.value.denominator == 1

    def __str__(self) -> str:
        return canonical(self)


ZERO: Final = Quantity(Fraction(0))


def parse(text: Any) -> Quantity:
    """A quantity from its JSON form (string, or a number some clients send)."""
    if isinstance(text, Quantity):
        return text
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise QuantityError(f"quantity must be a string, not {type(text).__name__}")
    return _parse(str(text).strip() if not isinstance(text, str) else text)


@lru_cache(maxsize=4096)
def _parse(s: str) -> Quantity:
    text = s
    m = _NUMBER.fullmatch(s)
    if not m or not s:
        raise QuantityError(f"{text!r} is not a quantity")
    sign, digits, suffix = m.groups()
    base = Fraction(digits if not digits.startswith(".") else "0" + digits)
    binary = False
    if suffix in _BINARY:
        value = base * 2 ** _BINARY[suffix]
        binary = True
    elif suffix in _DECIMAL:
        value = base * Fraction(10) ** _DECIMAL[suffix]
    else:
        e = _EXPONENT.fullmatch(suffix)
        if not e:
            raise QuantityError(f"{text!r} is not a quantity (unknown suffix {suffix!r})")
        value = base * Fraction(10) ** int(e.group(1))
    if sign == "-":
        value = -value
    return Quantity(_round_up_nano(value), binary)


def from_int(n: int) -> Quantity:
    return Quantity(Fraction(n))


def canonical(q: Quantity) -> str:
    """The API server's rendering: the largest suffix that keeps an integer mantissa."""
    v = q.value
    if v == 0:
        return "0"
    sign = "-" if v < 0 else ""
    a = abs(v)
    if q.binary and a.denominator == 1:
        n = int(a)
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            step = 2 ** _BINARY[suffix]
            if n % step == 0:
                return f"{sign}{n // step}{suffix}"
        return f"{sign}{n}"
    for exp, suffix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""),
                        (-3, "m"), (-6, "u"), (-9, "n")):
        scaled = a / Fraction(10) ** exp
        if scaled.denominator == 1:
            return f"{sign}{int(scaled)}{suffix}"
    return f"{sign}{math.ceil(a / _NANO)}n"
