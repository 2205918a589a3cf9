"""Where the real Kubernetes binaries are (:func:`find_k8s_bin_dir`) and how they are built
(:func:`build_k8s_binaries`, scripts/build-k8s.sh: upstream sources from Go modules, cached by
version under ``~/.cache/drakit/k8s-v<version>/bin``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from drakit.plugin.testing.real.process import RealClusterError

__all__ = [
    "APISERVER_BINARIES",
    "BIN_ENV",
    "K8S_VERSION",
    "build_k8s_binaries",
    "build_script",
    "find_k8s_bin_dir",
]

K8S_VERSION = "1.37.2"
#: Environment variable naming the directory with kube-apiserver, etcd, kubectl, ...
BIN_ENV = "DRAKIT_K8S_BIN"
#: The components the API server tier needs (kubectl and kube-scheduler are looked up when used).
APISERVER_BINARIES = ("kube-apiserver", "etcd")


def find_k8s_bin_dir(required: Sequence[str] = APISERVER_BINARIES) -> Path | None:
    """The directory holding the real Kubernetes binaries, or None.

    Looked up in this order: ``$DRAKIT_K8S_BIN``; ``$DRAKIT_CACHE/k8s-v1.37.2/bin``
    (``DRAKIT_CACHE`` defaults to ``~/.cache/drakit``, where scripts/build-k8s.sh puts
    them). A directory counts only when every name in ``required`` is an executable there.
    """
    candidates: list[Path] = []
    if os.environ.get(BIN_ENV):
        candidates.append(Path(os.environ[BIN_ENV]).expanduser())
    cache = Path(os.environ.get("DRAKIT_CACHE") or Path.home() / ".cache" / "drakit")
    candidates.append(cache.expanduser() / f"k8s-v{K8S_VERSION}" / "bin")
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in required):
            return directory
    return None


def build_script() -> Path:
    """scripts/build-k8s.sh of this checkout (it builds and caches the binaries)."""
    return Path(__file__).resolve().parents[3] / "scripts" / "build-k8s.sh"


def build_k8s_binaries(components: Sequence[str] = ("kube-apiserver", "etcd", "kubectl",
                                                   "kube-scheduler"),
                       timeout: float = 3600.0) -> Path:
    """Run scripts/build-k8s.sh for ``components`` (progress on this process's stderr; a
    cached binary is not rebuilt; a cold build of the default set takes ~15 min on 2 cores)
    and return the bin directory. Raises RealClusterError when Go is absent or it fails."""
    if shutil.which("go") is None:
        raise RealClusterError("go is not installed: cannot build the Kubernetes binaries")
    r = subprocess.run(["bash", str(build_script()), *components], stdout=subprocess.PIPE,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise RealClusterError(f"scripts/build-k8s.sh failed with status {r.returncode}")
    return Path(r.stdout.strip().splitlines()[-1])
