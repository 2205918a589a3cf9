"""The DRA node service (NodePrepareResources / NodeUnprepareResources), v1 and v1beta1.

Each servicer converts the request's claims to :class:`drakit.discovery.plugin.ClaimRef`, calls
the :class:`drakit.plugin.types.NodeService`, and converts the answer back. Rules from the
kubelet (k8s.io/kubernetes pkg/kubelet/cm/dra/manager.go): the response map is keyed by claim
UID and must hold exactly one entry per requested claim and no other key; a gRPC error fails
every claim of the pod, so nothing here turns into one: an exception in the node service or a
malformed result becomes per-claim ``error`` strings. Duplicate UIDs in a request are answered
once (the map has one key). ``Device.share_id`` exists only in v1 and is dropped for v1beta1.

Size bounds (the kubelet receives at most 4 MiB per response, grpc-go's default
MaxCallRecvMsgSize): a request with more than :data:`MAX_CLAIMS_PER_REQUEST` distinct claims is
refused with a short per-claim error and nothing is prepared; error strings are cut to
:data:`MAX_ERROR_BYTES`. With at most 32 allocation results per claim
(AllocationResultsMaxSize) and the name limits of the API, the largest possible answer stays
well below 4 MiB (tests/reliability/test_rel_limits.py computes it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import grpc

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.api.retry import call_deadline
from drakit.plugin.klog import ClaimLines
from drakit.plugin.kubelet.protocol import DRA_MODULES, DRA_V1
from drakit.plugin.types import NodeService, PrepareResult

log = logging.getLogger(__name__)

MAX_CLAIMS_PER_REQUEST = 64
"""Most distinct claims one NodePrepareResources call may carry (the kubelet sends the claims
of one pod; pods reference a handful). Larger requests get a per-claim error."""
MAX_ERROR_BYTES = 2048
"""Longest per-claim error string sent (UTF-8 bytes); longer ones are cut with ``…``."""
DECODE_LOG_INTERVAL = 60.0
"""Seconds between two log lines about undecodable gRPC requests (the others are counted)."""


class DecodeErrorLogFilter(logging.Filter):
    """Rate-limits grpcio's ``Exception deserializing message!`` (logger ``grpc._common``,
    one traceback per undecodable request): at most one line per ``interval`` seconds,
    without the traceback, naming the exception and how many were suppressed since."""

    MESSAGE = "Exception deserializing message!"

    def __init__(self, interval: float = DECODE_LOG_INTERVAL) -> None:
        super().__init__()
        self.interval = interval
        self._lock = threading.Lock()
        self._last = -float("inf")
        self._suppressed = 0
        self.total = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != self.MESSAGE:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        now = time.monotonic()
        with self._lock:
            self.total += 1
            if now - self._last < self.interval:
                self._suppressed += 1
                return False
            self._last, suppressed, self._suppressed = now, self._suppressed, 0
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = "undecodable gRPC request refused (%s)%s"
        record.args = (f"{type(exc).__name__}: {exc}" if exc else "no detail",
                       f"; {suppressed} more since the last such line" if suppressed else "")
        record.exc_info = None
        record.exc_text = None
        return True


_DECODE_FILTER = DecodeErrorLogFilter()
_DECODE_FILTER_LOCK = threading.Lock()


def install_decode_error_filter() -> DecodeErrorLogFilter:
    """Attach :class:`DecodeErrorLogFilter` to grpcio's ``grpc._common`` logger (once)."""
    with _DECODE_FILTER_LOCK:
        logger = logging.getLogger("grpc._common")
        if _DECODE_FILTER not in logger.filters:
            logger.addFilter(_DECODE_FILTER)
    return _DECODE_FILTER


def bounded_error(message: str, limit: int = MAX_ERROR_BYTES) -> str:
    """``message`` cut to at most ``limit`` UTF-8 bytes (whole characters, ``…`` appended)."""
    data = message.encode("utf-8", "replace")
    if len(data) <= limit:
        return message
    return data[: limit - 3].decode("utf-8", "ignore") + "\u2026"


def _short(value: str, limit: int = 80) -> str:
    """``repr`` of a request field, cut for log lines and error messages."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"...({len(value)} chars)"


def claims_from_request(request_claims: Iterable[Any]
                        ) -> tuple[list[ClaimRef], dict[str, tuple[ClaimRef, str]]]:
    """Split a request's ``claims`` into valid ClaimRefs of distinct UIDs (what the node
    service gets) and the refused entries (claim UID → (the entry, its error)).

    The first occurrence of a UID wins (the answer has one entry per UID; one line counts
    the repeats). A claim missing namespace, name or uid gets an error under its (possibly
    empty) UID and is not passed on.
    """
    claims: list[ClaimRef] = []
    errors: dict[str, tuple[ClaimRef, str]] = {}
    seen: set[str] = set()
    twice = 0
    for c in request_claims:
        if c.uid in seen:
            twice += 1
            continue
        seen.add(c.uid)
        ref = ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid)
        missing = [f for f in ("namespace", "name", "uid") if not getattr(c, f)]
        if missing:
            errors[c.uid] = (ref, (
                f"claim {_short(c.namespace)}/{_short(c.name)} (uid {_short(c.uid)}): required"
                f" field(s) {', '.join(missing)} empty in the request"))
            continue
        claims.append(ref)
    if twice:
        log.warning("%d claim entr(ies) listed twice in one request; each UID is answered once",
                    twice)
    return claims, errors


def _internal_error(action: str, exc: BaseException) -> str:
    return f"internal error during {action}: {type(exc).__name__}: {exc}"


class DraNodeServicer:
    """Serves ``DRAPlugin`` of one version (``"v1.DRAPlugin"`` or ``"v1beta1.DRAPlugin"``).

    Thread-safe as long as the node service is: the kubelet calls concurrently for different
    pods (pkg/kubelet/cm/dra/manager.go), and gRPC runs each call on its own worker thread.
    """

    def __init__(self, node_service: NodeService, version: str = DRA_V1) -> None:
        if version not in DRA_MODULES:
            raise ValueError(f"unknown DRA service version {version!r}")
        self.version = version
        self._node = node_service
        self._pb2: ModuleType = DRA_MODULES[version][0]
        self._with_share_id = version == DRA_V1
        install_decode_error_filter()

    def add_to_server(self, server: grpc.Server) -> None:
        """Register this servicer on ``server`` (before it starts)."""
        DRA_MODULES[self.version][1].add_DRAPluginServicer_to_server(self, server)

    # --- NodePrepareResources -------------------------------------------------------------

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        started = time.monotonic()
        deadline = call_deadline(_time_remaining(context))
        claims, errors = claims_from_request(request.claims)
        results: dict[str, PrepareResult] = {}
        too_many = len(claims) + len(errors) > MAX_CLAIMS_PER_REQUEST
        if too_many:
            log.error("%s NodePrepareResources: %d claims in one request, at most %d; refused",
                      self.version, len(claims) + len(errors), MAX_CLAIMS_PER_REQUEST)
            message = (f"too many claims in one NodePrepareResources request "
                       f"({len(claims) + len(errors)}, at most {MAX_CLAIMS_PER_REQUEST})")
            errors = {uid: (ref, message) for uid, (ref, _) in errors.items()}
            results = {c.uid: PrepareResult(error=message) for c in claims}
            claims_to_prepare: list[ClaimRef] = []
        else:
            claims_to_prepare = claims
        if claims_to_prepare:
            try:
                results = dict(self._node.prepare_claims(claims_to_prepare, deadline=deadline))
            except Exception as exc:  # one failure must not fail the RPC
                log.exception("%s NodePrepareResources: node service raised", self.version)
                results = {c.uid: PrepareResult(error=_internal_error("prepare", exc))
                           for c in claims_to_prepare}
        response = self._pb2.NodePrepareResourcesResponse()
        # the claims the node service never saw are logged here; it logs each of its own
        # claims' outcome once (drakit.plugin.claims.node)
        failed = ClaimLines(log, f"{self.version} NodePrepareResources")
        for uid, (ref, message) in errors.items():
            response.claims[uid].error = bounded_error(message)
            if not too_many:  # else the whole call was refused: said above, once
                failed.failed(ref, response.claims[uid].error)
        wanted = {c.uid for c in claims}
        for uid in set(results) - wanted:
            log.warning("%s NodePrepareResources: node service answered for unrequested claim"
                        " uid %s; dropped", self.version, uid)
        for claim in claims:
            entry = response.claims[claim.uid]
            result = results.get(claim.uid)
            try:
                self._fill_prepare_entry(entry, result)
            except Exception as exc:
                log.exception("%s NodePrepareResources: bad result for claim %s/%s",
                              self.version, claim.namespace, claim.name)
                entry.Clear()
                entry.error = _internal_error("prepare (converting the result)", exc)
            if entry.error:
                entry.error = bounded_error(entry.error)
            if result is None and claims_to_prepare:
                failed.failed(claim, entry.error)
        failed.close()
        log.debug("%s NodePrepareResources: %d claim(s) in %.3fs", self.version,
                  len(response.claims), time.monotonic() - started)
        return response

    def _fill_prepare_entry(self, entry: Any, result: PrepareResult | None) -> None:
        if result is None:
            entry.error = "internal error: the node service returned no result for this claim"
            return
        if not isinstance(result, PrepareResult):
            raise TypeError(f"expected PrepareResult, got {type(result).__name__}")
        if result.error:
            entry.error = str(result.error)
            return
        for dev in result.devices:
            out = entry.devices.add(
                request_names=list(dev.request_names),
                pool_name=dev.pool_name,
                device_name=dev.device_name,
                cdi_device_ids=list(dev.cdi_device_ids),
            )
            if self._with_share_id and dev.share_id is not None:
                out.share_id = dev.share_id

    # --- NodeUnprepareResources -----------------------------------------------------------

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        started = time.monotonic()
        deadline = call_deadline(_time_remaining(context))
        claims, errors = claims_from_request(request.claims)
        results: dict[str, str] = {}
        if claims:
            try:
                results = dict(self._node.unprepare_claims(claims, deadline=deadline))
            except Exception as exc:
                log.exception("%s NodeUnprepareResources: node service raised", self.version)
                results = {c.uid: _internal_error("unprepare", exc) for c in claims}
        response = self._pb2.NodeUnprepareResourcesResponse()
        # as in NodePrepareResources: only the claims the node service never saw, or gave
        # no result for, are logged here
        failed = ClaimLines(log, f"{self.version} NodeUnprepareResources")
        for uid, (ref, message) in errors.items():
            response.claims[uid].error = bounded_error(message)
            failed.failed(ref, response.claims[uid].error)
        for claim in claims:
            entry = response.claims[claim.uid]  # an empty entry means success
            if claim.uid not in results:
                entry.error = "internal error: the node service returned no result for this claim"
                if results:  # else the node service raised: logged once above
                    failed.failed(claim, entry.error)
            elif results[claim.uid]:
                entry.error = bounded_error(str(results[claim.uid]))
        failed.close()
        log.debug("%s NodeUnprepareResources: %d claim(s) in %.3fs", self.version,
                  len(response.claims), time.monotonic() - started)
        return response


def _time_remaining(context: Any) -> float | None:
    """Seconds left of the call's gRPC deadline (None: the caller set none)."""
    remaining = getattr(context, "time_remaining", None)
    return remaining() if callable(remaining) else None
