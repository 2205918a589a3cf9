"""``drakit run`` as a real process on a :class:`~drakit.plugin.testing.real.node.RealNode`:
its command line (the node's registrar, plugins and CDI directories, the admin kubeconfig,
``--http-endpoint`` on a free loopback port), start/stop/kill/restart, /readyz, /metrics
and its log.

Errors: :class:`~drakit.plugin.testing.real.process.RealClusterError` when it exits or
is not ready in time (with its log tail).
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from drakit.plugin.testing.real.process import ChildProcess, RealClusterError, free_port, wait_until

if TYPE_CHECKING:
    from drakit.plugin.testing.real.layout import NodeLayout

__all__ = ["DrakitProcess"]


class DrakitProcess:
    """``drakit run`` as a real process, driving a :class:`RealNode`'s kubelet."""

    def __init__(self, node: NodeLayout, args: Sequence[str], *, driver: str, name: str,
                 pod_uid: str | None, env: Mapping[str, str] | None) -> None:
        self.node = node
        self.driver = driver
        self.name = name
        self.pod_uid = pod_uid
        self.port = 0
        self.args = list(args)
        self.env = dict(env or {})
        self.log_path = node.workdir / f"{name}.log"
        self._proc: ChildProcess | None = None

    def command(self) -> list[str]:
        self.port = free_port()
        drakit = Path(sys.executable).with_name("drakit")
        cmd = [str(drakit) if drakit.exists() else sys.executable, *(
            [] if drakit.exists() else ["-m", "drakit.plugin.ops.cli"]), "run",
            "--driver-name", self.driver, "--node-name", self.node.node_name,
            "--kubeconfig", str(self.node.cp.kubeconfig()),
            "--kubelet-registrar-directory-path", str(self.node.registrar_dir),
            "--kubelet-plugins-directory-path", str(self.node.plugins_dir),
            "--cdi-root", str(self.node.cdi_dir),
            "--http-endpoint", f"127.0.0.1:{self.port}", *self.args]
        if self.pod_uid:
            cmd += ["--pod-uid", self.pod_uid]
        return cmd

    def start(self) -> None:
        env = {**os.environ, **self.env}
        self._proc = ChildProcess(self.name, self.command(), self.log_path, env=env)

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive()

    @property
    def returncode(self) -> int | None:
        """The exit status of its last run (negative: the signal that ended it), None while
        it runs or before it started."""
        return self._proc.popen.poll() if self._proc is not None else None

    def readyz(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz",
                                        timeout=2) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except (OSError, urllib.error.URLError) as e:
            return 0, str(e)

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Wait for /readyz 200 (registered with the kubelet, slices published); seconds."""
        t0 = time.monotonic()

        def ready() -> bool:
            if not self.alive():
                raise RealClusterError(f"drakit exited:\n{self.log()}")
            return self.readyz()[0] == 200
        try:
            wait_until(ready, timeout, f"{self.name} ready", interval=0.1)
        except TimeoutError as e:
            raise RealClusterError(f"{e}: {self.readyz()}\n{self.log()}") from None
        return time.monotonic() - t0

    def log(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def log_count(self, text: str) -> int:
        """How many lines of this process's log (every run of it) contain ``text``."""
        try:
            return sum(text in line for line in
                       self.log_path.read_text(errors="replace").splitlines())
        except OSError:
            return 0

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self) -> None:
        """SIGTERM (drakit removes its sockets), SIGKILL after 15 s."""
        if self._proc is not None:
            self._proc.stop()

    def kill(self) -> None:
        """SIGKILL: no clean-up (sockets stay, as after a crash)."""
        if self._proc is not None:
            self._proc.kill()

    def restart(self) -> None:
        self.stop()
        self.start()
