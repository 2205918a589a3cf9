"""One policy for background work: an error of a round is logged and reported with
its severity and the work goes on; a fatal one ends the work and calls ``on_fatal`` once."""

from __future__ import annotations

import logging
import threading

import pytest

from drakit.plugin.background import Supervisor
from drakit.plugin.events import RecordedEvents, Severity


class Fatal(RuntimeError):
    pass


def test_an_error_is_logged_with_its_traceback_once_and_the_work_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    events = RecordedEvents()
    sup = Supervisor(events, fatal=(Fatal,))
    boom = ValueError("disk busy")
    caplog.set_level(logging.ERROR, logger="drakit.plugin.background")

    def step() -> None:
        raise boom

    assert sup.guard("orphan-sweep", step) is True
    assert sup.guard("orphan-sweep", step) is True
    assert [r.exc_info is not None for r in caplog.records] == [True, False]
    assert "orphan-sweep failed: ValueError: disk busy" in caplog.records[0].getMessage()
    assert "failed again" in caplog.records[1].getMessage()
    assert events.named("background_error") == [("orphan-sweep", boom, Severity.ERROR)] * 2
    assert sup.failed is None


def test_a_fatal_error_ends_the_loop_and_calls_on_fatal_once(
        caplog: pytest.LogCaptureFixture) -> None:
    events, calls, rounds = RecordedEvents(), [], []
    sup = Supervisor(events, fatal=(Fatal,), on_fatal=lambda w, e: calls.append((w, str(e))))
    stop = threading.Event()

    def step() -> None:
        rounds.append(1)
        if len(rounds) == 3:
            raise Fatal("--strict: spec.devices[0].attributes[a].string: Too long")
        if len(rounds) == 2:
            raise ValueError("transient")

    thread = threading.Thread(target=sup.loop("rescan", step, lambda: 0.0, stop))
    thread.start()
    thread.join(10)
    assert not thread.is_alive()  # ended by the fatal error, not by stop
    assert len(rounds) == 3
    assert calls == [("rescan", "--strict: spec.devices[0].attributes[a].string: Too long")]
    assert sup.failed is not None and sup.failed[0] == "rescan"
    assert [s for _, _, s in events.named("background_error")] == [Severity.ERROR,
                                                                    Severity.FATAL]
    assert any(r.levelno == logging.CRITICAL and "rescan: fatal" in r.getMessage()
               for r in caplog.records)
    assert sup.guard("other", lambda: (_ for _ in ()).throw(Fatal("again"))) is False
    assert len(calls) == 1  # on_fatal once
