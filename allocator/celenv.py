"""The CEL environment of DRA device selectors (DeviceClass ``spec.selectors[].cel`` and a
request's ``selectors[].cel``), as Kubernetes 1.37 defines it in
k8s.io/dynamic-resource-allocation ``cel/compile.go`` on top of the base environment of
k8s.io/apiserver ``pkg/cel/environment/base.go``, evaluated by cel-expr-python (the Google CEL
C++ runtime; the choice and its figures: bench/README.md "CEL library").

One variable, ``device``: ``driver`` (string), ``attributes`` (domain -> name -> bool, int,
string or semver value), ``capacity`` (domain -> name -> quantity) and
``allowMultipleAllocations`` (bool, resource.k8s.io/v1 since 1.34). An attribute name without
a domain is in the driver's domain. Looking up a domain the device has none of gives an empty
map; looking up a missing name is a runtime error ("no such key"), not false, as in the
scheduler.

Libraries (base.go at 1.37, stored-expression environment): the standard library, optional
types, cel.bind (ext.Bindings), ext.Strings v2 (+ format), ext.Sets, ext.Lists v3, the
Kubernetes lists library v1 (isSorted, sum, min, max, indexOf, lastIndexOf, includes), regex
(find, findAll), quantity and semver v1. Not provided by this runtime (a selector using them
fails to compile here, with the name in the error): two-variable comprehensions, sortBy, the
IP / CIDR / URL libraries. The runtime cost limit (``CELSelectorExpressionMaxCost`` =
1,000,000, resource.k8s.io/v1) is not enforced at run time by this runtime; the API server
rejects a selector whose estimated cost exceeds it when the object is written.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import cache, lru_cache
from typing import Any, Final

from drakit.allocator import semver as sv
from drakit.plugin.slices import quantity as qty

#: resource.k8s.io/v1 CELSelectorExpressionMaxCost
CEL_SELECTOR_MAX_COST: Final = 1_000_000
_ENHANCE: Final = ("consider using CEL optional chaining (.? followed by orValue()) or guarding "
                   "the check with has() for optional fields")
_NO_KEY: Final = re.compile(r'Key not found in map\s*:\s*"?(.*?)"?\s*$', re.DOTALL)
_STATUS: Final = re.compile(r"^[A-Z_]+: ")
_DOMAIN_INDEX: Final = re.compile(
    r"""\b(attributes|capacity)\s*\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]""")


@dataclass(frozen=True)
class Selector:
    """A compiled selector expression, or its compile error."""

    expression: str
    program: Any
    error: str
    domains: tuple[tuple[str, str], ...]  # ("attributes"|"capacity", domain) indexed literally


class DeviceValue:
    """The ``device`` variable of one device (``data``), and its CEL activation once built."""

    __slots__ = ("activation", "data")

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.activation: Any = None


@dataclass(frozen=True)
class Outcome:
    """One evaluation: ``value`` (True/False) or ``error`` (the scheduler's wording)."""

    value: bool | None
    error: str = ""


def _runtime() -> Any:
    try:
        from cel_expr_python import cel
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(
            "drakit explain and the allocating test kit need the CEL runtime: "
            "pip install 'drakit[explain]' (cel-expr-python)") from e
    return cel


class _Types:
    """The proto message types standing for the opaque ``kubernetes.Quantity`` and
    ``kubernetes.Semver`` values (cel-expr-python has no opaque Python values)."""

    def __init__(self) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        fdp = descriptor_pb2.FileDescriptorProto(
            name="drakit_allocator_cel.proto", package="kubernetes", syntax="proto3")
        sem = fdp.message_type.add(name="Semver")
        for i, (name, kind) in enumerate([("major", 3), ("minor", 3), ("patch", 3),
                                          ("pre", 9)]):
            sem.field.add(name=name, number=i + 1, type=kind, label=1)
        q = fdp.message_type.add(name="Quantity")
        q.field.add(name="value", number=1, type=9, label=1)  # the Decimal's text, exact
        self.pool = descriptor_pool.DescriptorPool()
        self.pool.Add(fdp)
        self.semver_cls: Any = message_factory.GetMessageClass(
            self.pool.FindMessageTypeByName("kubernetes.Semver"))
        self.quantity_cls: Any = message_factory.GetMessageClass(
            self.pool.FindMessageTypeByName("kubernetes.Quantity"))

    def semver(self, v: sv.Semver) -> Any:
        return self.semver_cls(major=v.major, minor=v.minor, patch=v.patch, pre=".".join(v.pre))

    @staticmethod
    def to_semver(m: Any) -> sv.Semver:
        return sv.Semver(m.major, m.minor, m.patch, tuple(m.pre.split(".")) if m.pre else ())

    def quantity(self, q: qty.Quantity) -> Any:
        return self.quantity_cls(value=str(q.value))

    @staticmethod
    def to_quantity(m: Any) -> qty.Quantity:
        return _quantity_of(m.value)


@lru_cache(maxsize=4096)
def _quantity_of(text: str) -> qty.Quantity:
    return qty.Quantity(Decimal(text or "0"))


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def _extensions(cel: Any, t: _Types) -> list[Any]:
    from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

    T = cel.Type
    SEM = T("kubernetes.Semver")
    QTY = T("kubernetes.Quantity")
    LIST = T.List(T.DYN)
    q, tq, s, ts = t.quantity, t.to_quantity, t.semver, t.to_semver

    def quantity(text: str) -> Any:
        return q(qty.parse(text))

    def is_quantity(text: str) -> bool:
        try:
            qty.parse(text)
        except qty.QuantityError:
            return False
        return True

    def as_integer(m: Any) -> int:
        v = tq(m)
        if not v.is_integer() or not -(2**63) <= v.value <= 2**63 - 1:
            raise ValueError("cannot convert value to integer")
        return int(v.value)

    def semver_of(text: str, normalize: bool = False) -> Any:
        return s(sv.parse_normalized(text) if normalize else sv.parse(text))

    def is_semver(text: str, normalize: bool = False) -> bool:
        try:
            semver_of(text, normalize)
        except sv.SemverError:
            return False
        return True

    def sorted_list(xs: list[Any]) -> bool:
        return all(_cmp(a, b) <= 0 for a, b in itertools.pairwise(xs))

    def list_max(xs: list[Any]) -> Any:
        if not xs:
            raise ValueError("max of empty list")
        return max(xs)

    def list_min(xs: list[Any]) -> Any:
        if not xs:
            raise ValueError("min of empty list")
        return min(xs)

    def index_of(xs: list[Any], x: Any) -> int:
        return next((i for i, y in enumerate(xs) if y == x), -1)

    def last_index_of(xs: list[Any], x: Any) -> int:
        return next((i for i in range(len(xs) - 1, -1, -1) if xs[i] == x), -1)

    def includes(xs: Any, x: Any) -> bool:
        return x in xs if isinstance(xs, list) else xs == x

    def find(text: str, pattern: str) -> str:
        m = re.search(pattern, text)
        return m.group(0) if m else ""

    def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
        out = [m.group(0) for m in re.finditer(pattern, text)]
        return out if limit < 0 else out[:limit]

    def flatten(xs: list[Any], depth: int = 1) -> list[Any]:
        if depth < 0:
            raise ValueError("level must be non-negative")
        out: list[Any] = []
        for x in xs:
            if isinstance(x, list) and depth > 0:
                out.extend(flatten(x, depth - 1))
            else:
                out.append(x)
        return out

    def distinct(xs: list[Any]) -> list[Any]:
        out: list[Any] = []
        for x in xs:
            if x not in out:
                out.append(x)
        return out

    def list_slice(xs: list[Any], start: int, end: int) -> list[Any]:
        if start < 0 or end < 0 or start > end or end > len(xs):
            raise ValueError(f"cannot slice({start}, {end}) a list of size {len(xs)}")
        return xs[start:end]

    def ordered(a: Any, b: Any) -> int:
        if isinstance(a, t.quantity_cls) and isinstance(b, t.quantity_cls):
            return _cmp(tq(a).value, tq(b).value)
        if isinstance(a, t.semver_cls) and isinstance(b, t.semver_cls):
            return ts(a).compare(ts(b))
        raise TypeError("no such overload")

    def overload(oid: str, ret: Any, params: list[Any], impl: Callable[..., Any],
                 member: bool) -> Any:
        return cel.Overload(oid, ret, params, is_member=member, impl=impl)

    table: dict[str, list[Any]] = {
        "quantity": [overload("string_to_quantity", QTY, [T.STRING], quantity, False)],
        "isQuantity": [overload("is_quantity_string", T.BOOL, [T.STRING], is_quantity, False)],
        "sign": [overload("quantity_sign", T.INT, [QTY],
                          lambda m: _cmp(tq(m).value, 0), True)],
        # The runtime dispatches on the kind "message" for both types: one overload each,
        # the implementation picks by the value's type.
        "isGreaterThan": [overload("kubernetes_is_greater_than", T.BOOL, [T.DYN, T.DYN],
                                   lambda a, b: ordered(a, b) > 0, True)],
        "isLessThan": [overload("kubernetes_is_less_than", T.BOOL, [T.DYN, T.DYN],
                                lambda a, b: ordered(a, b) < 0, True)],
        "compareTo": [overload("kubernetes_compare_to", T.INT, [T.DYN, T.DYN], ordered, True)],
        "asApproximateFloat": [overload("quantity_get_float", T.DOUBLE, [QTY],
                                        lambda m: float(tq(m).value), True)],
        "asInteger": [overload("quantity_get_int", T.INT, [QTY], as_integer, True)],
        "isInteger": [overload("quantity_is_integer", T.BOOL, [QTY],
                               lambda m: tq(m).is_integer(), True)],
        "add": [
            overload("quantity_add", QTY, [QTY, QTY], lambda a, b: q(tq(a) + tq(b)), True),
            overload("quantity_add_int", QTY, [QTY, T.INT],
                     lambda a, b: q(tq(a) + qty.Quantity(Decimal(b))), True)],
        "sub": [
            overload("quantity_sub", QTY, [QTY, QTY], lambda a, b: q(tq(a) - tq(b)), True),
            overload("quantity_sub_int", QTY, [QTY, T.INT],
                     lambda a, b: q(tq(a) - qty.Quantity(Decimal(b))), True)],
        "semver": [
            overload("string_to_semver", SEM, [T.STRING], semver_of, False),
            overload("string_bool_to_semver", SEM, [T.STRING, T.BOOL], semver_of, False)],
        "isSemver": [
            overload("is_semver_string", T.BOOL, [T.STRING], is_semver, False),
            overload("is_semver_string_bool", T.BOOL, [T.STRING, T.BOOL], is_semver, False)],
        "major": [overload("semver_major", T.INT, [SEM], lambda m: m.major, True)],
        "minor": [overload("semver_minor", T.INT, [SEM], lambda m: m.minor, True)],
        "patch": [overload("semver_patch", T.INT, [SEM], lambda m: m.patch, True)],
        # Kubernetes lists library v1
        "isSorted": [overload("list_is_sorted", T.BOOL, [LIST], sorted_list, True)],
        "sum": [overload("list_sum", T.DYN, [LIST], lambda xs: sum(xs), True)],
        "max": [overload("list_max", T.DYN, [LIST], list_max, True)],
        "min": [overload("list_min", T.DYN, [LIST], list_min, True)],
        "indexOf": [overload("list_index_of", T.INT, [LIST, T.DYN], index_of, True)],
        "lastIndexOf": [overload("list_last_index_of", T.INT, [LIST, T.DYN], last_index_of,
                                 True)],
        "includes": [overload("list_includes_dyn_dyn", T.BOOL, [T.DYN, T.DYN], includes, True)],
        # Kubernetes regex library
        "find": [overload("string_find_string", T.STRING, [T.STRING, T.STRING], find, True)],
        "findAll": [
            overload("string_find_all_string", T.List(T.STRING), [T.STRING, T.STRING],
                     find_all, True),
            overload("string_find_all_string_int", T.List(T.STRING),
                     [T.STRING, T.STRING, T.INT], find_all, True)],
        # ext.Sets
        "sets.contains": [overload("list_sets_contains_list", T.BOOL, [LIST, LIST],
                                   lambda a, b: all(x in a for x in b), False)],
        "sets.equivalent": [overload("list_sets_equivalent_list", T.BOOL, [LIST, LIST],
                                     lambda a, b: all(x in b for x in a)
                                     and all(x in a for x in b), False)],
        "sets.intersects": [overload("list_sets_intersects_list", T.BOOL, [LIST, LIST],
                                     lambda a, b: any(x in b for x in a), False)],
        # ext.Lists v3 (first and last come with the optional types; sortBy is a macro
        # this runtime cannot add)
        "distinct": [overload("list_distinct", LIST, [LIST], distinct, True)],
        "flatten": [overload("list_flatten", LIST, [LIST], flatten, True),
                    overload("list_flatten_int", LIST, [LIST, T.INT], flatten, True)],
        "reverse": [overload("list_reverse", LIST, [LIST], lambda xs: xs[::-1], True)],
        "slice": [overload("list_slice", LIST, [LIST, T.INT, T.INT], list_slice, True)],
        "sort": [overload("list_sort", LIST, [LIST], sorted, True)],
        "lists.range": [overload("lists_range", T.List(T.INT), [T.INT],
                                 lambda n: list(range(n)), False)],
    }
    k8s = cel.CelExtension("kubernetes", [cel.FunctionDecl(n, o) for n, o in table.items()])
    return [ext_bindings.ExtBindings(), ext_strings.ExtStrings(), ext_optional.ExtOptional(), k8s]


class Environment:
    """Compiles selectors once (a cache by expression text) and evaluates them on devices."""

    def __init__(self) -> None:
        cel = _runtime()
        self._cel = cel
        self.types = _Types()
        self._env = cel.NewEnv(
            descriptor_pool=self.types.pool,
            variables={"device": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)},
            extensions=_extensions(cel, self.types),
        )
        self._cache: dict[str, Selector] = {}

    def compile(self, expression: str) -> Selector:
        hit = self._cache.get(expression)
        if hit is not None:
            return hit
        domains = tuple((m.group(1), m.group(2) if m.group(2) is not None else m.group(3))
                        for m in _DOMAIN_INDEX.finditer(expression))
        try:
            program = self._env.compile(expression)
            error = ""
            rt = program.return_type().name()
            if rt not in ("bool", "dyn", "BOOL", "DYN"):
                error = f"must evaluate to bool or the unknown type, not {rt.lower()}"
                program = None
        except RuntimeError as e:
            program, error = None, "compilation failed: " + _STATUS.sub("", str(e)).split(
                " [INVALID_ARGUMENT]")[0].strip()
        sel = Selector(expression, program, error, domains)
        if len(self._cache) < 4096:
            self._cache[expression] = sel
        return sel

    def device_value(self, driver: str, device: Mapping[str, Any]) -> DeviceValue:
        """The ``device`` variable for one (v1-shaped) device of ``driver``."""
        attributes: dict[str, dict[str, Any]] = {}
        for name, attr in (device.get("attributes") or {}).items():
            domain, _, ident = name.rpartition("/")
            try:
                value = self._attribute(attr)
            except ValueError as e:  # the scheduler's wording (cel.Device conversion)
                raise ValueError(f"attribute {name}: {e}") from None
            attributes.setdefault(domain or driver, {})[ident] = value
        capacity: dict[str, dict[str, Any]] = {}
        for name, cap in (device.get("capacity") or {}).items():
            domain, _, ident = name.rpartition("/")
            try:
                value = self.types.quantity(qty.parse((cap or {}).get("value", "0")))
            except ValueError as e:
                raise ValueError(f"capacity {name}: {e}") from None
            capacity.setdefault(domain or driver, {})[ident] = value
        return DeviceValue({"driver": driver, "attributes": attributes, "capacity": capacity,
                            "allowMultipleAllocations": bool(
                                device.get("allowMultipleAllocations"))})

    def _attribute(self, attr: Mapping[str, Any]) -> Any:
        if "version" in attr:
            return self.types.semver(sv.parse(attr["version"]))
        if "versions" in attr:
            return [self.types.semver(sv.parse(v)) for v in attr["versions"]]
        for key in ("int", "bool", "string", "ints", "bools", "strings"):
            if key in attr:
                return attr[key]
        raise ValueError("unsupported attribute value")

    def evaluate(self, selector: Selector, value: DeviceValue) -> Outcome:
        """Evaluate on a ``device_value``; a compile error is returned as the outcome's error."""
        if selector.program is None:
            return Outcome(None, selector.error)
        data = value.data
        missing = [(f, d) for f, d in selector.domains if d not in data[f]]
        if missing:
            data = dict(data)
            for field, domain in missing:
                data[field] = {**data[field], domain: {}}
            result = selector.program.eval(data={"device": data})
        else:
            if value.activation is None:  # converted to CEL values once per device
                value.activation = self._env.Activation(data={"device": data})
            result = selector.program.eval(value.activation)
        out = result.value()
        if isinstance(out, bool):
            return Outcome(out)
        if result.type().name() in ("error", "ERROR"):
            return Outcome(None, _runtime_error(str(out)))
        return Outcome(None, f"CEL result of type {result.type().name().lower()} could not be "
                             "converted to bool")


def _runtime_error(message: str) -> str:
    text = _STATUS.sub("", message).strip()
    m = _NO_KEY.search(text)
    if m:
        return f"no such key: {m.group(1)}. {_ENHANCE}"
    return text


@cache
def default_environment() -> Environment:
    """One environment per process (compiling the libraries takes a few milliseconds)."""
    return Environment()
