"""The options of the request a thread of the embedded API server handles
(``fieldValidation``, the ``Warning: 299`` texts), in a context variable: the HTTP layer
sets them, decoding reads them, the answer sends the warnings."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from dataclasses import field as dataclass_field

__all__ = ["RequestOptions", "current_request", "set_request"]


@dataclass
class RequestOptions:
    """Per-request decoding options and results: ``strict`` is ``fieldValidation=Strict``;
    ``warnings`` collects the texts for ``Warning: 299`` answer headers."""

    strict: bool = False
    warnings: list[str] = dataclass_field(default_factory=list)


_REQUEST: contextvars.ContextVar[RequestOptions | None] = contextvars.ContextVar(
    "embedded_apiserver_request", default=None)


def current_request() -> RequestOptions:
    """The options of the request being handled (defaults for in-process helpers)."""
    options = _REQUEST.get()
    return options if options is not None else RequestOptions()


def set_request(options: RequestOptions | None) -> None:
    """Set the options of the request the calling thread handles (None: none)."""
    _REQUEST.set(options)
