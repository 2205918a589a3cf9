"""kill -9 of the ``drakit run`` process in the middle of a prepare (at each injected point),
restart, the kubelet's retry, and a consistent state afterwards; plus a short run of the
crash-consistency driver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from contract_helpers import check_invariants, uid_of
from crash_agent import ONE_WRITE_ENV, parse_crash_points
from crash_driver import CrashDriver, crash_agent_command

from drakit.plugin.claims.checkpoint import Checkpoint
from drakit.plugin.claims.node import CRASH_POINTS
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.kubelet import KubeletCallError


def test_crash_point_parsing() -> None:
    assert parse_crash_points(None) == {}
    assert parse_crash_points("after-cdi-write:0.25, after-driver-hook") == {
        "after-cdi-write": 0.25, "after-driver-hook": 1.0}
    for bad in ("after-lunch", "after-cdi-write:2", "after-cdi-write:x"):
        with pytest.raises(ValueError, match="DRAKIT_CRASH_POINT"):
            parse_crash_points(bad)


@pytest.mark.slow
@pytest.mark.parametrize("hook", [True, False], ids=["prepare-hook", "no-prepare-hook"])
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_mid_prepare_then_restart_and_retry(
    harness_factory: Callable[..., DriverHarness], point: str, hook: bool
) -> None:
    """With a prepare hook (the example plugin) a crash before the completed write leaves
    both claims PrepareStarted. Without one (the hook taken away: no PrepareStarted write,
    drakit.plugin.claims.prepare) a crash after the hooks leaves no record; from the
    admission write on, both claims are PrepareCompleted, and the start-up recovery writes
    the CDI specs the crash left unwritten before the kubelet can call."""
    if hook:
        h = harness_factory(start=False, subprocess=True, env={"DRAKIT_CRASH_POINT": point})
        names = ("gpu-0", "gpu-1")
    else:  # generated devices: the default prepare needs no host device nodes
        h = harness_factory(start=False, subprocess=True,
                            env={"DRAKIT_CRASH_POINT": point, ONE_WRITE_ENV: "1"},
                            plugin_options={"example": {"generate": {"count": 2,
                                                                     "prefix": "dev"}}})
        names = ("dev-0", "dev-1")
    h.agent_command = crash_agent_command()
    h.start()
    a = h.allocate("a", [("node-1", names[0])])
    b = h.allocate("b", [("node-1", names[1])])
    with pytest.raises(KubeletCallError):
        h.prepare(a, b, timeout=20)
    assert h.process is not None
    assert h.process.wait(timeout=10) == -9  # it killed itself at the point
    on_disk = Checkpoint(h.checkpoint_path).claims()
    recorded = point == "after-checkpoint-write" or (not hook and point == "after-cdi-write")
    if recorded or hook:
        assert set(on_disk) == {uid_of(a), uid_of(b)}
        phase = "PrepareCompleted" if recorded else "PrepareStarted"
        assert {r.phase for r in on_disk.values()} == {phase}
    else:
        assert on_disk == {}
    if recorded and not hook:  # at most the first claim's spec was written
        assert len(h.cdi_files()) < 2

    h.env = {} if hook else {ONE_WRITE_ENV: "1"}
    h.stop_plugin(kill=True)
    h.start_plugin()
    # After the start-up recovery, before any retry: consistent, nothing half-prepared.
    expected = {uid_of(a), uid_of(b)} if recorded else set()
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, expected)
    assert set(Checkpoint(h.checkpoint_path).claims()) == expected
    # The kubelet retries; both claims prepare (or are answered from the checkpoint).
    res = h.prepare(a, b)
    assert {u: r.error for u, r in res.items()} == {uid_of(a): "", uid_of(b): ""}
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(a), uid_of(b)})
    assert h.prepare(a, b) == res
    assert h.unprepare(a, b) == {uid_of(a): "", uid_of(b): ""}
    assert h.cdi_files() == []
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, set())


@pytest.mark.slow
def test_crash_driver_short_run(tmp_path: Path) -> None:
    lines: list[str] = []
    driver = CrashDriver(tmp_path / "crash", seed=7, kill_rate=0.3, arm_rate=0.6,
                         log=lines.append, kill_first_cycle=True)
    report = driver.run(cycles=12, time_limit=35)
    assert report.cycles >= 1, lines
    assert report.random_kills >= 1
    assert report.prepared > 0 and report.unprepared > 0
    assert report.checks >= report.cycles
    assert not report.violations, (report.summary(), lines)


@pytest.mark.slow
@pytest.mark.parametrize("one_write", [False, True], ids=["two-writes", "one-write"])
def test_crash_driver_with_hanging_hooks_and_status_faults(
        tmp_path: Path, one_write: bool) -> None:
    """Kills around prepare hooks that hang past the call's deadline and around
    AllocatedDeviceStatus PATCHes answered 500: the invariants hold at every quiet point,
    and once the API heals every claim's status settles (applied while prepared, removed
    after)."""
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        print(line)  # shown whole with a failure; the assertion message is cut

    driver = CrashDriver(tmp_path / "crash", seed=11, kill_rate=0.4, arm_rate=0.5,
                         log=log, kill_first_cycle=True,
                         one_write=one_write,
                         hang_rate=0.4, status_fault_rate=0.5)
    report = driver.run(cycles=12, time_limit=60)
    assert report.random_kills >= 1 and report.still_running >= 1, report.summary()
    assert report.status_faults >= 1, report.summary()
    assert report.prepared > 0 and report.unprepared > 0
    assert not report, (report.summary(), lines)


@pytest.mark.slow
def test_the_status_invariant_sees_a_status_never_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check of invariant e is not blind: an agent that never writes status
    (``--no-device-status``) fails it for the claims prepared."""
    import crash_driver

    monkeypatch.setattr(crash_driver, "STATUS_SETTLE_SECONDS", 2.0)
    driver = CrashDriver(tmp_path / "crash", seed=5, kill_rate=0.0, arm_rate=0.0,
                         log=lambda _line: None, status_fault_rate=0.3)
    driver.h.extra_args = ["--no-device-status"]
    report = driver.run(cycles=3)
    assert report.status_violations and not report.violations, report.summary()
