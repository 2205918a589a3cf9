"""klog's verbosity levels and object keys, for every room's log lines (Kubernetes'
structured logging, KEP-1602; the formatters are :mod:`drakit.plugin.ops.logs`).

``V(0)`` is always on; ``V(1)`` … ``V(7)`` are opt-in (``-v N``), as the Go drivers use
them: V(1) start-up detail, V(2) one line per claim and outcome, V(4) to V(5) debug (Python's
``logging.DEBUG`` is V(5)), V(6) each API request and kubelet call, V(7) everything.
"""

from __future__ import annotations

import logging
from typing import Protocol

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


class NamedClaim(Protocol):
    """A claim named as the kubelet names it (:class:`drakit.discovery.plugin.ClaimRef`, a
    checkpoint record)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


def keys_of(claim: NamedClaim) -> dict[str, str]:
    """:func:`claim_keys` of ``claim``."""
    return claim_keys(claim.namespace, claim.name, claim.uid)


#: Claim lines one kubelet call writes at most; the rest are counted in one line (a call of
#: 10,000 claims logs a handful of lines).
MAX_CLAIM_LINES = 16


class ClaimLines:
    """The per-claim lines of one kubelet call's ``what`` (e.g. ``prepare``), written to
    ``log``: one line per claim and outcome, the first :data:`MAX_CLAIM_LINES` of them, then
    :meth:`close` counts the rest in one line. :attr:`failures` counts the failed claims."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log = log
        self.what = what
        self.failures = 0
        self._shown = 0
        self._more_done = 0
        self._more_failed = 0
        self._verbose = log.isEnabledFor(V(2))  # a successful claim costs nothing below

    def done(self, claim: NamedClaim, msg: str, *args: object) -> None:
        """The claim succeeded: ``msg % args`` at V(2)."""
        if not self._verbose:
            return
        if self._shown >= MAX_CLAIM_LINES:
            self._more_done += 1
            return
        self._shown += 1
        self.log.log(V(2), msg, *args, extra=keys_of(claim))

    def failed(self, claim: NamedClaim, error: str, cause: BaseException | None = None) -> None:
        """The claim failed with ``error`` (the kubelet's text), ``cause``'s traceback in the
        same line (a vendor hook's exception, or drakit's own)."""
        self.failures += 1
        if self._shown >= MAX_CLAIM_LINES:
            self._more_failed += 1
            return
        self._shown += 1
        self.log.warning("%s failed", self.what,
                         exc_info=(type(cause), cause, cause.__traceback__) if cause else None,
                         extra={**keys_of(claim), "err": error})

    def close(self) -> None:
        more = self._more_done + self._more_failed
        if self._more_failed:
            self.log.warning("%s: %d more claim(s) of this call not logged one by one, %d of "
                             "them failed", self.what, more, self._more_failed)
        elif more:
            self.log.log(V(2), "%s: %d more claim(s) of this call not logged one by one",
                         self.what, more)
