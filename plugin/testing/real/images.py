"""The images every :class:`~drakit.plugin.testing.real.node.RealNode` has, made without a
registry: a static pause program (``go build``, CGO off) and Debian's ``/bin/busybox``
(busybox-static), each ``FROM scratch`` with ``podman build`` in a throwaway podman store,
saved with ``podman save --format oci-archive`` (cached by content under
``$DRAKIT_CACHE/k8s-v<version>/images``); the node imports them with ``ctr images import``.

Errors: :class:`~drakit.plugin.testing.real.process.RealClusterError` when go or
podman fails (with the tail of its output).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from drakit.plugin.testing.real.binaries import K8S_VERSION
from drakit.plugin.testing.real.process import RealClusterError, run_checked

__all__ = ["BUSYBOX_IMAGE", "PAUSE_IMAGE", "build_image_archives"]

#: The images every node has (imported into containerd's ``k8s.io`` namespace).
PAUSE_IMAGE = "localhost/drakit-pause:1"
BUSYBOX_IMAGE = "localhost/drakit-busybox:1"
#: Kubelet feature gates added to the control plane's DRA gates (KEP-4680 device health in
#: the pod status).
KUBELET_FEATURE_GATES = {"ResourceHealthStatus": True}

_PAUSE_GO = """\
// The sandbox's pause process: waits for SIGINT/SIGTERM, reaps children meanwhile.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	child := make(chan os.Signal, 8)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-child:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
"""

def _images_cache() -> Path:
    cache = Path(os.environ.get("DRAKIT_CACHE") or Path.home() / ".cache" / "drakit")
    return cache.expanduser() / f"k8s-v{K8S_VERSION}" / "images"


def build_image_archives(workdir: Path) -> dict[str, Path]:
    """OCI archives of :data:`PAUSE_IMAGE` and :data:`BUSYBOX_IMAGE` (built ``FROM
    scratch`` with podman in a throwaway store under ``workdir``; cached by content).
    Returns ``{image: archive path}``."""
    cache = _images_cache()
    cache.mkdir(parents=True, exist_ok=True)
    busybox = Path("/bin/busybox").read_bytes()
    sources: dict[str, tuple[str, bytes, str]] = {
        PAUSE_IMAGE: ("pause", _PAUSE_GO.encode(), 'ENTRYPOINT ["/pause"]'),
        BUSYBOX_IMAGE: ("busybox", hashlib.sha256(busybox).hexdigest().encode(),
                        'ENTRYPOINT ["/bin/busybox"]'),
    }
    out: dict[str, Path] = {}
    store = workdir / "podman"
    for image, (name, content, entry) in sources.items():
        key = hashlib.sha256(content + entry.encode() + image.encode()).hexdigest()[:16]
        archive = cache / f"{name}-{key}.oci.tar"
        out[image] = archive
        if archive.exists():
            continue
        ctx = workdir / "image-build" / name
        ctx.mkdir(parents=True, exist_ok=True)
        if name == "pause":
            (ctx / "pause.go").write_text(_PAUSE_GO)
            env = {**os.environ, "CGO_ENABLED": "0", "GO111MODULE": "off"}
            r = subprocess.run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o",
                                str(ctx / "pause"), str(ctx / "pause.go")], cwd=ctx, env=env,
                               capture_output=True, text=True, timeout=300, check=False)
            if r.returncode != 0:
                raise RealClusterError(f"go build pause.go failed: {r.stderr.strip()[-800:]}")
            (ctx / "Containerfile").write_text(f"FROM scratch\nCOPY pause /pause\n{entry}\n")
        else:
            shutil.copy2("/bin/busybox", ctx / "busybox")
            (ctx / "Containerfile").write_text(
                f"FROM scratch\nCOPY busybox /bin/busybox\n{entry}\n")
        podman = ["podman", "--root", str(store / "root"), "--runroot", str(store / "run"),
                  "--storage-driver", "vfs"]
        run_checked([*podman, "build", "-q", "-t", image, str(ctx)], what=f"podman build {image}")
        tmp = archive.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        run_checked([*podman, "save", "--format", "oci-archive", "-o", str(tmp), image],
             what=f"podman save {image}")
        os.replace(tmp, archive)
    shutil.rmtree(store, ignore_errors=True)
    return out
