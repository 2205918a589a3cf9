"""The bench's test bed: ``drakit run`` as a child process behind the fake kubelet and the
embedded API server (:class:`drakit.plugin.testing.harness.DriverHarness` in subprocess mode), plus
process probes (RSS) and the fsync floor of the disk under test."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.runtime import runtime_python
from drakit.cdi.atomic import atomic_write
from drakit.plugin.ops.config import Settings
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.kubelet.fake import FakeKubelet

DRIVER = "bench.drakit.example.com"
NODE = "bench-node"
#: Scan period of the fake kubelet's registrar-dir watcher in the bench (the real kubelet
#: uses inotify; the default 0.1 s poll would add up to 100 ms to start-up figures).
KUBELET_POLL = 0.005


@dataclass
class BenchConfig:
    """What a run measures and where: ``quick`` shrinks every workload to a smoke test;
    ``workdir`` holds every temporary directory (removed afterwards unless ``keep``)."""

    quick: bool
    workdir: Path
    keep: bool = False

    def scale(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def tempdir(self, prefix: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.workdir))

    def socket_tempdir(self, prefix: str) -> Path:
        """:meth:`tempdir`, or a directory in the system's temporary directory when the
        workdir's path is too long for the unix sockets below it (``sun_path``: 107 bytes,
        with the kubelet's registry and plugin directory names)."""
        root = self.tempdir(prefix)
        if len(str(root)) > 40:
            shutil.rmtree(root)
            root = Path(tempfile.mkdtemp(prefix=prefix))
        return root


def byte_compile_drakit() -> None:
    """Byte-compile drakit's modules into their ``__pycache__`` directories (ignored by git),
    as the image's installer does (deploy/image/install.sh), before the bench spawns agents.

    The Go driver is built once; without this, ``PYTHONDONTWRITEBYTECODE`` (set on this
    machine) makes every agent run from the checkout compile every drakit module from
    source at start: ~70 ms of CPU and ~4 MB of RSS that a deployed agent does not have.
    compileall skips what is up to date and does not descend into symbolic links
    (``drakit/plugin``, ``drakit/discovery`` and ``drakit/cdi`` are links, so each is named).
    """
    import drakit

    root = Path(next(iter(drakit.__path__)))
    subprocess.run([runtime_python()[0], "-m", "compileall", "-q", str(root),
                    *(str(p) for p in sorted(root.iterdir()) if p.is_symlink())],
                   check=True, timeout=120)


def example_options(count: int) -> dict[str, dict[str, Any]]:
    """Options of the example discoverer for ``count`` generated devices."""
    return {"example": {"generate": {"count": count, "prefix": "dev"}}}


@contextlib.contextmanager
def agent(
    cfg: BenchConfig,
    prefix: str,
    *,
    discovery: Sequence[str] = ("example",),
    plugin_options: dict[str, dict[str, Any]] | None = None,
    extra_args: Sequence[str] = (),
    wait: float = 60.0,
) -> Iterator[DriverHarness]:
    """A started harness with ``drakit run`` as a child on the runtime venv's interpreter
    (:mod:`bench.runtime`); stopped (SIGTERM, then SIGKILL) and its directory removed on
    exit. Logs go to ``<root>/drakit.log``."""
    root = cfg.tempdir(prefix)
    # The harness resyncs every 5 s (for tests); the bench measures the agent at its default
    # period. ``extra_args`` come later and win.
    resync = str(Settings.model_fields["resync_seconds"].default)
    h = DriverHarness(root, driver_name=DRIVER, node_name=NODE, discovery=discovery,
                      plugin_options=plugin_options, subprocess=True,
                      extra_args=["--resync-seconds", resync, *extra_args])
    h.kubelet = FakeKubelet(h.registrar_dir, "1.34", poll_interval=KUBELET_POLL)
    h.agent_command[0] = runtime_python()[0]  # the harness's command, on the runtime venv
    try:
        try:
            h.start(wait=wait)
        except Exception as e:
            raise RuntimeError(f"drakit run did not come up: {e}; log tail:\n"
                               f"{log_tail(h.log_path)}") from e
        yield h
    finally:
        try:
            h.stop()
        finally:
            if not cfg.keep:
                shutil.rmtree(root, ignore_errors=True)


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file ("" when missing)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def rss_mb(pid: int) -> float:
    """Resident set size (VmRSS) of process ``pid`` in MiB, from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agent_pid(h: DriverHarness) -> int:
    if h.process is None:
        raise RuntimeError("the agent is not running as a child process")
    return h.process.pid


def fsync_floor_ms(directory: Path, n: int) -> list[float]:
    """Milliseconds per :func:`drakit.cdi.atomic.atomic_write` of a 1 KiB file in ``directory``
    (temp file, write, fsync, rename, fsync of the directory), ``n`` times."""
    out = []
    data = b"x" * 1024
    target = directory / ".bench-fsync-probe.json"
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            atomic_write(target, data)
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
    return out


def wait_until(cond: Any, timeout: float, what: str, interval: float = 0.005) -> float:
    """Poll ``cond()`` until true; return the monotonic time it first was. TimeoutError
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return time.monotonic()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM an agent process and wait up to 10 s, then SIGKILL (None: nothing to do)."""
    if proc is None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
