"""The command-line tools when their reader goes away (``drakit explain … | head``): no
traceback, the exit status a shell gives a process killed by SIGPIPE (141)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent   # where the package put its scripts


@pytest.mark.parametrize("argv", [["drakit", "--version"], ["drakit", "--help"],
                                  ["kubectl-drakit", "--help"]])
def test_a_closed_stdout_is_no_traceback(argv: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)                       # the reader is gone before anything is written
    try:
        proc = subprocess.run([str(BIN / argv[0]), *argv[1:]], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, \
        proc.stderr
    assert proc.returncode == 141
