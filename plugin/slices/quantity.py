"""Kubernetes resource quantities as exact decimals (apimachinery ``resource.Quantity``): what
the slice rules validate and print, and what the allocator (``drakit explain``) compares, adds
and rounds for counters and consumable capacity.

Grammar (k8s.io/apimachinery pkg/api/resource/quantity.go): an optional sign, digits with an
optional ``.`` fraction, then one suffix: binary ``Ki Mi Gi Ti Pi Ei``, decimal ``n u m "" k M
G T P E``, or ``e``/``E`` followed by a signed integer. Parsed values are rounded up (away from
zero) to 9 decimal places, as the API server stores them. :func:`canonical` renders a value the
way the API server prints it (``1.05`` → ``1050m``, ``1.5Gi`` → ``1536Mi``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_UP, Context, Decimal
from functools import lru_cache
from typing import Any, Final, Literal

QUANTITY_REGEX_TEXT: Final = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
# the API server's decode error for a value that is not a quantity (400 BadRequest)
QUANTITY_ERROR: Final = f"quantities must match the regular expression '{QUANTITY_REGEX_TEXT}'"

_NUMBER = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)", re.ASCII | re.DOTALL)
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)", re.ASCII)
_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                   "E": 18}
_DECIMAL_SUFFIX_BY_EXP: Final = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIXES: Final = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_NANO: Final = Decimal("1e-9")
# arithmetic on parsed values: wide enough that no sum, difference or milli value rounds
_EXACT: Final = Context(prec=200)
MAX_INT64: Final = 2**63 - 1

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity (the API server answers 400 on decode, with
    :data:`QUANTITY_ERROR`)."""

    def __init__(self, text: Any) -> None:
        super().__init__(f"{text!r} is not a quantity")
        self.text = text


@dataclass(frozen=True)
class Quantity:
    """An exact quantity: ``value`` (Decimal) and the ``format`` its suffix implies (which
    :func:`canonical` prints it in)."""

    value: Decimal
    format: Format = "DecimalSI"

    def __str__(self) -> str:
        return canonical(self.value, self.format)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(_EXACT.add(self.value, other.value), self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(_EXACT.subtract(self.value, other.value), self.format)

    def ceil_int(self) -> int:
        """``Value()``: rounded up away from zero to an integer."""
        return int(self.value.to_integral_value(rounding=ROUND_UP))

    def milli(self) -> Decimal:
        """The value in thousandths, exact (``MilliValue()`` before rounding)."""
        return _EXACT.scaleb(self.value, 3)

    def ceil_milli(self) -> int:
        """``MilliValue()``: ``ceil(x·1000)`` away from zero."""
        return int(self.milli().to_integral_value(rounding=ROUND_UP))

    def is_integer(self) -> bool:
        return self.value == self.value.to_integral_value()


ZERO: Final = Quantity(Decimal(0))


def parse(text: Any) -> Quantity:
    """Parse a quantity from a JSON string or number. Raises :class:`QuantityError`."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise QuantityError(text)
    return _parse(text if isinstance(text, str) else
                  str(text) if not isinstance(text, float) else repr(text))


@lru_cache(maxsize=4096)
def _parse(s: str) -> Quantity:
    m = _NUMBER.fullmatch(s)
    if not m:
        raise QuantityError(s)
    sign, digits, suffix = m.groups()
    fmt: Format
    number = Decimal(digits)
    if suffix in _BINARY:
        number = _EXACT.multiply(number, Decimal(2) ** _BINARY[suffix])
        fmt = "BinarySI"
    elif suffix in _DECIMAL:
        number = _EXACT.scaleb(number, _DECIMAL[suffix])
        fmt = "DecimalSI"
    else:
        em = _EXPONENT.fullmatch(suffix)
        if not em:
            raise QuantityError(s)
        exp = int(em.group(1))
        if abs(exp) > 10_000:
            raise QuantityError(s)
        number = _EXACT.scaleb(number, exp)
        fmt = "DecimalExponent"
    if sign == "-":
        number = _EXACT.minus(number)
    exponent = number.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -9:
        number = number.quantize(_NANO, rounding=ROUND_UP, context=_EXACT)
    return Quantity(number, fmt)


def canonical(value: Decimal, fmt: Format = "DecimalSI") -> str:
    """The API server's canonical text for a value in a format (``CanonicalizeBytes``): a
    binary value from 1024 on that is an integer takes the largest binary suffix that keeps an
    integer mantissa; any other value the decimal suffix of an exponent that is a multiple of
    3, or ``e`` and the exponent beyond ``E``."""
    if value == 0:
        return "0"
    if fmt == "BinarySI" and not (-1024 < value < 1024) and value == value.to_integral_value():
        n = int(value)
        exp = 0
        while n % 1024 == 0 and exp < len(_BINARY_SUFFIXES) - 1:
            n //= 1024
            exp += 1
        return f"{n}{_BINARY_SUFFIXES[exp]}"
    sign, digits, exponent = value.normalize(_EXACT).as_tuple()
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


_PLAIN: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)


def as_published(q: Quantity, like: Any) -> str:
    """``q`` written the way the published text ``like`` (the value it comes from or is
    compared with) is, as the reader of the object wrote it rather than the API server's
    canonical form: ``like`` itself when it has ``q``'s value (``1000``, not ``1k``), plain
    digits when ``like`` has no suffix, else the canonical text of ``like``'s format
    (``60Gi`` beside ``20Gi``). Text that is not a quantity leaves ``str(q)``."""
    try:
        published = parse(like)
    except QuantityError:
        return str(q)
    text = str(like).strip()
    if published.value == q.value:
        return text
    if _PLAIN.fullmatch(text):
        return format(q.value.normalize(_EXACT), "f") if q.value else "0"
    return canonical(q.value, published.format)


def normalized(text: Any) -> str:
    """A comparison key: equal quantities give equal strings (``1Gi`` == ``1024Mi``);
    text that does not parse is returned unchanged."""
    try:
        q = parse(text)
    except QuantityError:
        return str(text)
    return str(q.value.normalize(_EXACT)) if q.value else "0"
