"""What the agent's parts tell the outside about themselves: one events object, not callbacks.

The node service, the checkpoint, the status writer and the publisher each take one
``events`` argument (default: :class:`Events`, which does nothing) and call its methods; the
agent passes :class:`drakit.plugin.metrics.Metrics`, which counts them. A test that wants to
see what happened subclasses :class:`Events` (or uses :class:`RecordedEvents`). A method
that raises is the caller's bug, not the reporter's: callers do not guard these calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drakit.plugin.slices.validate import ValidationIssue


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

    def status_invalid(self, reason: str) -> None:
        """A device's AllocatedDeviceStatus was left out because the API would reject it."""

    def status_error(self, reason: str) -> None:
        """Writing a claim's AllocatedDeviceStatus failed (it is retried)."""

    def slice_validation_issue(self, issue: ValidationIssue) -> None:
        """The inventory broke a ResourceSlice rule (new since the previous publish)."""

    def slice_write(self, verb: str, pool: str) -> None:
        """A ResourceSlice ``create`` / ``update`` / ``delete`` of ``pool`` succeeded."""

    def publish_error(self, error: BaseException) -> None:
        """A publish (pool sync) failed; it is retried with backoff."""


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

    def slice_validation_issue(self, issue: ValidationIssue) -> None:
        self.seen.append(("slice_validation_issue", (issue,)))

    def slice_write(self, verb: str, pool: str) -> None:
        self.seen.append(("slice_write", (verb, pool)))

    def publish_error(self, error: BaseException) -> None:
        self.seen.append(("publish_error", (error,)))
