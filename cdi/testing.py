"""Run real containers with podman + runc against a CDI spec directory (test helper).

The real consumer of drakit's CDI output (podman with CDI, ``--device vendor/class=name``): if
podman accepts a spec and the container sees the device nodes and environment, the spec is
right.

podman 4.3 (Debian bookworm) reads specs only from ``/etc/cdi`` and ``/var/run/cdi``; it has
no ``--cdi-spec-dir`` and no ``cdi_spec_dirs`` setting. So :meth:`PodmanCDI.run` starts
podman in a private mount namespace (``unshare --mount``) where ``/var/run/cdi`` is a bind
mount of the given directory and an existing ``/etc/cdi`` is hidden under an empty tmpfs:
podman sees exactly the test's specs and nothing on the host changes, except that an empty
``/var/run/cdi`` directory is created as the mount point when missing.

Use from pytest::

    from drakit.cdi.testing import podman_cdi  # noqa: F401  (session fixture; skips with a reason)

    def test_x(podman_cdi, tmp_path):
        result = podman_cdi.run(tmp_path, ["example.com/gpu=gpu0"], "env")
        assert result.returncode == 0, result.stderr

or build :class:`PodmanCDI` directly after checking :func:`podman_unavailable_reason`.
This module imports pytest (a dev dependency); runtime code never imports it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DEFAULT_IMAGE = "localhost/drakit-busybox:1"
"""The image :meth:`PodmanCDI.ensure_image` builds from busybox-static."""
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
APPLETS = ("sh", "ls", "env", "cat", "stat", "test", "echo", "id", "head", "grep", "true")
RUNTIME_DIR = "/var/run/cdi"
"""Where podman 4.3 looks for dynamic specs (the bind-mount target)."""
STATIC_DIR = "/etc/cdi"

_NS_SCRIPT = r"""
set -e
mount --bind "$1" "$2"
if [ -d "$3" ]; then mount -t tmpfs -o mode=0755,size=64k drakit-cdi-empty "$3"; fi
shift 3
exec "$@"
"""


def _busybox() -> str | None:
    for candidate in BUSYBOX_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def podman_unavailable_reason() -> str | None:
    """Why podman tests cannot run here (not root, podman/runc/unshare/busybox missing),
    or None when they can."""
    if os.geteuid() != 0:
        return "podman CDI tests need root (mount namespace, rootful podman)"
    for tool in ("podman", "runc", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install podman runc busybox-static)"
    if _busybox() is None:
        return "busybox-static not installed (needed to build the test image)"
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "true"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a mount namespace: {exc}"
    if probe.returncode != 0:
        return f"cannot create a mount namespace: {probe.stderr.strip()}"
    return None


@dataclass(frozen=True)
class PodmanResult:
    """Outcome of one ``podman run``: exit status and decoded output."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def env(self) -> dict[str, str]:
        """``stdout`` parsed as ``env`` output (``NAME=value`` lines)."""
        out = {}
        for line in self.stdout.splitlines():
            name, sep, value = line.partition("=")
            if sep and name:
                out[name] = value
        return out

    def check(self) -> PodmanResult:
        """Return self, or raise AssertionError with podman's output when it failed."""
        if self.returncode != 0:
            raise AssertionError(
                f"podman failed ({self.returncode}): {' '.join(self.argv)}\n"
                f"stdout:\n{self.stdout}\nstderr:\n{self.stderr}"
            )
        return self


class PodmanCDI:
    """Runs rootful podman (runtime runc) with CDI devices from a given spec directory.

    ``image`` is built from busybox-static by :meth:`ensure_image` when absent (cached by
    name across runs). ``timeout`` (seconds) bounds every podman call.
    """

    def __init__(
        self, image: str = DEFAULT_IMAGE, runtime: str = "runc", timeout: float = 120.0
    ) -> None:
        self.image = image
        self.runtime = runtime
        self.timeout = timeout

    def _call(self, argv: list[str], timeout: float | None = None) -> PodmanResult:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\n[drakit] podman timed out after {timeout or self.timeout}s"
            return PodmanResult(argv, -9, out, err)
        return PodmanResult(argv, proc.returncode, out, err)

    def image_exists(self) -> bool:
        """True when :attr:`image` is in podman's local store."""
        res = self._call(["podman", "image", "exists", self.image], timeout=60)
        return res.returncode == 0

    def ensure_image(self) -> str:
        """Build and ``podman import`` the busybox image unless it exists; returns its name.

        Raises RuntimeError when busybox is missing or the import fails.
        """
        if self.image_exists():
            return self.image
        busybox = _busybox()
        if busybox is None:
            raise RuntimeError("busybox-static is not installed")
        with tempfile.TemporaryDirectory(prefix="drakit-bb-") as tmp:
            tar_path = Path(tmp) / "rootfs.tar"
            with tarfile.open(tar_path, "w") as tar:
                for d in ("bin", "dev", "proc", "sys", "etc", "tmp"):
                    info = tarfile.TarInfo(d)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o1777 if d == "tmp" else 0o755
                    tar.addfile(info)
                tar.add(busybox, arcname="bin/busybox")
                for applet in APPLETS:
                    link = tarfile.TarInfo(f"bin/{applet}")
                    link.type = tarfile.SYMTYPE
                    link.linkname = "busybox"
                    tar.addfile(link)
            res = self._call(["podman", "import", str(tar_path), self.image])
        if res.returncode != 0 and not self.image_exists():
            raise RuntimeError(f"podman import failed: {res.stderr.strip()}")
        return self.image

    def run(
        self,
        cdi_dir: str | os.PathLike[str],
        device_ids: Sequence[str],
        command: str | Sequence[str],
        *,
        log_level: str | None = None,
        extra_args: Sequence[str] = (),
        timeout: float | None = None,
    ) -> PodmanResult:
        """``podman run --rm`` the image with ``--device`` for each qualified device name,
        seeing ``cdi_dir`` as its only CDI spec directory.

        ``command`` is a shell snippet (run by ``sh -c``) or an argv list. ``log_level``
        ``"debug"`` makes podman log why a spec was rejected. Never raises for a failed
        container: inspect :attr:`PodmanResult.returncode` / ``stderr``.
        """
        cdi = Path(cdi_dir).resolve()
        os.makedirs(RUNTIME_DIR, mode=0o755, exist_ok=True)
        cmd = ["sh", "-c", command] if isinstance(command, str) else list(command)
        podman = ["podman"]
        if log_level:
            podman.append(f"--log-level={log_level}")
        podman += [
            "--runtime",
            self.runtime,
            "run",
            "--rm",
            "--pull=never",
            "--network",
            "none",
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=1000:1000",
        ]
        for device in device_ids:
            podman += ["--device", device]
        podman += [*extra_args, self.image, *cmd]
        argv = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            _NS_SCRIPT,
            "drakit-cdi-ns",
            str(cdi),
            RUNTIME_DIR,
            STATIC_DIR,
            *podman,
        ]
        return self._call(argv, timeout)


@pytest.fixture(scope="session")
def podman_cdi() -> Iterator[PodmanCDI]:
    """Session fixture: a :class:`PodmanCDI` with its image built; skips with the reason
    when podman tests cannot run here."""
    reason = podman_unavailable_reason()
    if reason:
        pytest.skip(reason)
    runner = PodmanCDI()
    runner.ensure_image()  # podman present but unable to import an image: a real failure
    yield runner


def schema_validator(schema_dir: Path) -> Callable[[Any], list[str]]:
    """A checker against the official CDI JSON schema in ``schema_dir`` (schema.json +
    defs.json): decoded spec → list of violations (``path: message``; empty when valid).
    Needs the ``jsonschema`` package (a dev dependency)."""
    import json

    from jsonschema import Draft7Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    schema = json.loads((schema_dir / "schema.json").read_text())
    defs = json.loads((schema_dir / "defs.json").read_text())
    registry: Registry[Any] = Registry().with_resource(
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7)
    )
    validator = Draft7Validator(schema, registry=registry)

    def check(instance: Any) -> list[str]:
        return [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(instance)
        ]

    return check
