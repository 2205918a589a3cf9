"""A small tmpfs to fill up: tests of what drakit does on a full disk (root; without root
the test skips, under CI=true it fails)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's ``size=`` option, e.g. ``256k``) mounted at ``path``
    (created when missing), unmounted afterwards (lazily: files may still be open)."""
    if os.geteuid() != 0:
        why = "mounting a small tmpfs needs root"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}; CI runs as root")
        pytest.skip(why)
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0750",
                    "drakit-full-test", str(path)], check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; returns the filler file
    (remove it to make room again)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler
