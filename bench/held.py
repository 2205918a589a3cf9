"""Prepare / unprepare latency with 1,000 claims prepared and held, beside an empty node, for
drakit and the Go reference driver.

Per round, four agents run side by side, each behind its own fake kubelet and embedded API
server with 1,001 generated devices: ``drakit`` and ``go_status`` (the Go reference driver
with AllocatedDeviceStatus, the pairing of the ``go`` group), each once ``empty`` (no claim
prepared) and once ``held`` (1,000 claims of 1 device each prepared from 16 callers on
devices 1..1000 and kept prepared through the round, after their status writes landed).
After 30 warm-up pairs per agent, :data:`BLOCKS` blocks of :data:`PAIRS_PER_BLOCK`
sequential prepare → unprepare pairs (1 claim x 1 device, on device 0) run every agent once
per block, in an order rotated per block, so the empty and the held node of an arm are
measured seconds apart.

Figures, each one sample per round: ``held_prepare_growth`` / ``held_unprepare_growth``:
drakit's p50 with 1,000 held / its p50 on the empty node (goal <= 1.3);
``vsgo_held_prepare_p50`` / ``vsgo_held_unprepare_p50``: drakit / Go with status, both with
1,000 held (goal <= 1.0: drakit ahead). ``extra`` keeps every agent's p50 per round and the
Go driver's own growth.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from bench.claims import CALLERS, _fan_out
from bench.env import BenchConfig
from bench.figures import Result
from bench.godriver import ensure_go_driver
from bench.stats import percentile
from bench.vsgo import (
    Arm,
    _arm,
    _idle_and_warm,
    _Latency,
    _latency_block,
    _rotated,
    _settle_status,
    _status_writes,
    _wait,
)
from bench.vsgo import Samples as _Samples

#: Claims prepared and held on the ``held`` agents.
HELD = 1000
#: Latency blocks per round and the prepare → unprepare pairs in each (200 pairs per agent).
BLOCKS = 4
PAIRS_PER_BLOCK = 50
#: The figures of this group, and the pair of agent p50s each is the ratio of.
FIGURES: dict[str, tuple[str, str, str]] = {
    # figure: (call, numerator agent, denominator agent)
    "held_prepare_growth": ("prepare", "drakit/held", "drakit/empty"),
    "held_unprepare_growth": ("unprepare", "drakit/held", "drakit/empty"),
    "vsgo_held_prepare_p50": ("prepare", "drakit/held", "go_status/held"),
    "vsgo_held_unprepare_p50": ("unprepare", "drakit/held", "go_status/held"),
}


@dataclass
class _P50s:
    """Per agent (``arm/load``) and call: the p50 of each round, in ms."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, agent: str, call: str, value: float) -> None:
        self.values.setdefault(agent, {}).setdefault(call, []).append(value)

    def get(self, agent: str, call: str) -> list[float]:
        return self.values.get(agent, {}).get(call, [])


def _hold(arm: Arm, r: int, n: int) -> None:
    """Prepare one claim on each of devices 1..n and wait for their status writes."""
    bench = arm.bench
    held = bench.claims(f"held{r}", arm.devices[1:n + 1])
    before = _status_writes(bench)
    _fan_out(bench.prepare, held, CALLERS, 300.0)
    if arm.writes_status:
        _wait(lambda: _status_writes(bench) - before >= len(held), 120,
              "AllocatedDeviceStatus of every held claim")
    _settle_status(bench)


def _round(cfg: BenchConfig, binary: Path | None, r: int, n_held: int, out: _P50s) -> None:
    arms = ["drakit", *(["go_status"] if binary is not None else [])]
    keys = [f"{a}/{load}" for a in arms for load in ("empty", "held")]
    with contextlib.ExitStack() as stack:
        agents = {k: stack.enter_context(_arm(cfg, k.split("/")[0], binary, n_held + 1))
                  for k in _rotated(keys, r)}
        for k in keys:
            if k.endswith("/held"):
                _hold(agents[k], r, n_held)
        scratch = _Samples()
        for k in keys:
            _idle_and_warm(cfg, agents[k], k, r, scratch)
        acc = {k: _Latency() for k in keys}
        per_block = cfg.scale(PAIRS_PER_BLOCK, 5)
        for b in range(cfg.scale(BLOCKS, 2)):
            for k in _rotated(keys, b):
                arm = agents[k]
                _latency_block(arm, arm.bench.claims(f"lat{r}.{b}", [arm.devices[0]] * per_block),
                               acc[k])
        for k in keys:
            out.add(k, "prepare", percentile(acc[k].prep, 50))
            out.add(k, "unprepare", percentile(acc[k].unprep, 50))


def _ratios(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=False) if y > 0]


def run_held(cfg: BenchConfig) -> list[Result]:
    binary, reason = ensure_go_driver()
    n_held = cfg.scale(HELD, 32)
    rounds = cfg.scale(3, 1)
    p50s = _P50s()
    for r in range(rounds):
        _round(cfg, binary, r, n_held, p50s)
    results = []
    for name, (call, num, den) in FIGURES.items():
        if binary is None and "go_status" in den:
            results.append(Result(name, skipped=reason))
            continue
        res = Result(name, samples=_ratios(p50s.get(num, call), p50s.get(den, call)))
        res.extra.update({k: [round(x, 3) for x in p50s.get(k, call)] for k in p50s.values})
        res.extra.update(held=n_held, rounds=rounds, call=call)
        if binary is not None:
            go = _ratios(p50s.get("go_status/held", call), p50s.get("go_status/empty", call))
            res.extra["go_growth"] = [round(x, 4) for x in go]
        if name.startswith("held_"):  # once per call: the vsgo figures share the values
            res.notes.append(
                f"{call} p50 in ms per round: "
                + "; ".join(f"{k} {', '.join(f'{x:.2f}' for x in p50s.get(k, call))}"
                            for k in p50s.values)
                + f" ({n_held} claims held on the held agents)")
        results.append(res)
    return results
