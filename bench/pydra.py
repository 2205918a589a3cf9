"""Side by side: the same prepare latency and throughput workload against
``kubernetes-pydra`` (PyPI, the one earlier Python DRA prototype), through the same fake
kubelet and the same kind of embedded API server, in the same run.

How it runs (no code changes to pydra): its wheel is installed with
``pip install --no-deps --target <cache>`` (it needs grpcio, protobuf and kubernetes, which
drakit already has), and its network plugin runs unmodified as a child process,
``python -m pydra.plugins.network.driver``, configured through its environment variables:
``SOCKET_PATH`` (DRA socket), ``REGISTRATION_SOCKET_PATH`` (in the fake kubelet's registrar
directory), ``CDI_DIR``, ``NODE_NAME`` and ``KUBECONFIG`` (the embedded API server, which it
reaches through ``config.load_kube_config()``: it publishes its ResourceSlice there and reads
each claim with ``CustomObjectsApi``). It registers as driver ``dra.net`` and serves DRA v1
only; claims are allocated from its pool ``dra.net``.

What it does per claim, for context: one GET of the claim and one CDI JSON file written with
``open``/``json.dump`` (no temp file, no fsync, no checkpoint, no claim status). drakit
makes two atomic writes per prepare with the bench's example plugin (the CDI spec, its
directory not fsynced; the checkpoint's PrepareCompleted record; a plugin whose prepare
changes the node adds PrepareStarted) and queues an AllocatedDeviceStatus apply.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from bench.claims import ClaimBench, latency_ms, latency_results, throughput
from bench.env import KUBELET_POLL, NODE, BenchConfig, log_tail, terminate
from bench.figures import Result
from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.kubelet.fake import FakeKubelet

PYDRA_REQUIREMENT = "kubernetes-pydra==0.1.0"
PYDRA_DRIVER = "dra.net"
PYDRA_MODULE = "pydra.plugins.network.driver"


def pydra_dir() -> Path:
    """Where the pydra wheel is installed (``$DRAKIT_BENCH_PYDRA`` or a user cache dir)."""
    env = os.environ.get("DRAKIT_BENCH_PYDRA")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "drakit-bench" / "kubernetes-pydra-0.1.0"


def ensure_pydra() -> tuple[Path | None, str]:
    """Install pydra into :func:`pydra_dir` once; (dir, "") or (None, reason)."""
    target = pydra_dir()
    if (target / "pydra" / "plugins" / "network" / "driver.py").is_file():
        return target, ""
    target.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
             str(target), PYDRA_REQUIREMENT],
            capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"pip install {PYDRA_REQUIREMENT} failed: {e}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return None, f"pip install {PYDRA_REQUIREMENT} failed: {tail[0]}"
    return target, ""


@contextlib.contextmanager
def pydra_agent(cfg: BenchConfig, target: Path) -> Iterator[ClaimBench]:
    """API server + fake kubelet + pydra's network plugin as a child; all stopped on exit."""
    root = cfg.socket_tempdir("pydra-")
    registrar = root / "registry"
    plugin_dir = root / "plugins" / PYDRA_DRIVER
    cdi = root / "cdi"
    for d in (registrar, plugin_dir, cdi):
        d.mkdir(parents=True)
    api = EmbeddedAPIServer().start()
    kubelet = FakeKubelet(registrar, "1.34", poll_interval=KUBELET_POLL).start()
    proc: subprocess.Popen[bytes] | None = None
    try:
        api.write_kubeconfig(root / "kubeconfig")
        api.create_node(NODE)
        env = dict(os.environ)
        env.update({
            "PYTHONPATH": os.pathsep.join([str(target), env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep),
            "SOCKET_PATH": str(plugin_dir / "plugin.sock"),
            "REGISTRATION_SOCKET_PATH": str(registrar / f"{PYDRA_DRIVER}-reg.sock"),
            "CDI_DIR": str(cdi),
            "NODE_NAME": NODE,
            "KUBECONFIG": str(root / "kubeconfig"),
        })
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with open(root / "pydra.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", PYDRA_MODULE], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            kubelet.wait_registered(PYDRA_DRIVER, timeout=30)
        except TimeoutError as e:
            raise RuntimeError(f"kubernetes-pydra did not register: {e}; log tail:\n"
                               f"{log_tail(root / 'pydra.log')}") from e
        yield ClaimBench(kubelet, api, PYDRA_DRIVER)
    finally:
        try:
            terminate(proc)
        finally:
            kubelet.stop()
            api.stop()
            if not cfg.keep:
                shutil.rmtree(root, ignore_errors=True)


def run_pydra(cfg: BenchConfig) -> list[Result]:
    target, reason = ensure_pydra()
    names = ("pydra_prepare_p50", "pydra_prepare_p99", "pydra_unprepare_p50",
             "pydra_throughput")
    if target is None:
        return [Result(n, skipped=reason) for n in names]
    rounds = cfg.scale(3, 1)
    calls = cfg.scale(300, 10)
    n_tp = cfg.scale(256, 32)
    devices = [(PYDRA_DRIVER, f"dev-{i}") for i in range(n_tp)]
    with pydra_agent(cfg, target) as bench:
        latency_ms(bench, bench.claims("warm", [devices[0]] * cfg.scale(30, 3)))
        lat = [latency_ms(bench, bench.claims(f"lat{r}", [devices[0]] * calls))
               for r in range(rounds)]
        results = [r for r in latency_results("pydra_", lat) if r.name in names]
        tp = Result("pydra_throughput")
        for r in range(rounds):
            tp.samples.append(throughput(bench, bench.claims(f"tp{r}", devices)).rate)
        results.append(tp)
    results[0].notes.append(
        "kubernetes-pydra 0.1.0 network plugin, unmodified, as a child process; per claim it "
        "GETs the claim and writes a CDI file without fsync (no checkpoint, no status)")
    return results
