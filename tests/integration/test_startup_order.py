"""``drakit run`` checks what it can without the API server first, each error naming the
flag, and says plainly what is wrong: run as a user runs it (a subprocess, no cluster)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from drakit.plugin.testing.harness import DriverHarness

IN_CLUSTER_ERROR = "Service host/port is not set"


def drakit_run(tmp_path: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KUBERNETES_") and k not in (
               "KUBECONFIG", "DISCOVERY", "DRAKIT_CONFIG", "CDI_VERSION_MAX")}
    return subprocess.run(
        [sys.executable, "-m", "drakit.plugin.ops.cli", "run", "--driver-name", "gpu.example.com",
         "--node-name", "node-1",
         "--kubelet-registrar-directory-path", str(tmp_path / "registry"),
         "--kubelet-plugins-directory-path", str(tmp_path / "plugins"),
         "--cdi-root", str(tmp_path / "cdi"), *argv],
        capture_output=True, text=True, timeout=timeout, env=env)


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("argv,expected", [
    (("--discovery", "nosuch"), "--discovery nosuch: unknown discovery plugin 'nosuch'"),
    (("--discovery", "example", "--cdi-version-max", "9.9"),
     "--cdi-version-max '9.9': not a CDI specification version"),
    (("--kubeconfig", "/nonexistent/kubeconfig"),
     "--kubeconfig /nonexistent/kubeconfig: no such file"),
    (("--config", "/nonexistent/drakit.yaml"), "--config /nonexistent/drakit.yaml: no such file"),
    (("--driver-nam", "x"), "unrecognized arguments: --driver-nam"),
    (("--http-endpoint", "nope"), "--http-endpoint"),
])
def test_checks_without_the_api_come_first_and_name_the_flag(
    tmp_path: Path, argv: tuple[str, ...], expected: str
) -> None:
    r = drakit_run(tmp_path, *argv)
    assert r.returncode == 2, r.stderr
    assert expected in r.stderr
    assert IN_CLUSTER_ERROR not in r.stderr
    assert not (tmp_path / "registry").exists() and not (tmp_path / "plugins").exists()


def test_bad_plugin_option_is_reported_before_the_api(tmp_path: Path) -> None:
    path = config(tmp_path, "discovery:\n  example:\n    nosuchOption: 1\n")
    r = drakit_run(tmp_path, "--discovery", "example", "--config", path)
    assert r.returncode == 2, r.stderr
    assert "--discovery example: discovery plugin 'example'" in r.stderr
    assert "nosuchOption" in r.stderr
    assert IN_CLUSTER_ERROR not in r.stderr


def test_without_a_cluster_the_in_cluster_error_comes_last(tmp_path: Path) -> None:
    r = drakit_run(tmp_path, "--discovery", "example")
    assert r.returncode == 1
    assert "in-cluster config" in r.stderr and IN_CLUSTER_ERROR in r.stderr


def test_one_line_per_failed_api_attempt(tmp_path: Path) -> None:
    """An API server that refuses connections: drakit's own lines only, no urllib3
    'Retrying (…)' warnings."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "drakit.plugin.ops.cli", "run", "--driver-name", "gpu.example.com",
         "--node-name", "node-1", "--discovery", "example", "--kubeconfig", str(kubeconfig),
         "--kubelet-registrar-directory-path", str(tmp_path / "registry"),
         "--kubelet-plugins-directory-path", str(tmp_path / "plugins"),
         "--cdi-root", str(tmp_path / "cdi"), "--resync-seconds", "1"],
        stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()

    def failed() -> list[str]:
        return [line for line in list(lines) if f"127.0.0.1:{port}" in line
                or "Connection refused" in line]

    try:
        # until several attempts have failed (the start-up alone takes seconds on a loaded
        # machine): bounded, no fixed sleep
        deadline = time.monotonic() + 120
        while len(failed()) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=30)
    err = "".join(lines)
    assert "Retrying" not in err, err
    assert len(failed()) >= 4, (proc.returncode, err)  # drakit says the API is unreachable


def test_zero_devices_under_a_non_default_sysfs_root_warns(
    harness_factory: Callable[..., DriverHarness], tmp_path: Path,
    caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    with caplog.at_level(logging.WARNING, logger="drakit.plugin.ops.app"):
        harness_factory(discovery=["pci"], settings={"sysfs_root": tmp_path / "nosuch"})
    assert any("found 0 devices under --sysfs-root" in r.getMessage()
               and "no such directory" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("source,exception", [
    ("raise RuntimeError('no licence for the ACME card')\n",
     "RuntimeError: no licence for the ACME card"),
    ("def broken(:\n", "SyntaxError: invalid syntax"),
    ("import acme_missing_sdk\n", "ModuleNotFoundError: No module named 'acme_missing_sdk'"),
])
def test_a_plugin_failing_at_import_is_one_line_and_exit_2(
    tmp_path: Path, source: str, exception: str
) -> None:
    """RuntimeError, SyntaxError and ImportError alike: exit 2 and one line on stderr
    naming the plugin, the module and the exception, no traceback."""
    (tmp_path / "acme_broken_plugin.py").write_text(source)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env_path}" if env_path else str(tmp_path)
    try:
        r = drakit_run(tmp_path, "--discovery", "acme_broken_plugin:AcmeDiscovery")
    finally:
        if env_path:
            os.environ["PYTHONPATH"] = env_path
        else:
            del os.environ["PYTHONPATH"]
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    [line] = lines
    assert "discovery plugin 'acme_broken_plugin:AcmeDiscovery'" in line
    assert "module acme_broken_plugin" in line and exception in line
    assert "Traceback" not in r.stderr


def known_plugins(line: str) -> set[str]:
    return set(line.split("known plugins: ", 1)[1].split(")", 1)[0].split(", "))


def test_a_config_section_for_no_loaded_plugin_is_refused_under_strict(tmp_path: Path) -> None:
    path = config(tmp_path, "discovery:\n  exmaple:\n    nosuchOption: 1\n")
    r = drakit_run(tmp_path, "--discovery", "example", "--config", path, "--strict")
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert f"--config {path}: discovery.exmaple is not a loaded plugin (loaded: example; " \
           "did you mean discovery.example?; known plugins: " in line, line
    assert known_plugins(line) >= {"example", "net", "pci"}, line
    assert line.endswith("(refused: --strict)"), line
    assert IN_CLUSTER_ERROR not in r.stderr


def test_a_config_section_for_no_loaded_plugin_warns_naming_the_known_ones(
    tmp_path: Path
) -> None:
    path = config(tmp_path, "discovery:\n  exmaple: {}\n")
    r = drakit_run(tmp_path, "--discovery", "example", "--config", path)
    assert r.returncode == 1, r.stderr  # goes on: here to the missing in-cluster config
    [warning] = [line for line in r.stderr.splitlines() if " WARNING " in line]
    assert "discovery.exmaple is not a loaded plugin (loaded: example; did you mean " \
           "discovery.example?; known plugins: " in warning, warning
    assert known_plugins(warning) >= {"example", "net", "pci"}, warning
    assert IN_CLUSTER_ERROR in r.stderr


EXAMPLE_SPEC = "drakit.discovery.builtin.example:ExampleDiscovery"


@pytest.mark.parametrize("strict", [False, True])
def test_a_config_section_keyed_by_module_class_names_the_key_to_use(
    tmp_path: Path, strict: bool
) -> None:
    """``--discovery mod:Class`` loads a plugin that reads ``discovery.<its name>``: a
    section keyed by the ``mod:Class`` string is read by nothing and said so."""
    path = config(tmp_path, f'discovery:\n  "{EXAMPLE_SPEC}":\n    generate: {{count: 3}}\n')
    r = drakit_run(tmp_path, "--discovery", EXAMPLE_SPEC, "--config", path,
                   *(["--strict"] if strict else []))
    expected = (f"--config {path}: discovery.{EXAMPLE_SPEC} is not a loaded plugin's name: "
                f"the plugin of --discovery {EXAMPLE_SPEC} reads its options from "
                "discovery.example (loaded: example)")
    if strict:
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip() == f"drakit run: error: {expected} (refused: --strict)"
    else:
        assert r.returncode == 1, r.stderr  # goes on: here to the missing in-cluster config
        [warning] = [line for line in r.stderr.splitlines() if " WARNING " in line]
        assert f"{expected}; its options are ignored" in warning, warning
