"""The verbs of the embedded API server other than watch (:mod:`.watch`): discovery documents, get,
list (selectors, ``limit`` / ``continue``), create, update, patch, delete and
deletecollection, each mapped onto the registry and answered in the requested version.
POST and PUT bodies are JSON or YAML; anything else (protobuf) is a 415.

Errors: :class:`~drakit.plugin.testing.apiserver.errors.ApiError` (400, 405, 415 and what the
registry raises).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from drakit.plugin.testing.apiserver import errors as errors
from drakit.plugin.testing.apiserver.convert import from_internal
from drakit.plugin.testing.apiserver.http.answer import Answer
from drakit.plugin.testing.apiserver.http.routes import (
    Route,
    ServerContext,
    query_flag,
    query_param,
)
from drakit.plugin.testing.apiserver.http.watch import serve_watch
from drakit.plugin.testing.apiserver.resources import ResourceInfo, api_version_of
from drakit.plugin.testing.apiserver.selectors import parse_field_selector, parse_label_selector

__all__ = ["dispatch"]


def dispatch(answer: Answer, ctx: ServerContext, method: str, verb: str, route: Route,
             query: dict[str, list[str]], body: bytes, record: dict[str, Any]) -> int:
    """Answer a routed request with its verb; returns the status code sent."""
    if route.info is None:
        if method != "GET":
            raise errors.method_not_allowed()
        answer.send_json(200, route.document)
        return 200
    info, version, ns = route.info, route.version, route.namespace or ""
    registry = ctx.registry
    dry_run = "All" in query.get("dryRun", [])
    if verb in ("list", "watch", "deletecollection"):
        if route.subresource:
            raise errors.method_not_allowed()
        fields = parse_field_selector(query_param(query, "fieldSelector"), info.field_labels)
        labels = parse_label_selector(query_param(query, "labelSelector"))

        name = route.name  # a watch of one object: /watch/<plural>/<name>

        def predicate(obj: Any) -> bool:
            return (not name or obj["metadata"].get("name") == name) and fields(obj) \
                and labels(obj)

        if verb == "watch":
            serve_watch(answer, registry.store, ctx.stopping, route, query, predicate)
            return 200
        if verb == "list":
            return _list(answer, ctx, route, query, predicate)
        removed = registry.delete_collection(info, route.namespace, predicate,
                                             dry_run=dry_run)
        answer.send_json(200, _list_body(info, version, removed,
                                         registry.store.resource_version))
        return 200
    if verb in ("update", "patch") and not route.name:
        raise errors.method_not_allowed()
    if verb == "create":
        if route.name:
            raise errors.method_not_allowed()
        if info.namespaced and route.namespace is None:
            raise errors.method_not_allowed()
        new_obj = registry.create(info, ns, version, _body(record, body), dry_run=dry_run)
        answer.send_json(201, from_internal(info, version, new_obj, copy=False))
        return 201
    if verb == "get":
        current = registry.get(info, ns, route.name)
        answer.send_json(200, from_internal(info, version, current, copy=False))
        return 200
    if verb == "update":
        updated = registry.update(info, ns, route.name, version, _body(record, body),
                                  subresource=route.subresource, dry_run=dry_run)
        answer.send_json(200, from_internal(info, version, updated, copy=False))
        return 200
    if verb == "patch":
        patched, created = registry.patch(
            info, ns, route.name, version, record["content_type"], body,
            subresource=route.subresource, field_manager=record["field_manager"],
            force=query_flag(query, "force"), dry_run=dry_run,
        )
        code = 201 if created else 200
        answer.send_json(code, from_internal(info, version, patched, copy=False))
        return code
    if verb == "delete":
        if route.subresource:
            raise errors.method_not_allowed()
        options = _json_body(body) if body.strip() else None
        deleted = registry.delete(info, ns, route.name, options, dry_run=dry_run)
        if info.returns_deleted_object:
            answer.send_json(200, from_internal(info, version, deleted, copy=False))
        else:
            answer.send_json(200, {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": route.name, "kind": info.plural,
                            "uid": deleted["metadata"].get("uid", "")},
            })
        return 200
    raise errors.method_not_allowed()


def _list_body(info: ResourceInfo, version: str, items: list[dict[str, Any]],
               rv: int, continue_token: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": f"{info.kind}List",
        "apiVersion": api_version_of(info, version),
        "metadata": meta,
        "items": [from_internal(info, version, i, with_type=False, copy=False)
                  for i in items],
    }


def _list(answer: Answer, ctx: ServerContext, route: Route, query: dict[str, list[str]],
          predicate: Any) -> int:
    assert route.info is not None
    info = route.info
    # The stored objects are only encoded: no copies.
    items, rv = ctx.registry.store.select(info.plural, route.namespace, predicate, copy=False)
    token = query_param(query, "continue")
    if token:
        start = token.split("/", 1)[1] if "/" in token else token
        items = [i for i in items if _sort_key(i) > start]
    limit_text = query_param(query, "limit")
    next_token = ""
    if limit_text.isdigit() and 0 < int(limit_text) < len(items):
        items = items[: int(limit_text)]
        next_token = f"{rv}/{_sort_key(items[-1])}"
    answer.send_json(200, _list_body(info, route.version, items, rv, next_token))
    return 200


def _sort_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _json_body(body: bytes) -> Any:
    if not body.strip():
        raise errors.bad_request("the request body is empty")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"error decoding JSON body: {exc}") from None


def _body(record: dict[str, Any], body: bytes) -> Any:
    """A POST or PUT body: JSON, or YAML when sent as ``application/yaml``; any other
    content type (``application/vnd.kubernetes.protobuf``, client-go's default for built-in
    types) is a 415 that names the JSON and YAML types."""
    content_type = record["content_type"]
    if content_type in ("", "application/json"):
        return _json_body(body)
    if content_type == "application/yaml":
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML body: {exc}") from None
    raise errors.unsupported_media_type(errors.BODY_MEDIA_TYPES)
