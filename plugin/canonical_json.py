"""Canonical JSON (sorted keys, no spaces: ``json.dumps(v, sort_keys=True,
separators=(",", ":"))``) of maps of pydantic models, re-encoding only the models whose
content changed since the previous call.

The checkpoint is one file holding every prepared claim; encoding all of them on each write
made a write cost O(claims) in Python (model dump + JSON + deep copies: ~90 ms at 1,000
claims). With :class:`CanonicalMapEncoder` a write re-encodes only the changed records and
joins cached fragments, producing exactly the bytes ``json.dumps`` would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel


def canonical(value: Any) -> str:
    """``value`` as canonical JSON text (the form the checkpoint checksum is taken over)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class CanonicalMapEncoder:
    """Encodes ``{key: model}`` maps as canonical JSON objects, caching each model's
    fragment by key.

    A cached fragment is reused only when the model's ``model_dump_json()`` equals the one
    it was made from, so a model changed in place is re-encoded too. The models must
    serialise non-finite floats distinctly (``ser_json_inf_nan="constants"``), or a change
    between ``inf``, ``nan`` and ``None`` could go unseen. Not thread-safe (the checkpoint
    calls it under its lock).
    """

    def __init__(self) -> None:
        # key → (model_dump_json, '"key":fragment' as UTF-8)
        self._entries: dict[str, tuple[str, bytes]] = {}

    def encode(self, items: Mapping[str, BaseModel]) -> bytes:
        """The canonical JSON object of ``items`` (keys sorted as ``json.dumps`` sorts),
        UTF-8 encoded (pure ASCII: ``json.dumps`` escapes non-ASCII)."""
        entries: dict[str, tuple[str, bytes]] = {}
        parts: list[bytes] = []
        for key in sorted(items):
            model = items[key]
            probe = model.model_dump_json()
            hit = self._entries.get(key)
            if hit is not None and hit[0] == probe:
                member = hit[1]
            else:
                member = f"{canonical(key)}:{canonical(model.model_dump(mode='json'))}".encode()
            entries[key] = (probe, member)
            parts.append(member)
        self._entries = entries
        return b"{" + b",".join(parts) + b"}"
