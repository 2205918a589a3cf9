"""drakit.plugin.ops.malloc: the arena cap applies on glibc and yields to an explicit
MALLOC_ARENA_MAX; the collector is paused for start-up and on again after it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from drakit.plugin.ops.malloc import limit_malloc_arenas

SCRIPT = "from drakit.plugin.ops.malloc import limit_malloc_arenas; print(limit_malloc_arenas())"


def _run(env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_explicit_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


@pytest.mark.skipif(not os.path.exists("/lib/x86_64-linux-gnu/libc.so.6")
                    and not os.path.exists("/lib/aarch64-linux-gnu/libc.so.6"),
                    reason="not a glibc system")
def test_applied_on_glibc() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert _run(env) == "True"
    assert _run({**env, "MALLOC_ARENA_MAX": "8"}) == "False"


def test_freeze_startup_objects_leaves_them_to_reference_counting() -> None:
    import gc

    from drakit.plugin.ops.malloc import freeze_startup_objects

    try:
        assert freeze_startup_objects() > 1000  # at least the imported modules' objects
        assert gc.get_freeze_count() > 1000
        marker = [object()]  # made after the freeze: still collected as usual
        assert gc.is_tracked(marker) and gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()


def test_collector_paused_for_the_block_and_restored() -> None:
    import gc

    from drakit.plugin.ops.malloc import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        junk = [[] for _ in range(5000)]  # past the generation-0 threshold
        assert gc.get_count()[0] > gc.get_threshold()[0]  # and nothing collected
        del junk
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("start-up failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # left as found
    finally:
        gc.enable()


def test_a_start_up_refused_early_leaves_the_collector_on() -> None:
    import gc

    from drakit.plugin.ops import cli

    with pytest.raises(SystemExit):
        cli.main(["run"])  # --driver-name and --node-name missing: argparse exits
    assert gc.isenabled()
