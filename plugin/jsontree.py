"""Fast deep copies of JSON trees (the embedded API server's stored objects).

``copy.deepcopy`` walks every object in Python and keeps a memo; JSON trees (dict, list,
str, int, float, bool, None) are copied by ``marshal`` instead (C code).
"""

from __future__ import annotations

import marshal
from typing import Any


def clone(value: Any) -> Any:
    """Deep copy of a JSON tree. Values ``marshal`` cannot take (a dict or list subclass,
    an object inside) are copied by a recursive walk that copies dicts and lists and shares
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
    return value
