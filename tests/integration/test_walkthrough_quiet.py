"""The CLI walkthrough's normal start (``drakit run`` against the embedded API server, which
has no Node object) says nothing that looks like a failure: no WARNING or ERROR line, and
the missing Node once, at INFO, in words that fit a demo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from drakit.plugin.testing.apiserver import EmbeddedAPIServer


def test_the_walkthrough_start_prints_no_failure(tmp_path: Path) -> None:
    server = EmbeddedAPIServer().start()
    try:
        kubeconfig = server.write_kubeconfig(tmp_path / "kc")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "drakit.plugin.ops.cli", "run", "--driver-name",
             "gpu.example.com", "--node-name", "node-1", "--discovery", "example",
             "--kubeconfig", str(kubeconfig),
             "--kubelet-registrar-directory-path", str(tmp_path / "reg"),
             "--kubelet-plugins-directory-path", str(tmp_path / "plugins"),
             "--cdi-root", str(tmp_path / "cdi"), "--resync-seconds", "1"],
            stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while not server.list_objects("resourceslices") and time.monotonic() < deadline:
                assert proc.poll() is None, "drakit run exited"
                time.sleep(0.1)
            assert server.list_objects("resourceslices"), "no ResourceSlice within 60 s"
            time.sleep(3)  # a few resyncs: each reads the absent Node again
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
    finally:
        server.stop()
    alarming = [line for line in err.splitlines()
                if " WARNING " in line or " ERROR " in line or "not found" in line
                or "Traceback" in line]
    assert alarming == [], err
    assert err.count("no Node object node-1") == 1, err
