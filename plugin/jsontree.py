"""Fast deep copies of JSON trees and of pydantic models holding them.

``copy.deepcopy`` walks every object in Python and keeps a memo; the checkpoint copies its
records on every change (copy-on-access), so that cost was paid several times per prepare.
JSON trees (dict, list, str, int, float, bool, None) are copied by ``marshal`` instead (C
code), and models field by field.
"""

from __future__ import annotations

import marshal
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def clone(value: Any) -> Any:
    """Deep copy of a JSON tree. Values ``marshal`` cannot take (a dict or list subclass,
    a model inside) are copied by a recursive walk that copies dicts and lists and shares
    everything else."""
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return _walk(value)


def _walk(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v) for v in value]
    if isinstance(value, BaseModel):
        return copy_model(value)
    return value


def copy_model(model: M) -> M:
    """Deep copy of a pydantic model whose fields hold scalars, JSON trees, models or lists
    of models (what ``model_copy(deep=True)`` returns, without ``copy.deepcopy``). The
    copy is not re-validated, as ``model_copy`` does not re-validate."""
    new = model.model_copy()
    fields = new.__dict__
    for key, value in fields.items():
        kind = type(value)
        if kind in _SCALARS:
            continue
        if kind is list:
            if value and isinstance(value[0], BaseModel):
                fields[key] = [copy_model(v) if isinstance(v, BaseModel) else clone(v)
                               for v in value]
            elif value:
                fields[key] = clone(value)
            else:
                fields[key] = []
        elif kind is dict:
            fields[key] = clone(value) if value else {}
        elif isinstance(value, BaseModel):
            fields[key] = copy_model(value)
        elif isinstance(value, (dict, list)):
            fields[key] = clone(value)
    return new
