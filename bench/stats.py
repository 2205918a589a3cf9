"""Order statistics of benchmark samples (no numpy: a few hundred values at most)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks
    (numpy's default). Raises ValueError for an empty sequence or q outside 0-100."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    """Median and spread of ``n`` samples (same unit as the samples)."""

    n: int
    median: float
    p10: float
    p90: float
    min: float
    max: float

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def summarize(samples: Sequence[float]) -> Summary:
    """Summary of ``samples``; ValueError when empty."""
    return Summary(
        n=len(samples),
        median=percentile(samples, 50),
        p10=percentile(samples, 10),
        p90=percentile(samples, 90),
        min=min(samples),
        max=max(samples),
    )


def timed_ms(fn: Callable[[], object], n: int, warmup: int = 20) -> list[float]:
    """Milliseconds of each of ``n`` calls of ``fn``, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out
