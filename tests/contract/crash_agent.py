"""``drakit run`` with crash points armed (crash tests only): the production agent with a
``crash_hook`` handed to its :class:`drakit.plugin.claims.node.NodeLogic` that kills the process
with SIGKILL at the named points.

``DRAKIT_CRASH_POINT`` names the points: ``after-driver-hook``, ``after-cdi-write``,
``after-checkpoint-write`` (:data:`drakit.plugin.claims.node.CRASH_POINTS`), each optionally with
``:probability`` (default 1), comma-separated; unset, nothing is armed.
The example plugin declares that its prepare changes nothing on the node
(``prepare_changes_node = False``); here it is made a hook that does, so the two-write path
(``PrepareStarted``, then ``PrepareCompleted``) is the one crashed, unless
``DRAKIT_CRASH_ONE_WRITE=1`` keeps the declaration (the one-write path).
``DRAKIT_CRASH_HANG=<rate>:<seconds>`` makes that fraction of the example plugin's prepare
hooks hang for that long (longer than the kubelet call's deadline: the call answers that the
hook is still running, and the hook's late end is recorded or rolled back, or a kill finds it
hanging).
Usage: the arguments of ``drakit run`` (``python crash_agent.py run --driver-name ...``).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import drakit.plugin.ops.app as app_module
from drakit.plugin.claims.node import CRASH_POINTS, NodeLogic
from drakit.plugin.ops import cli

CRASH_ENV = "DRAKIT_CRASH_POINT"
ONE_WRITE_ENV = "DRAKIT_CRASH_ONE_WRITE"
HANG_ENV = "DRAKIT_CRASH_HANG"
log = logging.getLogger("crash_agent")


def parse_crash_points(value: str | None) -> dict[str, float]:
    """``"after-cdi-write:0.3,after-driver-hook"`` → {point: probability}. Raises ValueError
    naming an unknown point or a probability outside [0, 1]."""
    points: dict[str, float] = {}
    for part in (value or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, prob = part.partition(":")
        if name not in CRASH_POINTS:
            raise ValueError(f"{CRASH_ENV}: unknown crash point {name!r} (known: {CRASH_POINTS})")
        try:
            p = float(prob) if prob else 1.0
        except ValueError:
            raise ValueError(f"{CRASH_ENV}: {part!r}: probability is not a number") from None
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{CRASH_ENV}: {part!r}: probability must be in [0, 1]")
        points[name] = p
    return points


def crash_hook(points: dict[str, float]) -> Callable[[str], None]:
    """The hook: SIGKILL of this process at a point of ``points`` with its probability."""
    def crash(point: str) -> None:
        p = points.get(point)
        if p is not None and (p >= 1.0 or random.random() < p):
            log.warning("fault injection: SIGKILL at %s", point)
            for h in logging.getLogger().handlers:
                h.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    return crash


def parse_hang(value: str | None) -> tuple[float, float] | None:
    """``"0.3:4"`` → (rate, seconds); None when unset. Raises ValueError naming the variable."""
    if not value:
        return None
    rate, _, seconds = value.partition(":")
    try:
        r, sec = float(rate), float(seconds)
    except ValueError:
        raise ValueError(f"{HANG_ENV}: {value!r}: want <rate>:<seconds>") from None
    if not 0.0 <= r <= 1.0 or sec <= 0:
        raise ValueError(f"{HANG_ENV}: {value!r}: rate in [0, 1], seconds > 0")
    return r, sec


def hanging(prepare: Callable[[Any, Any], Any], rate: float,
            seconds: float) -> Callable[[Any, Any], Any]:
    """``prepare`` that first hangs for ``seconds`` with probability ``rate``."""
    def run(self: Any, request: Any) -> Any:
        if random.random() < rate:
            log.warning("fault injection: prepare hook hangs %.1fs for %s", seconds,
                        request.device.name)
            time.sleep(seconds)
        return prepare(self, request)
    return run


def main(argv: list[str]) -> int:
    from drakit.discovery.builtin.example import ExampleDiscovery

    # The example plugin declares a prepare that changes nothing on the node (one checkpoint
    # write per claim). By default the driver makes it a hook that does, so the two-write
    # path (PrepareStarted, then PrepareCompleted) is what gets killed; with the variable set
    # the one-write path is.
    ExampleDiscovery.prepare_changes_node = os.environ.get(ONE_WRITE_ENV) != "1"  # type: ignore[misc]
    hang = parse_hang(os.environ.get(HANG_ENV))
    if hang is not None:
        ExampleDiscovery.prepare = hanging(ExampleDiscovery.prepare, *hang)  # type: ignore[method-assign]
    spec = os.environ.get(CRASH_ENV)
    points = parse_crash_points(spec)
    if points:
        hook = crash_hook(points)

        class CrashingNodeLogic(NodeLogic):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, crash_hook=hook, **kwargs)

        app_module.NodeLogic = CrashingNodeLogic  # type: ignore[misc]
        log.warning("fault injection armed: %s=%s", CRASH_ENV, spec)
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
