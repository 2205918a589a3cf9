"""plugin.malloc: the arena cap applies on glibc and yields to an explicit MALLOC_ARENA_MAX."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from plugin.malloc import limit_malloc_arenas

SCRIPT = "from plugin.malloc import limit_malloc_arenas; print(limit_malloc_arenas())"


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


GLIBC = os.path.exists("/lib/x86_64-linux-gnu/libc.so.6") or os.path.exists(
    "/lib/aarch64-linux-gnu/libc.so.6")


@pytest.mark.skipif(not GLIBC, reason="not a glibc system")
def test_trimmer_trims_at_most_once_per_interval() -> None:
    from plugin.malloc import Trimmer

    t = Trimmer(min_interval=3600)
    assert t.maybe_trim() is True
    assert t.maybe_trim() is False and t.trims == 1
    assert Trimmer(min_interval=0).maybe_trim() is True


def test_status_writer_reports_each_drained_queue() -> None:
    """on_drained runs after the last queued write of a burst (where the app trims)."""
    import threading

    from plugin.checkpoint import ClaimRecord, PreparedDeviceRecord
    from plugin.claims import ClaimRef
    from plugin.status import StatusWriter

    gate = threading.Event()
    applied: list[str] = []

    class API:
        def apply_claim_status_devices(self, namespace: str, name: str, *a: object,
                                       **k: object) -> None:
            gate.wait(10)
            applied.append(name)

        def remove_claim_status_devices(self, *a: object, **k: object) -> None:
            raise AssertionError("not expected")

    drained = threading.Event()
    calls: list[int] = []

    def on_drained() -> None:
        calls.append(len(applied))
        drained.set()

    w = StatusWriter(API(), "d.example.com", on_drained=on_drained)  # type: ignore[arg-type]
    try:
        for i in range(3):
            ref = ClaimRef(namespace="ns", name=f"c{i}", uid=f"uid-{i}")
            rec = ClaimRecord(uid=ref.uid, namespace="ns", name=ref.name,
                              devices=[PreparedDeviceRecord(request="r", pool="p",
                                                            device=f"d{i}")])
            w.write(ref, rec)
        gate.set()
        assert drained.wait(10) and w.flush(10)
    finally:
        w.stop()
    assert sorted(applied) == ["c0", "c1", "c2"]
    assert calls and calls[-1] == 3  # the last call came after every write
