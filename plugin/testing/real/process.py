"""Child processes, checked commands and PKI of the real control plane
(:mod:`drakit.plugin.testing.real.controlplane`): :class:`ChildProcess` (one component in its own
session, log appended to a file), :func:`run_checked` (a command whose failure is an error),
a free loopback port, :func:`wait_until` (a bounded poll), and the CA / serving certificate /
service-account key pair made with ``openssl``. Errors: :class:`RealClusterError`.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ChildProcess",
    "RealClusterError",
    "free_port",
    "make_pki",
    "run_checked",
    "wait_until",
]


class RealClusterError(RuntimeError):
    """A real control-plane component could not be started or is missing."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_checked(cmd: Sequence[str], *, timeout: float = 120.0, cwd: Path | None = None,
                what: str | None = None) -> str:
    """Run ``cmd`` (at most ``timeout`` seconds) and return its stdout; RealClusterError
    naming ``what`` (default: the program) with the tail of its output on a non-zero exit."""
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       check=False)
    if r.returncode != 0:
        raise RealClusterError(f"{what or cmd[0]} failed ({r.returncode}): "
                               f"{(r.stderr or r.stdout).strip()[-1500:]}")
    return r.stdout


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RealClusterError(f"openssl {args[0]} failed: {r.stderr.strip()[-500:]}")


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA, a serving certificate (SAN IP 127.0.0.1, DNS localhost) signed by it and an RSA
    key pair for service-account tokens, made with ``openssl`` in ``directory``. Returns
    ``{"ca", "ca_key", "cert", "key", "sa_key", "sa_pub"}`` paths."""
    if shutil.which("openssl") is None:
        raise RealClusterError("openssl is not installed (needed for the API server's TLS)")
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=drakit-test-ca", "-keyout", "ca.key", "-out", "ca.crt", cwd=directory)
    (directory / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
             "-keyout", "server.key", "-out", "server.csr", cwd=directory)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt",
             cwd=directory)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    names = {"ca": "ca.crt", "ca_key": "ca.key", "cert": "server.crt", "key": "server.key",
             "sa_key": "sa.key", "sa_pub": "sa.pub"}
    return {k: directory / v for k, v in names.items()}


class ChildProcess:
    """A child process in its own session (its own process group), output appended to
    ``log_path``; ``stop`` sends SIGTERM and SIGKILLs after ``timeout`` seconds."""

    def __init__(self, name: str, cmd: list[str], log_path: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          env=dict(env) if env is not None else None)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL (no clean-up by the process)."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)


def wait_until(cond: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.1) -> Any:
    """Poll ``cond()`` until it returns a truthy value (returned); TimeoutError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)
