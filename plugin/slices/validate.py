"""Validate a pool before it is published, and decide what to leave out.

Policy: a device that breaks an API rule is left out and the rest of the pool is
published; an attribute that breaks a rule is dropped and its device kept; a counter set that
breaks a rule is dropped (and with it the devices that consume from it); a pool whose name
or node selection is invalid is skipped as a whole. Each decision is one
:class:`ValidationIssue` naming the pool, the device (or counter set), the field path the way
the API server writes it and the rule. ``strict`` publishing (see
:class:`~drakit.plugin.slices.publisher.SlicePublisher`) refuses instead when there is any issue.

Field paths use the device's position in the pool as handed over
(``spec.devices[<i>]``, ``spec.sharedCounters[<i>]``); after splitting, the device may sit
at another index of another slice.

Rules checked here on top of the server's (rules.py): device names and counter set names
unique in the pool, every ``consumesCounters`` entry names a counter set of the pool and
only counters that set has (the scheduler's pool checks), no attribute given both bare and
with the driver's own domain (``model`` and ``<driver>/model``), and the checks of
:mod:`drakit.plugin.slices.usable` (no device consumes more than its counter set holds, no
quantities of one counter or capacity in mixed kinds of unit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from drakit.discovery.model import Pool
from drakit.plugin.slices import fielderrors as fe
from drakit.plugin.slices import formats, rules, usable
from drakit.plugin.slices.fielderrors import FieldError
from drakit.plugin.slices.rules import DRAKIT_DEFAULT, RuleOptions

Action = Literal["device dropped", "attribute dropped", "counter set dropped", "pool skipped",
                 "field dropped"]


@dataclass(frozen=True)
class ValidationIssue:
    """One rule broken by the inventory and what the publisher did about it."""

    pool: str
    error: FieldError
    action: Action
    device: str | None = None
    counter_set: str | None = None
    attribute: str | None = None

    @property
    def field(self) -> str:
        """The field path as the API server writes it, e.g. ``spec.devices[3].name``."""
        return self.error.field

    @property
    def rule(self) -> str:
        """The error type and detail (the server's wording where it has one)."""
        return f"{self.error.type}: {self.error.detail}" if self.error.detail else self.error.type

    def __str__(self) -> str:
        return self.describe(self.action)

    def describe(self, outcome: str) -> str:
        """The issue naming pool, device (or counter set, attribute), field and rule, then
        ``outcome`` in parentheses: the action taken, or ``refused`` under ``--strict``."""
        where = f"pool {self.pool!r}"
        if self.device is not None:
            where += f" device {self.device!r}"
        if self.counter_set is not None:
            where += f" counter set {self.counter_set!r}"
        if self.attribute is not None:
            where += f" attribute {self.attribute!r}"
        return f"{where}: {self.error} ({outcome})"


@dataclass
class ValidatedPool:
    """A pool reduced to what passes every rule, as resource.k8s.io/v1 JSON.

    ``devices`` and ``counter_sets`` keep the order they were handed over in; splitting
    sorts them.
    """

    name: str
    devices: list[dict[str, Any]] = field(default_factory=list)
    counter_sets: list[dict[str, Any]] = field(default_factory=list)
    node_selector: dict[str, Any] | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    partition_type_attribute: str | None = None
    skip_node_operations: list[str] | None = None

    @property
    def node_local(self) -> bool:
        return self.node_selector is None and not self.all_nodes \
            and not self.per_device_node_selection


@dataclass
class PoolValidation:
    """The result for one pool: ``pool`` is None when the whole pool was skipped."""

    pool: ValidatedPool | None
    issues: list[ValidationIssue] = field(default_factory=list)


class SliceValidationError(ValueError):
    """Strict mode: the inventory breaks API rules; nothing was published.

    ``issues`` lists every problem found (not only the first)."""

    def __init__(self, issues: list[ValidationIssue]) -> None:
        self.issues = issues
        lines = "\n".join(f"  {i.describe('refused')}" for i in issues)
        super().__init__(f"{len(issues)} ResourceSlice validation error(s), refused "
                         f"(--strict):\n{lines}")


def validate_pool(pool: Pool, driver: str, node_name: str,
                  opts: RuleOptions = DRAKIT_DEFAULT) -> PoolValidation:
    """Check one pool; return what may be published and the issues found."""
    issues: list[ValidationIssue] = []

    def skip(errors: Iterable[FieldError]) -> PoolValidation:
        issues.extend(ValidationIssue(pool.name, e, "pool skipped") for e in errors)
        return PoolValidation(None, issues)

    name_errors = formats.pool_name(pool.name, "spec.pool.name")
    if name_errors:
        return skip(name_errors)
    selection: dict[str, Any] = {
        "nodeSelector": pool.node_selector,
        "allNodes": pool.all_nodes,
        "perDeviceNodeSelection": pool.per_device_node_selection,
    }
    if all(v is None for v in selection.values()):
        selection["nodeName"] = node_name
    selection_errors = rules.validate_spec_node_selection(selection)
    if selection_errors:
        return skip(selection_errors)
    if pool.skip_node_operations is not None:
        skip_errors = rules.validate_skip_node_operations(pool.skip_node_operations)
        if skip_errors:
            return skip(skip_errors)
    partition_type = pool.partition_type_attribute
    if partition_type is not None:
        type_errors = formats.fully_qualified_name(partition_type,
                                                   "spec.partitionTypeAttribute")
        if type_errors:
            return skip(type_errors)
    out = ValidatedPool(
        name=pool.name,
        node_selector=pool.node_selector,
        all_nodes=pool.all_nodes is True,
        per_device_node_selection=pool.per_device_node_selection is True,
        partition_type_attribute=partition_type,
        skip_node_operations=pool.skip_node_operations,
    )
    counter_sets: dict[str, dict[str, Any]] = {}
    for i, cs in enumerate(pool.counter_sets):
        api = cs.to_api()
        path = fe.index("spec.sharedCounters", i)
        errors = rules.validate_counter_set(api, path, opts)
        if api.get("name") in counter_sets:
            errors.append(fe.duplicate(path, api.get("name")))
        if errors:
            issues.extend(ValidationIssue(pool.name, e, "counter set dropped",
                                          counter_set=cs.name) for e in errors)
            continue
        counter_sets[api["name"]] = api
        out.counter_sets.append(api)
    names: set[str] = set()
    valid_attributes = _AttributeMemo()
    for i, device in enumerate(pool.devices):
        api = device.to_api()
        path = fe.index("spec.devices", i)
        api, attr_issues = _drop_bad_attributes(pool.name, device.name, api, path, driver,
                                                valid_attributes, opts)
        issues.extend(attr_issues)
        errors = rules.validate_device_structure(
            api, path, per_device=out.per_device_node_selection, opts=opts)
        errors.extend(_capacity_domain_duplicates(api, path, driver, opts))
        errors.extend(_counter_references(api, path, counter_sets))
        errors.extend(usable.counter_errors(api, path, counter_sets))
        errors.extend(usable.capacity_errors(api, path))
        if device.name in names:
            errors.append(fe.duplicate(path, device.name))
        if partition_type is not None and api.get("consumesCounters"):
            errors.extend(rules.validate_partition_type_attribute(
                {"driver": driver, "partitionTypeAttribute": partition_type,
                 "devices": [api]}, device_path=path))
        if errors:
            issues.extend(ValidationIssue(pool.name, e, "device dropped", device=device.name)
                          for e in errors)
            continue
        names.add(device.name)
        out.devices.append(api)
    if partition_type is not None and not any(d.get("consumesCounters") for d in out.devices):
        out.partition_type_attribute = None
        issues.append(ValidationIssue(pool.name, fe.invalid(
            "spec.partitionTypeAttribute", partition_type, "may only be set on a slice which "
            "declares devices that consume counters"), "field dropped"))
    return PoolValidation(out, issues)


def validate_pools(pools: Iterable[Pool], driver: str, node_name: str,
                   opts: RuleOptions = DRAKIT_DEFAULT) -> list[PoolValidation]:
    """Validate every pool; a pool name given twice skips the later pool."""
    results: list[PoolValidation] = []
    seen: set[str] = set()
    for pool in pools:
        if pool.name in seen:
            err = fe.duplicate("spec.pool.name", pool.name)
            results.append(PoolValidation(None, [ValidationIssue(pool.name, err,
                                                                 "pool skipped")]))
            continue
        seen.add(pool.name)
        results.append(validate_pool(pool, driver, node_name, opts))
    return results


def _in_driver_domain(key: str, driver: str) -> str | None:
    """For ``<driver>/<id>`` return ``<id>``; None for other keys."""
    domain, sep, ident = key.partition("/")
    if sep and domain.lower() == driver.lower():
        return ident
    return None


class _AttributeMemo:
    """What :func:`rules.validate_attribute` depends on besides the value's type and
    size, memoized for one pool: whether an attribute key passes the qualified-name rule
    (it alone decides that), and whether a version string is valid semver."""

    def __init__(self) -> None:
        self._keys: dict[str, bool] = {}
        self._versions: dict[str, bool] = {}

    def key_ok(self, key: str) -> bool:
        ok = self._keys.get(key)
        if ok is None:
            ok = self._keys[key] = not formats.qualified_name(key, "")
        return ok

    def version_ok(self, value: str) -> bool:
        ok = self._versions.get(value)
        if ok is None:
            ok = self._versions[value] = not formats.semver(value, "")
        return ok

    def valid(self, key: str, attr: Any) -> bool:
        """True when :func:`rules.validate_attribute` finds nothing wrong with a
        one-member scalar attribute (the usual shape); False means "not known": the
        caller runs the full check."""
        if type(attr) is not dict or len(attr) != 1 or not self.key_ok(key):
            return False
        [(member, value)] = attr.items()
        if member == "int":
            return type(value) is int and rules.INT64_MIN <= value <= rules.MAX_INT64
        if member == "string":
            return type(value) is str and formats.nbytes(value) <= formats.ATTRIBUTE_VALUE_MAX
        if member == "bool":
            return type(value) is bool
        if member == "version":
            return type(value) is str and self.version_ok(value)
        return False


def _drop_bad_attributes(pool: str, device: str, api: dict[str, Any], path: str,
                         driver: str, memo: _AttributeMemo | None = None,
                         opts: RuleOptions = DRAKIT_DEFAULT,
                         ) -> tuple[dict[str, Any], list[ValidationIssue]]:
    """Drop the attributes :func:`rules.validate_attribute` rejects. ``memo`` lets
    one-member scalar attributes (int, bool, string, version) skip the full check when
    their key is known to be valid and their value passes the member's type and size rules
    (what the full check would find), so 10,000 devices with per-device values are cheap."""
    attributes: dict[str, Any] = api.get("attributes") or {}
    if not attributes:
        return api, []
    issues: list[ValidationIssue] = []
    amap = fe.child(path, "attributes")
    keep: dict[str, Any] = {}
    qualified_ids = {i for k in attributes if (i := _in_driver_domain(k, driver)) is not None}
    for key in sorted(attributes):
        attr = attributes[key]
        errors: list[FieldError] = [] if memo is not None and memo.valid(key, attr) \
            else rules.validate_attribute(key, attr, amap)
        if opts.reject_driver_qualified_names:
            errors.extend(rules.driver_qualified_name(driver, key, amap))
        elif "/" not in key and key in qualified_ids:
            errors.append(fe.invalid(amap, key, "the attribute is also given with the driver's "
                                                f"domain as {driver}/{key}"))
        if errors:
            issues.extend(ValidationIssue(pool, e, "attribute dropped", device=device,
                                          attribute=key) for e in errors)
            continue
        keep[key] = attr
    api = dict(api)
    if keep:
        api["attributes"] = keep
    else:
        api.pop("attributes", None)
    return api, issues


def _capacity_domain_duplicates(api: dict[str, Any], path: str, driver: str,
                                opts: RuleOptions = DRAKIT_DEFAULT) -> list[FieldError]:
    capacity = api.get("capacity") or {}
    if not capacity:
        return []
    if opts.reject_driver_qualified_names:
        cpath = fe.child(path, "capacity")
        return [e for k in sorted(capacity) for e in rules.driver_qualified_name(driver, k, cpath)]
    ids = {i for k in capacity if (i := _in_driver_domain(k, driver)) is not None}
    return [fe.invalid(fe.child(path, "capacity"), k, "the capacity is also given with the "
                                                      f"driver's domain as {driver}/{k}")
            for k in sorted(capacity) if "/" not in k and k in ids]


def _counter_references(api: dict[str, Any], path: str,
                        counter_sets: dict[str, dict[str, Any]]) -> list[FieldError]:
    errors: list[FieldError] = []
    consumes = api.get("consumesCounters")
    if not isinstance(consumes, list) or len(consumes) > rules.MAX_CONSUMPTIONS_PER_DEVICE:
        return errors
    for j, item in enumerate(consumes):
        if not isinstance(item, dict) or not item.get("counterSet"):
            continue
        ipath = fe.index(fe.child(path, "consumesCounters"), j)
        cs = counter_sets.get(item["counterSet"])
        if cs is None:
            errors.append(fe.invalid(fe.child(ipath, "counterSet"), item["counterSet"],
                                     "must reference a counterSet defined in the pool's "
                                     "sharedCounters"))
            continue
        for counter in sorted(item.get("counters") or {}):
            if counter not in cs.get("counters", {}):
                errors.append(fe.invalid(fe.child(ipath, "counters"), counter,
                                         "must reference a counter defined in the counterSet "
                                         f"{cs['name']}"))
    return errors
