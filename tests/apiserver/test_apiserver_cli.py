"""``drakit apiserver`` (apiserver_main): in a thread, and as a process stopped by SIGTERM."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from drakit.plugin.testing.apiserver import apiserver_main

REPO = Path(__file__).resolve().parents[2]


def test_main_in_thread_writes_kubeconfig(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    ready, stop = threading.Event(), threading.Event()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(apiserver_main(
        ["--kubeconfig-out", str(kubeconfig), "--served-versions", "v1,v1beta1"],
        ready=ready, stop=stop)))
    thread.start()
    try:
        assert ready.wait(timeout=10)
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            groups = client.ResourceApi(api).get_api_group()
            assert [v.version for v in groups.versions] == ["v1", "v1beta1"]
        finally:
            api.close()
    finally:
        stop.set()
        thread.join(timeout=10)
    assert codes == [0]
    out = capsys.readouterr().out
    assert re.search(r"listening on http://127\.0\.0\.1:\d+ \(resource\.k8s\.io v1, v1beta1\)",
                     out)
    assert f"kubeconfig written to {kubeconfig}" in out
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert server.startswith("http://127.0.0.1:")


def test_bad_versions_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert apiserver_main(["--served-versions", "v9"]) == 2
    assert "served_versions" in capsys.readouterr().err


def test_process_stops_on_sigterm(tmp_path: Path) -> None:
    code = "import sys; from drakit.plugin.testing.apiserver import apiserver_main; " \
           "sys.exit(apiserver_main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code, "--port", "0"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready, "no output from drakit apiserver within 10 s"
        line = proc.stdout.readline()
        assert "listening on http://" in line
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
