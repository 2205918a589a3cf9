"""Errors raised by the ``cdi`` package.

Every error is a ``ValueError`` subclass (bad input, not a broken program) except
:class:`HostNodeError`, which is about the host's state at prepare time, and
:class:`SpecConflictError`, which is about other files in the spec directory.
"""

from __future__ import annotations

from dataclasses import dataclass


class CDIError(Exception):
    """Base class of every error this package raises on purpose."""


@dataclass(frozen=True)
class FieldError:
    """One problem in a spec: ``path`` is the JSON path (``devices[2].containerEdits.env[0]``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecValidationError(CDIError, ValueError):
    """A spec breaks a rule CDI runtimes enforce. ``errors`` lists every problem found."""

    def __init__(self, errors: list[FieldError], subject: str = "CDI spec") -> None:
        self.errors = list(errors)
        self.subject = subject
        lines = "; ".join(str(e) for e in self.errors)
        super().__init__(f"invalid {subject}: {lines}")


class CDINameError(CDIError, ValueError):
    """A vendor, class, kind, device name, qualified device name or claim UID is invalid."""


class CDIVersionError(CDIError, ValueError):
    """The content needs a newer cdiVersion than allowed, or a version string is unknown.

    ``requirements`` lists ``(version, field path, reason)`` for what exceeds the cap.
    """

    def __init__(self, message: str, requirements: list[tuple[str, str, str]] | None = None):
        self.requirements = list(requirements or [])
        super().__init__(message)


class HostNodeError(CDIError):
    """A device node's host path is missing or is not a device node (at prepare time).

    Raised instead of writing a spec the runtime would fail on ("failed to stat CDI host
    device", CDI ``DeviceNode`` injection).
    """


class SpecConflictError(CDIError):
    """A qualified device name is already defined by another file in the same directory.

    CDI caches drop such a device entirely (CDI cache conflict rule); ``other_file`` is the
    file that already defines it.
    """

    def __init__(self, message: str, qualified_name: str, other_file: str) -> None:
        self.qualified_name = qualified_name
        self.other_file = other_file
        super().__init__(message)
