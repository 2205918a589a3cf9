"""Compare a ClusterRole with the API requests a component actually made.

The embedded API server records every request as a ``RequestRecord`` (RBAC verb, API
group, resource, subresource, name…; plugin/testing/apiserver/requestlog.py). :func:`compare`
answers two questions the deploy checks ask of a harness run:

- which requests would the real API server refuse, because no rule grants them
  (``missing``);
- which write permissions does the role grant that the run never used (``unused_writes``:
  a grant the code does not need is a grant an attacker with the token gets for free).

Rules follow Kubernetes RBAC matching: a rule applies when its apiGroups, resources
(``resource`` or ``resource/subresource``) and verbs contain the request's (``*`` matches
anything), and, when it lists resourceNames, the request names one of them (a request
without a name, i.e. list, watch, create, deletecollection, never matches such a rule).
Discovery requests (no resource) are not checked: every authenticated user may make them
(``system:discovery``).

Kubernetes 1.36+ also authorizes writes of ``resourceclaims/status`` against the synthetic
subresource ``resourceclaims/driver`` (verbs ``associated-node:<verb>``, name = the driver
name; gate DRAResourceClaimGranularStatusAuthorization). :func:`required_permissions` adds
that check for every status patch/update, so the ClusterRole is checked against what a 1.36
API server asks, not only against the HTTP requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
SYNTHETIC_PREFIXES = ("associated-node:", "arbitrary-node:")


class RequestLike(Protocol):
    """The fields of drakit.plugin.testing.apiserver.requestlog.RequestRecord that RBAC looks at."""

    @property
    def verb(self) -> str: ...
    @property
    def api_group(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def subresource(self) -> str: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True, order=True)
class Permission:
    """One authorization check: (API group, ``resource[/subresource]``, verb, name)."""

    group: str
    resource: str
    verb: str
    name: str = ""

    def __str__(self) -> str:
        group = self.group or "core"
        return f"{self.verb} {group}/{self.resource}" + (f" [{self.name}]" if self.name else "")


@dataclass
class CoverageReport:
    """``missing``: required permissions no rule grants. ``unused_writes``: (group,
    resource, verb) write grants that no required permission used. ``unused_reads``: the
    same for read verbs (informational: a read may serve a path the run did not take)."""

    missing: list[Permission] = field(default_factory=list)
    unused_writes: list[tuple[str, str, str]] = field(default_factory=list)
    unused_reads: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unused_writes

    def describe(self) -> str:
        lines = []
        if self.missing:
            lines.append("requests the ClusterRole does not grant:")
            lines += [f"  {p}" for p in self.missing]
        if self.unused_writes:
            lines.append("write verbs granted but never used:")
            lines += [f"  {v} {g or 'core'}/{r}" for g, r, v in self.unused_writes]
        return "\n".join(lines) or "ok"


def is_write(verb: str) -> bool:
    return verb in WRITE_VERBS or verb.startswith(SYNTHETIC_PREFIXES)


def required_permissions(records: Iterable[RequestLike], driver_name: str) -> list[Permission]:
    """The authorization checks a 1.36+ API server makes for ``records`` (deduplicated,
    sorted): one per request with a resource, plus ``resourceclaims/driver``
    ``associated-node:<verb>`` (name ``driver_name``) for every status patch or update of
    a ResourceClaim."""
    needed: set[Permission] = set()
    for r in records:
        if not r.resource:
            continue
        resource = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
        needed.add(Permission(r.api_group, resource, r.verb, r.name))
        if (r.api_group, resource) == ("resource.k8s.io", "resourceclaims/status") and r.verb in (
            "patch", "update"
        ):
            needed.add(Permission("resource.k8s.io", "resourceclaims/driver",
                                  f"associated-node:{r.verb}", driver_name))
    return sorted(needed)


def _has(values: Sequence[str], value: str) -> bool:
    return "*" in values or value in values


def rule_grants(rule: Mapping[str, Any], p: Permission) -> bool:
    """Whether one PolicyRule (``apiGroups``, ``resources``, ``verbs``, ``resourceNames``)
    grants ``p``."""
    if not _has(rule.get("apiGroups", []), p.group):
        return False
    if not _has(rule.get("verbs", []), p.verb):
        return False
    resources = rule.get("resources", [])
    base, _, sub = p.resource.partition("/")
    if not (_has(resources, p.resource)
            or (sub and (f"{base}/*" in resources or f"*/{sub}" in resources))):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(p.name) and p.name in names)


def grants(rules: Iterable[Mapping[str, Any]], p: Permission) -> bool:
    return any(rule_grants(rule, p) for rule in rules)


def granted_triples(rules: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) for every combination the rules list (wildcards as given)."""
    return {
        (g, r, v)
        for rule in rules
        for g in rule.get("apiGroups", [])
        for r in rule.get("resources", [])
        for v in rule.get("verbs", [])
    }


def compare(
    rules: Sequence[Mapping[str, Any]], records: Iterable[RequestLike], driver_name: str
) -> CoverageReport:
    """Check ``rules`` (a ClusterRole's ``rules``) against ``records``; see the module
    docstring. A wildcard (group, resource or verb ``*``) is always reported as an unused
    write grant: it grants more than any run can use."""
    needed = required_permissions(records, driver_name)
    report = CoverageReport(missing=[p for p in needed if not grants(rules, p)])
    for g, r, v in sorted(granted_triples(rules)):
        if "*" in (g, r, v):  # grants verbs or resources beyond any finite run's use
            report.unused_writes.append((g, r, v))
            continue
        used = any(rule_grants({"apiGroups": [g], "resources": [r], "verbs": [v]},
                               Permission(p.group, p.resource, p.verb)) for p in needed)
        if not used:
            (report.unused_writes if is_write(v) else report.unused_reads).append((g, r, v))
    return report
