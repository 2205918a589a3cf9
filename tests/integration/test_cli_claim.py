"""A claim through the public CLI, as the vendor's guide shows it (docs/vendor-guide.md, "By
hand, through the CLI"): ``drakit apiserver``, ``drakit run -v 1`` and ``drakit fake-kubelet
--prepare`` as separate processes, the claim created by the guide's ``make_claim.py`` script.
``make test-floor`` runs this on the oldest supported runtimes."""

from __future__ import annotations

import json
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "vendor-guide.md"
DRAKIT = Path(sys.executable).with_name("drakit")
DRIVER = "gpu.example.com"
NODE = "node-1"


def _guide_block(marker: str) -> str:
    for block in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S):
        if marker in block:
            return textwrap.dedent(block)
    raise AssertionError(f"docs/vendor-guide.md has no python block with {marker!r}")


def _readline(proc: subprocess.Popen[str], want: str, timeout: float) -> str:
    """The first stdout line of ``proc`` containing ``want``, within ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = []
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if want in line:
            return line
    raise AssertionError(f"no line with {want!r} within {timeout} s; got {seen!r}")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in reversed(started):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _fake_kubelet(reg: Path, *args: str) -> list[dict[str, object]]:
    proc = subprocess.run([str(DRAKIT), "fake-kubelet", "--registrar-dir", str(reg),
                           "--driver", DRIVER, "--timeout", "20", *args],
                          capture_output=True, text=True, timeout=60)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return events


def test_claim_through_the_public_cli(short_tmp_path: Path,
                                      procs: list[subprocess.Popen[str]]) -> None:
    assert DRAKIT.exists(), f"the drakit console script is not installed next to {sys.executable}"
    kc, reg, plugins, cdi = (short_tmp_path / n for n in ("kc", "reg", "plugins", "cdi"))
    apiserver = subprocess.Popen([str(DRAKIT), "apiserver", "--kubeconfig-out", str(kc)],
                                 stdout=subprocess.PIPE, text=True)
    procs.append(apiserver)
    _readline(apiserver, "kubeconfig written", 20)
    agent = subprocess.Popen(
        [str(DRAKIT), "run", "-v", "1", "--driver-name", DRIVER, "--node-name", NODE,
         "--discovery", "example", "--kubeconfig", str(kc),
         "--kubelet-registrar-directory-path", str(reg),
         "--kubelet-plugins-directory-path", str(plugins), "--cdi-root", str(cdi)],
        stdout=subprocess.DEVNULL, text=True)
    procs.append(agent)

    script = short_tmp_path / "make_claim.py"
    script.write_text(_guide_block("make_claim.py"))
    made = subprocess.run([sys.executable, str(script), str(kc)], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    ref = made.stdout.strip()
    namespace, name, uid = ref.split("/")
    assert (namespace, name) == ("default", "c1") and len(uid) == 36

    prepared = [e for e in _fake_kubelet(reg, "--prepare", ref) if e["event"] == "prepared"]
    assert len(prepared) == 1 and prepared[0]["uid"] == uid, prepared
    assert not prepared[0]["error"], prepared
    ids = [i for d in prepared[0]["devices"] for i in d["cdi_device_ids"]]  # type: ignore[attr-defined]
    assert len(ids) == 1 and ids[0].endswith(f"={uid}-gpu-0"), ids
    specs = list(cdi.glob(f"*{uid}*"))
    assert len(specs) == 1, list(cdi.iterdir())

    unprepared = [e for e in _fake_kubelet(reg, "--unprepare", ref)
                  if e["event"] == "unprepared"]
    assert unprepared == [{"event": "unprepared", "uid": uid, "error": ""}]
    assert not list(cdi.glob(f"*{uid}*"))
    assert agent.poll() is None, "drakit run exited during the flow"
