"""klog's verbosity: ``-v N``, ``-v=N``, ``--v=N`` and ``--verbosity N`` (VERBOSITY); a V(n)
line is written from ``-v n`` on; ``logging.DEBUG`` is V(5); out of range is a usage error."""

from __future__ import annotations

import argparse
import io
import logging
from collections.abc import Iterator

import pytest

from drakit.plugin.ops.config import add_run_arguments, settings_from_args
from drakit.plugin.ops.logs import V, setup_logging, verbosity_of


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


@pytest.mark.parametrize("argv,want", [
    (["-v", "2"], 2), (["-v=3"], 3), (["--v=4"], 4), (["--verbosity", "5"], 5), (["-v7"], 7),
    ([], 0),
])
def test_flag_spellings(argv: list[str], want: int) -> None:
    p = argparse.ArgumentParser()
    add_run_arguments(p)
    ns = p.parse_args(["--driver-name", "d.example.com", "--node-name", "n", *argv])
    assert settings_from_args(ns).verbosity == want


def test_out_of_range_is_an_error_naming_the_flag() -> None:
    p = argparse.ArgumentParser()
    add_run_arguments(p)
    ns = p.parse_args(["--driver-name", "d.example.com", "--node-name", "n", "-v", "11"])
    with pytest.raises(ValueError, match="--verbosity: must be 0 to 10"):
        settings_from_args(ns)


def test_levels() -> None:
    assert V(0) == logging.INFO and V(5) == logging.DEBUG
    assert [verbosity_of(V(n)) for n in range(8)] == list(range(8))
    assert verbosity_of(logging.WARNING) == 0 and verbosity_of(logging.DEBUG) == 5


@pytest.mark.parametrize("verbosity", range(8))
def test_a_v_n_line_is_written_from_v_n(verbosity: int, restore_root: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    setup_logging("json", verbosity)
    log = logging.getLogger("drakit.test")
    for n in range(8):
        log.log(V(n), "line at %d", n)
    written = [line for line in err.getvalue().splitlines() if "line at" in line]
    assert len(written) == verbosity + 1, written
