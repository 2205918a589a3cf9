"""What the agent's parts tell the outside about themselves: one events object, not callbacks.

The node service, the checkpoint, the status writer and the publisher each take one
``events`` argument (default: :class:`Events`, which does nothing) and call its methods; the
agent passes :class:`drakit.plugin.ops.metrics.Metrics`, which counts them. A test that wants to
see what happened subclasses :class:`Events` (or uses :class:`RecordedEvents`). A method
that raises is the caller's bug, not the reporter's: callers do not guard these calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drakit.plugin.slices.validate import ValidationIssue


class Severity(Enum):
    """How bad an error in background work is: ``ERROR`` is logged and the work goes on
    (its next round may succeed); ``FATAL`` stops the agent with a non-zero exit (the
    checkpoint cannot be written, ``--strict`` validation failed)."""

    ERROR = "error"
    FATAL = "fatal"


class Events:
    """The events of a node agent; every method does nothing here.

    Units: ``seconds`` is wall time of one kubelet call; ``reason`` and ``message`` are the
    text that was logged with the event.
    """

    def claim_prepared(self, ok: bool, seconds: float) -> None:
        """One claim of a NodePrepareResources call answered (``ok``: without error)."""

    def claim_unprepared(self, ok: bool, seconds: float) -> None:
        """One claim of a NodeUnprepareResources call answered."""

    def checkpoint_error(self, message: str) -> None:
        """An operation failed because the checkpoint could not be read or written."""

    def checkpoint_failed(self, error: Exception) -> str:
        """Report ``error`` (the checkpoint cannot be read or written) through
        :meth:`checkpoint_error`; returns its message, the error of the claims it failed."""
        message = str(error)
        self.checkpoint_error(message)
        return message

    def status_invalid(self, reason: str) -> None:
        """A device's AllocatedDeviceStatus was left out because the API would reject it."""

    def status_error(self, reason: str) -> None:
        """Writing a claim's AllocatedDeviceStatus failed (it is retried)."""

    def status_unsupported(self, message: str) -> None:
        """The API server dropped ``status.devices`` (it does not have the field); once."""

    def slice_validation_issue(self, issue: ValidationIssue) -> None:
        """The inventory broke a ResourceSlice rule (new since the previous publish)."""

    def slice_write(self, verb: str, pool: str) -> None:
        """A ResourceSlice ``create`` / ``update`` / ``delete`` of ``pool`` succeeded."""

    def publish_error(self, error: BaseException) -> None:
        """A publish (pool sync) failed; it is retried with backoff."""

    def background_error(self, work: str, error: BaseException, severity: Severity) -> None:
        """A round of the background work ``work`` (e.g. ``orphan-sweep``) failed
        (:mod:`drakit.plugin.background`)."""


@dataclass
class RecordedEvents(Events):
    """Keeps every event as ``(method name, arguments)`` in :attr:`seen` (tests)."""

    seen: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def named(self, name: str) -> list[tuple[Any, ...]]:
        """The arguments of every event called ``name``, oldest first."""
        return [args for n, args in self.seen if n == name]

    def claim_prepared(self, ok: bool, seconds: float) -> None:
        self.seen.append(("claim_prepared", (ok, seconds)))

    def claim_unprepared(self, ok: bool, seconds: float) -> None:
        self.seen.append(("claim_unprepared", (ok, seconds)))

    def checkpoint_error(self, message: str) -> None:
        self.seen.append(("checkpoint_error", (message,)))

    def status_invalid(self, reason: str) -> None:
        self.seen.append(("status_invalid", (reason,)))

    def status_error(self, reason: str) -> None:
        self.seen.append(("status_error", (reason,)))

    def status_unsupported(self, message: str) -> None:
        self.seen.append(("status_unsupported", (message,)))

    def slice_validation_issue(self, issue: ValidationIssue) -> None:
        self.seen.append(("slice_validation_issue", (issue,)))

    def slice_write(self, verb: str, pool: str) -> None:
        self.seen.append(("slice_write", (verb, pool)))

    def publish_error(self, error: BaseException) -> None:
        self.seen.append(("publish_error", (error,)))

    def background_error(self, work: str, error: BaseException, severity: Severity) -> None:
        self.seen.append(("background_error", (work, error, severity)))
