"""Object schemas for the embedded API server: unknown fields, quantities, OpenAPI.

kube-apiserver decodes every body into its Go types, which has three effects a client can
see (as a real kube-apiserver 1.37 answers):

* a field the type does not declare is **dropped** (the answer and the stored object lack
  it; the answer carries a ``Warning: 299 - "unknown field \\"spec.x\\""`` header) or, with
  ``?fieldValidation=Strict``, the request fails with 400 ``strict decoding error: unknown
  field "spec.x"``;
* a value that is not a ``resource.Quantity`` fails the decode: **400** BadRequest,
  ``… quantities must match the regular expression '…'``, before validation runs;
* a quantity is re-rendered in canonical form (``1024Mi`` → ``1Gi``, ``0.5`` → ``500m``).

The type information comes from ``kubernetes_validate`` (the Kubernetes 1.37 OpenAPI
definitions as JSON schema; a dev dependency of drakit). The same definitions are served as
``/openapi/v3`` and ``/openapi/v2`` so that ``kubectl`` finds the ``fieldValidation`` query
parameter and leaves validation to the server, as it does against a real cluster. Without
``kubernetes_validate`` the server keeps unknown fields, does not check quantities and
serves no OpenAPI (404), as before.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drakit.plugin.slices.quantity import QUANTITY_ERROR, QuantityError, parse

SCHEMA_VERSION = "v1.37.0"
"""The default schema: Kubernetes 1.37."""
SCHEMA_DIRS: dict[str, str] = {"v1.37.0": "v1.37.0-local", "v1.36.0": "v1.36.0-local-strict"}
"""kubernetes_validate's folders of the schemas the embedded server can emulate."""
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_DEF_PREFIX = "#/$defs/"


def schema_version_for(served: tuple[str, ...], kubernetes_minor: int | None) -> str | None:
    """The schema an embedded server uses: by ``kubernetes_minor`` when given (36 → 1.36,
    37 and later → 1.37, older → none), else 1.37 when it serves v1 and none for a server
    that serves only v1beta2/v1beta1 (an older cluster: no OpenAPI, unknown fields kept)."""
    if kubernetes_minor is not None:
        return "v1.37.0" if kubernetes_minor >= 37 else "v1.36.0" if kubernetes_minor == 36 \
            else None
    return SCHEMA_VERSION if "v1" in served else None


@functools.cache
def definitions(schema_version: str | None = SCHEMA_VERSION) -> dict[str, Any] | None:
    """The ``$defs`` of kubernetes_validate's definitions of ``schema_version`` (a key of
    :data:`SCHEMA_DIRS`), or None (no such schema, or the package is not installed)."""
    if schema_version not in SCHEMA_DIRS:
        return None
    try:
        import kubernetes_validate  # optional (a dev dependency)
    except ImportError:
        return None
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = base / SCHEMA_DIRS[schema_version] / "_definitions.json"
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as f:
        defs: dict[str, Any] = json.load(f)["$defs"]
    return defs


@functools.cache
def definition_name(group: str, version: str, kind: str,
                    schema_version: str | None = SCHEMA_VERSION) -> str | None:
    """The definition whose ``x-kubernetes-group-version-kind`` is (group, version, kind)."""
    defs = definitions(schema_version)
    if defs is None:
        return None
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return name
    return None


@dataclass
class DecodeResult:
    """What decoding a body found: ``unknown`` field paths (``spec.devices[0].foo``, dropped
    from the object) and ``bad_quantities`` (paths of values that are no quantity)."""

    unknown: list[str] = field(default_factory=list)
    bad_quantities: list[str] = field(default_factory=list)


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_DEF_PREFIX):
        name = ref[len(_DEF_PREFIX):]
        return name, defs.get(name, {})
    return None, schema


def _walk(value: Any, schema: dict[str, Any], path: str, defs: dict[str, Any],
          out: DecodeResult) -> Any:
    """``value`` decoded against ``schema``; unknown keys are removed in place."""
    name, schema = _resolve(schema, defs)
    if name == _QUANTITY:
        if value is None:
            return value
        try:
            return str(parse(value))
        except QuantityError:
            out.bad_quantities.append(path)
            return value
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if isinstance(props, dict):
            for key in list(value):
                sub = f"{path}.{key}" if path else key
                if key in props:
                    value[key] = _walk(value[key], props[key], sub, defs, out)
                elif isinstance(extra, dict):
                    value[key] = _walk(value[key], extra, f"{path}[{key}]", defs, out)
                elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                    out.unknown.append(sub)
                    del value[key]
        elif isinstance(extra, dict):
            for key in list(value):
                value[key] = _walk(value[key], extra, f"{path}[{key}]", defs, out)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                value[i] = _walk(item, items, f"{path}[{i}]", defs, out)
    return value


def decode(obj: dict[str, Any], group: str, version: str, kind: str,
           schema_version: str | None = SCHEMA_VERSION) -> DecodeResult:
    """Drop the fields ``kind`` in ``group/version`` does not declare (in place), render
    quantities canonically and collect the values that are no quantity. Without schemas
    (kubernetes_validate absent) nothing changes."""
    out = DecodeResult()
    defs = definitions(schema_version)
    name = definition_name(group, version, kind, schema_version)
    if defs is None or name is None:
        return out
    _walk(obj, defs[name], "", defs, out)
    return out


def quantity_error(kind: str, version: str) -> str:
    """The 400 message kube-apiserver gives for a body with a malformed quantity."""
    return f'{kind} in version "{version}" cannot be handled as a {kind}: {QUANTITY_ERROR}'


# ------------------------------------------------------------------------------ OpenAPI


def _openapi(schema: Any, ref_prefix: str) -> Any:
    """A JSON-schema definition as an OpenAPI schema: ``type: [t, "null"]`` → ``t``,
    ``#/$defs/`` references → ``ref_prefix``."""
    if isinstance(schema, list):
        return [_openapi(s, ref_prefix) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            if kinds:
                out["type"] = kinds[0]
        elif key == "$ref" and isinstance(value, str) and value.startswith(_DEF_PREFIX):
            out["$ref"] = ref_prefix + value[len(_DEF_PREFIX):]
        elif key == "oneOf" and schema.get("$ref") is None and all(
                isinstance(s, dict) and set(s) == {"type"} for s in value):
            out["type"] = "string"        # Quantity / IntOrString: "int-or-string"
            out["format"] = "int-or-string"
        else:
            out[key] = _openapi(value, ref_prefix)
    return out


def _referenced(names: list[str], defs: dict[str, Any]) -> dict[str, Any]:
    """``names`` and every definition they reference, transitively."""
    seen: dict[str, Any] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen[name] = defs[name]
        stack: list[Any] = [defs[name]]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and ref.startswith(_DEF_PREFIX):
                    todo.append(ref[len(_DEF_PREFIX):])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    return seen


@dataclass(frozen=True)
class OpenAPIResource:
    """One REST resource for the OpenAPI paths: its collection and item paths."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _operations(res: OpenAPIResource, ref: str) -> dict[str, Any]:
    gvk = {"group": res.group, "version": res.version, "kind": res.kind}
    ns = "namespaces/{namespace}/" if res.namespaced else ""
    base = "/" + _gv_path(res.group, res.version) + "/" + ns + res.plural
    query = [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
             for n in ("dryRun", "fieldManager", "fieldValidation")]
    body = {"content": {"application/json": {"schema": {"$ref": ref}}}, "required": True}
    answer = {"200": {"description": "OK",
                      "content": {"application/json": {"schema": {"$ref": ref}}}}}

    def op(action: str, **extra: Any) -> dict[str, Any]:
        return {"operationId": f"{action}{res.kind}", "parameters": query,
                "responses": answer, "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk, **extra}

    return {
        base: {"post": op("post", requestBody=body), "get": op("list")},
        base + "/{name}": {"get": op("get"), "put": op("put", requestBody=body),
                           "patch": op("patch", requestBody={
                               "content": {t: {"schema": {"type": "object"}} for t in (
                                   "application/apply-patch+yaml",
                                   "application/json-patch+json",
                                   "application/merge-patch+json",
                                   "application/strategic-merge-patch+json")},
                               "required": True}),
                           "delete": op("delete")},
    }


def openapi_v3_document(group: str, version: str, resources: list[OpenAPIResource],
                        schema_version: str | None = SCHEMA_VERSION) -> dict[str, Any] | None:
    """``/openapi/v3/{api/v1|apis/<group>/<version>}``: paths with the write operations
    (their ``fieldValidation`` parameter tells kubectl to validate on the server) and the
    component schemas of the kinds."""
    defs = definitions(schema_version)
    if defs is None:
        return None
    ref_prefix = "#/components/schemas/"
    names = [n for r in resources
             if (n := definition_name(r.group, r.version, r.kind, schema_version))]
    paths: dict[str, Any] = {}
    for res in resources:
        name = definition_name(res.group, res.version, res.kind, schema_version)
        if name is not None:
            paths.update(_operations(res, ref_prefix + name))
    schemas = {n: _openapi(s, ref_prefix) for n, s in _referenced(names, defs).items()}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": SCHEMA_VERSION},
            "paths": paths, "components": {"schemas": schemas}}


def openapi_v3_root(groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``/openapi/v3``: one entry per group-version document, with a content hash."""
    paths = {}
    for gv_path, doc in groups.items():
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64]
        paths[gv_path] = {"serverRelativeURL": f"/openapi/v3/{gv_path}?hash={digest.upper()}"}
    return {"paths": paths}


def openapi_v2_document(resources: list[OpenAPIResource],
                        schema_version: str | None = SCHEMA_VERSION) -> dict[str, Any] | None:
    """``/openapi/v2`` (Swagger 2.0): the definitions of every served kind."""
    defs = definitions(schema_version)
    if defs is None:
        return None
    names = [n for r in resources
             if (n := definition_name(r.group, r.version, r.kind, schema_version))]
    definitions_v2 = {n: _openapi(s, "#/definitions/")
                      for n, s in _referenced(names, defs).items()}
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": SCHEMA_VERSION},
            "paths": {}, "definitions": definitions_v2}


def gv_path(group: str, version: str) -> str:
    """The OpenAPI v3 path of a group-version (``api/v1``, ``apis/resource.k8s.io/v1``)."""
    return _gv_path(group, version)
