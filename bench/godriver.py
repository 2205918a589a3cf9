"""The Go reference driver of ``make bench`` (``bench/go``): built from Go modules, run as a
child process behind its own fake kubelet and embedded API server.

The driver is a small DRA kubelet plugin on ``k8s.io/dynamic-resource-allocation`` v0.37.2
(``kubeletplugin`` + ``resourceslice``) doing per claim the same durable work as drakit
(see ``bench/go/main.go``). Its REST client is set to JSON (``ContentType:
application/json``): client-go v0.37 sends protobuf by default, which the embedded API server
answers with 415.

The binary is built once per source version (hash of ``go.mod``, ``go.sum``, ``*.go`` and
``go version``) into ``~/.cache/drakit-bench/go-driver-<hash>`` (override the directory with
``$DRAKIT_BENCH_GO_CACHE``); without a Go toolchain the Go figures are skipped with that reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.claims import ClaimBench
from bench.env import KUBELET_POLL, NODE, BenchConfig, log_tail, terminate
from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.kubelet.fake import FakeKubelet

GO_SOURCE = Path(__file__).with_name("go")
GO_DRIVER = "bench.go.example.com"
#: Seconds a first build may take (client-go and its dependencies from the module cache).
BUILD_TIMEOUT = 900.0


def cache_dir() -> Path:
    env = os.environ.get("DRAKIT_BENCH_GO_CACHE")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "drakit-bench"


def source_hash(go: str) -> str:
    """SHA-256 over the driver's sources and the toolchain version (16 hex digits)."""
    h = hashlib.sha256()
    for p in sorted(GO_SOURCE.iterdir()):
        if p.name in ("go.mod", "go.sum") or p.suffix == ".go":
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    version = subprocess.run([go, "version"], capture_output=True, text=True, timeout=30)
    h.update(version.stdout.encode())
    return h.hexdigest()[:16]


def ensure_go_driver() -> tuple[Path | None, str]:
    """The built driver binary (building it when absent): (path, "") or (None, reason)."""
    go = shutil.which("go")
    if go is None:
        return None, "no Go toolchain (`go` not on PATH): the Go reference driver is not built"
    try:
        target = cache_dir() / f"go-driver-{source_hash(go)}"
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"`go version` failed: {e}"
    if target.is_file():
        return target, ""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    env = dict(os.environ)
    env["GOFLAGS"] = " ".join(f for f in (env.get("GOFLAGS", ""), "-buildvcs=false")
                              if f and f not in env.get("GOFLAGS", "").split()).strip()
    print(f"[bench] building the Go reference driver (bench/go) into {target} ...",
          file=sys.stderr, flush=True)
    try:
        proc = subprocess.run([go, "build", "-o", str(tmp), "."], cwd=GO_SOURCE,
                              env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None, f"go build of bench/go failed: {e}"
    if proc.returncode != 0:
        with contextlib.suppress(OSError):
            tmp.unlink()
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:] or ["?"]
        return None, "go build of bench/go failed: " + " | ".join(tail)
    os.replace(tmp, target)
    return target, ""


@dataclass
class GoAgent:
    """A running Go driver: its :class:`ClaimBench`, process id, CDI dir and API server."""

    bench: ClaimBench
    pid: int
    cdi_dir: Path
    root: Path

    def slices(self) -> list[dict[str, object]]:
        return [s for s in self.bench.apiserver.list_objects("resourceslices", copy=False)
                if s["spec"].get("driver") == GO_DRIVER]

    def devices(self) -> list[tuple[str, str]]:
        """(pool, device) of every published device, in slice order."""
        out = []
        for s in self.bench.apiserver.list_objects("resourceslices", copy=False):
            spec = s["spec"]
            if spec.get("driver") == GO_DRIVER:
                out += [(spec["pool"]["name"], d["name"]) for d in spec.get("devices", [])]
        return out


@contextlib.contextmanager
def go_agent(cfg: BenchConfig, binary: Path, *, devices: int, write_status: bool,
             wait: float = 60.0) -> Iterator[GoAgent]:
    """API server + fake kubelet + the Go driver as a child (registered when yielded);
    all stopped (SIGTERM, then SIGKILL) and the directory removed on exit."""
    root = cfg.socket_tempdir("go-")
    registrar = root / "registry"
    plugin_dir = root / "plugins" / GO_DRIVER
    cdi = root / "cdi"
    for d in (registrar, plugin_dir, cdi):
        d.mkdir(parents=True)
    api = EmbeddedAPIServer().start()
    kubelet = FakeKubelet(registrar, "1.34", poll_interval=KUBELET_POLL).start()
    proc: subprocess.Popen[bytes] | None = None
    log_path = root / "go-driver.log"
    try:
        api.write_kubeconfig(root / "kubeconfig")
        api.create_node(NODE)
        cmd = [str(binary), "-kubeconfig", str(root / "kubeconfig"), "-driver-name", GO_DRIVER,
               "-node-name", NODE, "-kubelet-registrar-directory-path", str(registrar),
               "-kubelet-plugins-directory-path", str(plugin_dir), "-cdi-dir", str(cdi),
               "-devices", str(devices), f"-write-status={str(write_status).lower()}", "-v", "0"]
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            kubelet.wait_registered(GO_DRIVER, timeout=wait)
        except TimeoutError as e:
            raise RuntimeError(f"the Go driver did not register: {e}; log tail:\n"
                               f"{log_tail(log_path)}") from e
        yield GoAgent(ClaimBench(kubelet, api, GO_DRIVER), proc.pid, cdi, root)
    finally:
        try:
            terminate(proc)
        finally:
            kubelet.stop()
            api.stop()
            if not cfg.keep:
                shutil.rmtree(root, ignore_errors=True)
