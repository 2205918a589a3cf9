"""The figures of ``make bench``: names, goals and measured results.

The ``vsgo_*`` figures are ratios drakit / Go reference driver (``bench/vsgo.py``); their
goals are on the median of the per-round ratios."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.stats import Summary, summarize

Verdict = Literal["pass", "miss", "report", "skipped"]


@dataclass(frozen=True)
class Goal:
    """A goal on the median of a figure: ``op`` is ``<=``, ``>=``, ``==`` (judged on the
    maximum: every repeat must meet it) or ``report`` (no goal, just reported)."""

    op: Literal["<=", ">=", "==", "report"]
    value: float | None = None

    def verdict(self, s: Summary) -> Verdict:
        if self.op == "report" or self.value is None:
            return "report"
        if self.op == "<=":
            return "pass" if s.median <= self.value else "miss"
        if self.op == ">=":
            return "pass" if s.median >= self.value else "miss"
        return "pass" if s.max == self.value and s.min == self.value else "miss"

    def text(self, unit: str) -> str:
        if self.op == "report" or self.value is None:
            return "report"
        op = {"<=": "≤", ">=": "≥", "==": "="}[self.op]
        return f"{op} {_fmt(self.value)} {unit}".strip()


@dataclass(frozen=True)
class FigureSpec:
    """One row of the table: ``name`` (for ``--only``), human ``title``, ``unit``, goal."""

    name: str
    title: str
    unit: str
    goal: Goal


SPECS: dict[str, FigureSpec] = {
    s.name: s
    for s in (
        FigureSpec("prepare_p50", "NodePrepareResources 1 claim x 1 device, p50", "ms",
                   Goal("<=", 3)),
        FigureSpec("prepare_p99", "NodePrepareResources 1 claim x 1 device, p99", "ms",
                   Goal("<=", 10)),
        FigureSpec("unprepare_p50", "NodeUnprepareResources 1 claim, p50", "ms", Goal("<=", 3)),
        FigureSpec("unprepare_p99", "NodeUnprepareResources 1 claim, p99", "ms", Goal("<=", 10)),
        FigureSpec("fsync_floor", "atomic_write of a small file (fsync floor)", "ms",
                   Goal("report")),
        FigureSpec("grpc_floor", "gRPC round trip to the agent (GetInfo), p50", "ms",
                   Goal("report")),
        FigureSpec("claim_get_floor", "ResourceClaim GET round trip (ResourceAPI), p50", "ms",
                   Goal("report")),
        FigureSpec("claim_cpu", "agent CPU per prepare + unprepare (1 claim x 1 device)",
                   "ms", Goal("report")),
        FigureSpec("prepare_throughput", "prepare throughput, 256 claims / 16 callers",
                   "claims/s", Goal(">=", 300)),
        FigureSpec("publish_cold_10k", "cold publish of 10,000 devices until all slices exist",
                   "s", Goal("<=", 3)),
        FigureSpec("resync_writes", "API writes by a resync with nothing changed", "writes",
                   Goal("==", 0)),
        FigureSpec("discovery_4096", "discovery over 4,096 synthetic sysfs devices", "s",
                   Goal("<=", 1)),
        FigureSpec("explain_1000", "drakit explain: 1 claim against 1,000 devices "
                   "(allocation + reasons, fresh CEL environment)", "s", Goal("<=", 1)),
        FigureSpec("explain_cluster_1000", "drakit explain --pod across 1,000 nodes x 10 "
                   "devices (every node judged, fresh CEL environment)", "s", Goal("<=", 5)),
        FigureSpec("hotplug", "hot-plug: veth created -> slice with it published", "ms",
                   Goal("<=", 500)),
        FigureSpec("rss_idle", "plugin RSS, idle after start", "MB", Goal("report")),
        FigureSpec("rss_loaded", "plugin RSS, 1,000 devices + 1,000 claims prepared", "MB",
                   Goal("<=", 80)),
        FigureSpec("start_to_registered", "start to registered with the fake kubelet", "s",
                   Goal("<=", 1.5)),
        FigureSpec("pydra_prepare_p50", "kubernetes-pydra: NodePrepareResources p50", "ms",
                   Goal("report")),
        FigureSpec("pydra_prepare_p99", "kubernetes-pydra: NodePrepareResources p99", "ms",
                   Goal("report")),
        FigureSpec("pydra_unprepare_p50", "kubernetes-pydra: NodeUnprepareResources p50", "ms",
                   Goal("report")),
        FigureSpec("pydra_throughput", "kubernetes-pydra: throughput, 256 claims / 16 callers",
                   "claims/s", Goal("report")),
        FigureSpec("vsgo_prepare_p50", "drakit/Go+status, prepare p50 (1 claim x 1 device)", "x",
                   Goal("<=", 1.0)),
        FigureSpec("vsgo_prepare_p99", "drakit/Go+status, prepare p99", "x", Goal("<=", 1.2)),
        FigureSpec("vsgo_unprepare_p50", "drakit/Go+status, unprepare p50", "x", Goal("<=", 1.0)),
        FigureSpec("vsgo_unprepare_p99", "drakit/Go+status, unprepare p99", "x", Goal("report")),
        FigureSpec("vsgo_claim_cpu", "drakit/Go+status, agent CPU per prepare + unprepare", "x",
                   Goal("<=", 1.5)),
        FigureSpec("vsgo_rss_idle", "drakit/Go+status, RSS idle, 1,000 devices", "x",
                   Goal("<=", 1.3)),
        FigureSpec("vsgo_rss_loaded", "drakit/Go+status, RSS, 1,000 devices + 1,000 claims", "x",
                   Goal("<=", 1.3)),
        FigureSpec("vsgo_throughput", "drakit/Go+status, throughput, 256 claims / 16 callers", "x",
                   Goal(">=", 1.5)),
        FigureSpec("vsgo_publish_cold_10k", "drakit/Go+status, cold publish of 10,000 devices", "x",
                   Goal("<=", 0.8)),
        FigureSpec("held_prepare_growth", "prepare p50, 1,000 claims held / empty node",
                   "x", Goal("<=", 1.3)),
        FigureSpec("held_unprepare_growth", "unprepare p50, 1,000 claims held / empty node",
                   "x", Goal("<=", 1.3)),
        FigureSpec("vsgo_held_prepare_p50", "drakit/Go+status, prepare p50, 1,000 claims held",
                   "x", Goal("<=", 1.0)),
        FigureSpec("vsgo_held_unprepare_p50",
                   "drakit/Go+status, unprepare p50, 1,000 claims held", "x", Goal("<=", 1.0)),
        FigureSpec("ratio_prepare_p50", "pydra / drakit, prepare p50 latency", "x",
                   Goal("report")),
        FigureSpec("ratio_throughput", "drakit / pydra, prepare throughput", "x",
                   Goal("report")),
    )
}


@dataclass
class Result:
    """A measured figure: one sample per repeat, or ``skipped`` with the reason."""

    name: str
    samples: list[float] = field(default_factory=list)
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> FigureSpec:
        return SPECS[self.name]

    @property
    def summary(self) -> Summary | None:
        return summarize(self.samples) if self.samples and not self.skipped else None

    @property
    def verdict(self) -> Verdict:
        s = self.summary
        return "skipped" if s is None else self.spec.goal.verdict(s)

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        s = self.summary
        return {
            "name": self.name,
            "title": spec.title,
            "unit": spec.unit,
            "goal": spec.goal.text(spec.unit),
            "verdict": self.verdict,
            "median": round(s.median, 4) if s else None,
            "spread": {"p10": round(s.p10, 4), "p90": round(s.p90, 4),
                       "min": round(s.min, 4), "max": round(s.max, 4)} if s else None,
            "repeats": len(self.samples),
            "samples": [round(x, 4) for x in self.samples],
            "skipped": self.skipped,
            "notes": self.notes,
            **({"extra": self.extra} if self.extra else {}),
        }


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}".rstrip("0").rstrip(".") if abs(v) >= 1 else f"{v:.3f}"


def fmt(v: float) -> str:
    """A number for the table: 3 significant-ish digits."""
    return _fmt(v)


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """``rows`` (the first one the header) as a Markdown table with aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                     + " |")
        if k == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
