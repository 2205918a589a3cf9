"""klog's verbosity levels and object keys, for every room's log lines (Kubernetes'
structured logging, KEP-1602; the formatters are :mod:`drakit.plugin.ops.logs`).

``V(0)`` is always on; ``V(1)`` … ``V(7)`` are opt-in (``-v N``), as the Go drivers use
them: V(1) start-up detail, V(2) one line per claim and outcome, V(4) to V(5) debug (Python's
``logging.DEBUG`` is V(5)), V(6) each API request and kubelet call, V(7) everything.
"""

from __future__ import annotations

import logging

#: Highest verbosity the agent distinguishes (``-v 7`` shows every line).
MAX_VERBOSITY = 7


def V(level: int) -> int:
    """The ``logging`` level of klog's ``V(level)``: V(0) is INFO, each step two below
    (``log.log(V(2), "prepared claim", extra=claim_keys(ns, name, uid))``)."""
    return logging.INFO - 2 * max(0, min(level, MAX_VERBOSITY))


def claim_keys(namespace: str, name: str, uid: str) -> dict[str, str]:
    """The ``extra`` of a line about one claim: ``claim`` (namespace/name) and ``claimUID``
    (written under that key by the formatters)."""
    return {"claim": f"{namespace}/{name}", "claim_uid": uid}
