"""Kubernetes resource quantities as exact decimals (apimachinery ``resource.Quantity``).

Grammar (k8s.io/apimachinery pkg/api/resource/quantity.go): an optional sign, digits with an
optional ``.`` fraction, then one suffix: binary ``Ki Mi Gi Ti Pi Ei``, decimal ``n u m "" k M
G T P E``, or ``e``/``E`` followed by a signed integer. Parsed values are rounded up (away from
zero) to 9 decimal places. :func:`canonical` renders a value the way the API server prints it
(``1.05`` → ``1050m``, ``1.5Gi`` → ``1536Mi``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal, localcontext
from typing import Any, Final, Literal

QUANTITY_REGEX_TEXT: Final = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
QUANTITY_ERROR: Final = f"quantities must match the regular expression '{QUANTITY_REGEX_TEXT}'"

_NUMBER = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)", re.ASCII | re.DOTALL)
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)", re.ASCII)
_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                   "E": 18}
_DECIMAL_SUFFIX_BY_EXP: Final = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIXES: Final = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_NANO: Final = Decimal("1e-9")
MAX_INT64: Final = 2**63 - 1

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity (the API server answers 400 on decode)."""


@dataclass(frozen=True)
class Quantity:
    """An exact quantity: ``value`` (Decimal) and the ``format`` its suffix implies."""

    value: Decimal
    format: Format

    def __str__(self) -> str:
        return canonical(self.value, self.format)

    def ceil_int(self) -> int:
        """``Value()``: rounded up away from zero to an integer."""
        return int(self.value.to_integral_value(rounding=ROUND_UP))

    def ceil_milli(self) -> int:
        """``MilliValue()``: ``ceil(x·1000)`` away from zero."""
        return int((self.value * 1000).to_integral_value(rounding=ROUND_UP))

    def is_integer(self) -> bool:
        return self.value == self.value.to_integral_value()


def parse(text: Any) -> Quantity:
    """Parse a quantity from a JSON string or number. Raises :class:`QuantityError`."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise QuantityError(QUANTITY_ERROR)
    s = str(text) if not isinstance(text, float) else repr(text)
    m = _NUMBER.fullmatch(s)
    if not m:
        raise QuantityError(QUANTITY_ERROR)
    sign, digits, suffix = m.groups()
    fmt: Format
    with localcontext() as ctx:
        ctx.prec = 200
        number = Decimal(digits)
        if suffix in _BINARY:
            number = number * (Decimal(2) ** _BINARY[suffix])
            fmt = "BinarySI"
        elif suffix in _DECIMAL:
            number = number.scaleb(_DECIMAL[suffix])
            fmt = "DecimalSI"
        else:
            em = _EXPONENT.fullmatch(suffix)
            if not em:
                raise QuantityError(QUANTITY_ERROR)
            exp = int(em.group(1))
            if abs(exp) > 10_000:
                raise QuantityError(QUANTITY_ERROR)
            number = number.scaleb(exp)
            fmt = "DecimalExponent"
        if sign == "-":
            number = -number
        exponent = number.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -9:
            number = number.quantize(_NANO, rounding=ROUND_UP)
    return Quantity(number, fmt)


def canonical(value: Decimal, fmt: Format = "DecimalSI") -> str:
    """The API server's canonical text for a value in a format."""
    if value == 0:
        return "0"
    if fmt == "BinarySI" and not (-1024 < value < 1024) and value == value.to_integral_value():
        n = int(value)
        exp = 0
        while n % 1024 == 0 and exp < len(_BINARY_SUFFIXES) - 1:
            n //= 1024
            exp += 1
        return f"{n}{_BINARY_SUFFIXES[exp]}"
    sign, digits, exponent = value.normalize().as_tuple()
    mantissa = int("".join(map(str, digits)))
    e = int(exponent)
    while e % 3:
        mantissa *= 10
        e -= 1
    prefix = "-" if sign else ""
    if fmt == "DecimalExponent":
        return f"{prefix}{mantissa}" + (f"e{e}" if e else "")
    if e in _DECIMAL_SUFFIX_BY_EXP:
        return f"{prefix}{mantissa}{_DECIMAL_SUFFIX_BY_EXP[e]}"
    return f"{prefix}{mantissa}e{e}"


def normalized(text: Any) -> str:
    """A comparison key: equal quantities give equal strings (``1Gi`` == ``1024Mi``);
    text that does not parse is returned unchanged."""
    try:
        q = parse(text)
    except QuantityError:
        return str(text)
    return str(q.value.normalize()) if q.value else "0"

