"""Fault injection for the embedded API server (reliability tests).

A :class:`FaultPlan` says how often matching requests fail and how; a
:class:`FaultInjector` draws from a ``random.Random(seed)`` so a plan replays the same
faults for the same sequence of requests. Per matching request one number ``u`` in
[0, 1) is drawn and compared with the cumulative rates in this order: dropped connection
(socket closed without an answer), 500 InternalError, 429 TooManyRequests (with a
``Retry-After`` header), 409 Conflict (write verbs only). ``latency_seconds`` delays
every matching request, failing or not.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from drakit.plugin.testing.apiserver.errors import (
    ApiError,
    conflict,
    internal_error,
    too_many_requests,
)

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
"""RBAC verbs that change objects."""


@dataclass(frozen=True)
class FaultPlan:
    """What to inject. Rates are probabilities in [0, 1] (their sum ≤ 1).

    ``verbs``/``resources`` restrict the plan to those RBAC verbs (``get``, ``list``,
    ``watch``, ``create``, ``update``, ``patch``, ``delete``, ``deletecollection``) and
    resources (``resourceclaims``, ``resourceclaims/status``, ``resourceslices``, ``nodes``,
    ...; a plain resource name also matches its subresources); None matches all. Discovery
    requests never match. ``max_faults`` stops injecting after that many faults (e.g.
    ``FaultPlan(conflict_rate=1.0, max_faults=1)``: one 409, then normal answers).
    """

    error_rate: float = 0.0
    conflict_rate: float = 0.0
    throttle_rate: float = 0.0
    retry_after_seconds: int = 1
    drop_rate: float = 0.0
    latency_seconds: float = 0.0
    seed: int = 0
    verbs: frozenset[str] | None = None
    resources: frozenset[str] | None = None
    max_faults: int | None = None

    def __post_init__(self) -> None:
        for name in ("verbs", "resources"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, frozenset):
                if isinstance(value, str):
                    value = [value]
                object.__setattr__(self, name, frozenset(value))
        rates = (self.error_rate, self.conflict_rate, self.throttle_rate, self.drop_rate)
        if any(r < 0 or r > 1 for r in rates) or sum(rates) > 1.0 + 1e-9:
            raise ValueError(f"fault rates must be in [0, 1] and sum to at most 1: {rates}")
        if self.latency_seconds < 0 or self.retry_after_seconds < 0:
            raise ValueError("latency_seconds and retry_after_seconds must be >= 0")

    def matches(self, verb: str, resource: str) -> bool:
        if not resource:
            return False
        if self.verbs is not None and verb not in self.verbs:
            return False
        if self.resources is None:
            return True
        return resource in self.resources or resource.split("/")[0] in self.resources


@dataclass(frozen=True)
class FaultDecision:
    """What to do with one request: ``drop`` the connection, answer ``error``, and/or
    sleep ``latency_seconds`` first."""

    latency_seconds: float = 0.0
    drop: bool = False
    error: ApiError | None = None


NO_FAULT = FaultDecision()


class FaultInjector:
    """Thread-safe holder of the current plan and its random stream."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plan: FaultPlan | None = None
        self._rng = random.Random(0)
        self._injected = 0

    def set_plan(self, plan: FaultPlan | None) -> None:
        """Replace the plan (None turns faults off); restarts the random stream and the
        ``max_faults`` count."""
        with self._lock:
            self._plan = plan
            self._rng = random.Random(plan.seed if plan else 0)
            self._injected = 0

    @property
    def plan(self) -> FaultPlan | None:
        return self._plan

    @property
    def injected(self) -> int:
        """Faults injected since the plan was set (latency alone does not count)."""
        return self._injected

    def decide(self, verb: str, resource: str, group: str, name: str) -> FaultDecision:
        with self._lock:
            plan = self._plan
            if plan is None or not plan.matches(verb, resource):
                return NO_FAULT
            if plan.max_faults is not None and self._injected >= plan.max_faults:
                return FaultDecision(plan.latency_seconds)
            u = self._rng.random()
            edge = plan.drop_rate
            decision = FaultDecision(plan.latency_seconds)
            if u < edge:
                decision = FaultDecision(plan.latency_seconds, drop=True)
            elif u < (edge := edge + plan.error_rate):
                decision = FaultDecision(
                    plan.latency_seconds, error=internal_error("injected fault")
                )
            elif u < (edge := edge + plan.throttle_rate):
                decision = FaultDecision(
                    plan.latency_seconds, error=too_many_requests(plan.retry_after_seconds)
                )
            elif verb in WRITE_VERBS and u < edge + plan.conflict_rate:
                plural = resource.split("/")[0]
                decision = FaultDecision(
                    plan.latency_seconds, error=conflict(plural, group, name or "")
                )
            if decision.drop or decision.error is not None:
                self._injected += 1
            return decision
