"""Routing of the embedded API server's HTTP layer
(:mod:`drakit.plugin.testing.apiserver.http.server`): a request path becomes a :class:`Route`
(a discovery or OpenAPI document, or a resource with version, namespace, name and
subresource), and a method plus route and query the RBAC verb the request log records.

Errors: :class:`~drakit.plugin.testing.apiserver.errors.ApiError` 404 for a path not served.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any

from drakit.plugin.testing.apiserver import errors as errors
from drakit.plugin.testing.apiserver import schema as schema
from drakit.plugin.testing.apiserver.faults import FaultInjector
from drakit.plugin.testing.apiserver.registry import Registry
from drakit.plugin.testing.apiserver.requestlog import RequestLog
from drakit.plugin.testing.apiserver.resources import (
    CORE_RESOURCES,
    DRA_RESOURCES,
    RESOURCE_GROUP,
    ResourceInfo,
    api_group,
    api_group_list,
    api_versions,
    core_resource_list,
    group_resource_list,
    version_info,
)

__all__ = [
    "Route",
    "ServerContext",
    "openapi_resources",
    "parse_path",
    "query_flag",
    "query_param",
    "rbac_verb",
]


@dataclass
class Route:
    """A parsed request path. ``info`` is None for discovery documents."""

    info: ResourceInfo | None
    version: str
    namespace: str | None
    name: str
    subresource: str
    watch_path: bool
    document: dict[str, Any] | None = None


@dataclass
class ServerContext:
    """What every handler thread shares."""

    registry: Registry
    faults: FaultInjector
    log: RequestLog
    served_versions: tuple[str, ...]
    kubernetes_minor: int | None
    address: str
    stopping: threading.Event


def _resource_route(info: ResourceInfo, version: str, rest: list[str],
                    namespace: str | None, watch_path: bool) -> Route:
    if len(rest) > 2 or (len(rest) == 2 and (rest[1] != "status" or not info.has_status)):
        raise errors.path_not_found()
    name = rest[0] if rest else ""
    subresource = rest[1] if len(rest) == 2 else ""
    if watch_path and subresource:
        raise errors.path_not_found()
    if info.namespaced and namespace is None and name:
        raise errors.path_not_found()
    return Route(info, version, namespace, name, subresource, watch_path)


def parse_path(path: str, ctx: ServerContext) -> Route:
    """Route for ``path``; raises a 404 ApiError for anything not served."""
    parts = [p for p in path.split("/") if p]
    served = ctx.served_versions
    docs: dict[tuple[str, ...], Any] = {
        ("version",): lambda: version_info(ctx.kubernetes_minor),
        ("api",): lambda: api_versions(ctx.address),
        ("api", "v1"): core_resource_list,
        ("apis",): lambda: api_group_list(served),
        ("apis", RESOURCE_GROUP): lambda: api_group(served),
    }
    for v in served:
        docs[("apis", RESOURCE_GROUP, v)] = lambda v=v: group_resource_list(v)
    schema_version = schema.schema_version_for(served, ctx.kubernetes_minor)
    if schema.definitions(schema_version) is not None:
        groups = _openapi_groups(served, schema_version)
        docs[("openapi", "v2")] = lambda: _openapi_v2(served, schema_version)
        docs[("openapi", "v3")] = lambda: schema.openapi_v3_root(groups)
        for gv_path in groups:
            docs[("openapi", "v3", *gv_path.split("/"))] = lambda p=gv_path: groups[p]
    if tuple(parts) in docs:
        return Route(None, "", None, "", "", False, docs[tuple(parts)]())
    if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
        version, rest, table = "v1", parts[2:], CORE_RESOURCES
    elif len(parts) >= 4 and parts[:2] == ["apis", RESOURCE_GROUP] and parts[2] in served:
        version, rest, table = parts[2], parts[3:], DRA_RESOURCES
    else:
        raise errors.path_not_found()
    watch_path = rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or rest[0] not in table:
        raise errors.path_not_found()
    info = table[rest[0]]
    if namespace is not None and not info.namespaced:
        raise errors.path_not_found()
    return _resource_route(info, version, rest[1:], namespace, watch_path)


def openapi_resources(served: tuple[str, ...]) -> list[schema.OpenAPIResource]:
    """Every resource of every served version, for the OpenAPI documents."""
    out = [schema.OpenAPIResource("", "v1", i.kind, i.plural, i.namespaced)
           for i in CORE_RESOURCES.values()]
    out += [schema.OpenAPIResource(RESOURCE_GROUP, v, i.kind, i.plural, i.namespaced)
            for v in served for i in DRA_RESOURCES.values()]
    return out


@functools.cache
def _openapi_v2(served: tuple[str, ...], schema_version: str | None) -> dict[str, Any] | None:
    return schema.openapi_v2_document(openapi_resources(served), schema_version)


@functools.cache
def _openapi_groups(served: tuple[str, ...], schema_version: str | None) -> dict[str, Any]:
    """``/openapi/v3`` documents by group-version path (``api/v1``, ``apis/<g>/<v>``)."""
    resources = openapi_resources(served)
    out: dict[str, Any] = {}
    for group, version in dict.fromkeys((r.group, r.version) for r in resources):
        doc = schema.openapi_v3_document(
            group, version, [r for r in resources if (r.group, r.version) == (group, version)],
            schema_version)
        if doc is not None:
            out[schema.gv_path(group, version)] = doc
    return out


def query_flag(query: dict[str, list[str]], key: str) -> bool:
    """The first value of ``key`` is ``true`` or ``1`` (any case)."""
    return (query.get(key) or [""])[0].lower() in ("true", "1")


def query_param(query: dict[str, list[str]], key: str) -> str:
    """The first value of ``key`` ("" when absent)."""
    return (query.get(key) or [""])[0]


def rbac_verb(method: str, route: Route, query: dict[str, list[str]]) -> str:
    collection = route.info is not None and not route.name
    if method == "GET":
        if route.info is None:
            return "get"
        if route.watch_path or (collection and query_flag(query, "watch")):
            return "watch"
        return "list" if collection else "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return method.lower()
