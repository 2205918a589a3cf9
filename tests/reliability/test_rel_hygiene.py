"""File and socket hygiene: modes, ownership, no temp files after failures, no shell.

- The plugin data dir (DRA socket, checkpoint) can be entered by root only (no "other"
  bits; an existing looser dir is tightened); sockets are 0660; the checkpoint and its
  lock 0600; CDI specs 0644 in a 0755 directory.
- atomic writes leave no temp file behind, whatever fails (fsync, rename, an interrupt).
- No shell: nothing in plugin/, discovery/, cdi/ calls os.system/os.popen, passes
  shell=True, hands subprocess a command string, evals, or loads YAML/pickle unsafely.
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest
from reliability_helpers import tree

from drakit.cdi.atomic import atomic_write
from drakit.cdi.errors import SpecConflictError
from drakit.cdi.hostnodes import HostNodes
from drakit.cdi.spec import ContainerEdits, Device, DeviceNode
from drakit.cdi.store import SpecStore
from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointError, ClaimRecord
from drakit.plugin.testing.harness import DriverHarness

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("plugin", "discovery", "cdi")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_modes_of_a_running_agent(agent: DriverHarness) -> None:
    h = agent
    claim = h.allocate("hygiene", [h.devices()[3]])
    assert not h.prepare(claim)[claim["metadata"]["uid"]].error
    try:
        data_dir = h.data_dir
        assert _mode(data_dir) & 0o007 == 0, oct(_mode(data_dir))
        assert _mode(data_dir) & 0o020 == 0
        if os.geteuid() == 0:
            assert data_dir.stat().st_uid == 0
        for sock in (h.app.server.paths.dra, h.app.server.paths.registration):
            assert stat.S_ISSOCK(sock.lstat().st_mode)
            assert _mode(sock) == 0o660, (sock, oct(_mode(sock)))
        assert _mode(h.checkpoint_path) == 0o600
        for lock in data_dir.rglob("*.lock"):
            assert _mode(lock) & 0o077 == 0, (lock, oct(_mode(lock)))
        specs = h.cdi_files()
        assert specs and all(_mode(p) == 0o644 for p in specs)
    finally:
        assert h.unprepare(claim) == {claim["metadata"]["uid"]: ""}


def test_existing_data_dir_is_tightened(tmp_path: Path) -> None:
    data_dir = tmp_path / "h" / "plugins" / "drakit.example.com"
    data_dir.mkdir(parents=True)
    data_dir.chmod(0o777)  # e.g. made by hand, or a too-open hostPath
    with DriverHarness(tmp_path / "h"):
        assert _mode(data_dir) == 0o750


def test_cdi_dir_created_0755_and_specs_0644(tmp_path: Path) -> None:
    store = SpecStore(tmp_path / "new" / "cdi", "drakit.example.com", "device", host_root=None)
    store.write("u1", [Device(name="d", container_edits=ContainerEdits(env=["A=1"]))])
    assert _mode(tmp_path / "new" / "cdi") == 0o755
    assert _mode(store.path_for("u1")) == 0o644


def test_checkpoint_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        cp = Checkpoint(tmp_path / "d" / "checkpoint.json")
        cp.load()
        rec = ClaimRecord(uid="u", namespace="n", name="x")
        cp.change(lambda s: s.claims.__setitem__("u", rec))
    finally:
        os.umask(old)
    assert _mode(tmp_path / "d" / "checkpoint.json") == 0o600


# -- no temp files after failures -----------------------------------------------------------

@pytest.mark.parametrize("fail", ["fsync", "replace", "interrupt", "write"])
def test_atomic_write_leaves_no_temp_file(tmp_path: Path, fail: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "file.json"
    target.write_bytes(b"old")
    err: BaseException = KeyboardInterrupt() if fail == "interrupt" else OSError(5, "EIO")

    def boom(*_a: object, **_k: object) -> None:
        raise err

    monkeypatch.setattr(os, {"fsync": "fsync", "replace": "replace", "interrupt": "fsync",
                             "write": "write"}[fail], boom)
    with pytest.raises(type(err)):
        atomic_write(target, b"new" * 1000)
    monkeypatch.undo()
    assert tree(tmp_path) == {"file.json"}
    assert target.read_bytes() == b"old"


def test_checkpoint_write_failure_leaves_no_temp_file(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.load()
    (tmp_path / "checkpoint.json").mkdir()  # rename onto a directory fails
    with pytest.raises(CheckpointError):
        rec = ClaimRecord(uid="u", namespace="n", name="x")
        cp.change(lambda s: s.claims.__setitem__("u", rec))
    assert not [p for p in tree(tmp_path) if p.endswith(".tmp")]


def test_cdi_conflict_and_bad_node_leave_no_temp_file(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, "drakit.example.com", "device", host_root=tmp_path / "host")
    dev = Device(name="same", container_edits=ContainerEdits(env=["A=1"]))
    store.write("a", [dev])
    with pytest.raises(SpecConflictError):
        store.write("b", [dev])
    bad = Device(name="n", container_edits=ContainerEdits(
        device_nodes=[DeviceNode(path="/dev/\x00evil")]))
    with pytest.raises(Exception) as info:
        store.write("c", [bad])
    assert "deviceNodes[0]" in str(info.value)
    assert tree(tmp_path) == {"drakit.example.com-device_a.json"}


def test_host_node_lookup_stays_below_host_root(tmp_path: Path) -> None:
    nodes = HostNodes(tmp_path / "host")
    assert nodes.local_path("/../../../etc/shadow") == tmp_path / "host" / "etc" / "shadow"
    assert nodes.local_path("dev/../../x") == tmp_path / "host" / "x"


# -- no shell ---------------------------------------------------------------------------------

def _python_files() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (REPO / d).rglob("*.py")
                  if "_proto" not in p.parts)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_string_expr(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _is_string_expr(node.left) or _is_string_expr(node.right)
    return isinstance(node, ast.Call) and _dotted(node.func).endswith(".format")


FORBIDDEN_CALLS = {"os.system", "os.popen", "eval", "exec", "pickle.loads", "pickle.load",
                   "yaml.load", "yaml.unsafe_load", "subprocess.getoutput",
                   "subprocess.getstatusoutput", "commands.getoutput"}
SUBPROCESS_CALLS = {"subprocess.run", "subprocess.Popen", "subprocess.call",
                    "subprocess.check_call", "subprocess.check_output"}


def shell_findings(source: str, filename: str) -> list[str]:
    """Shell-ish calls in ``source``: forbidden functions, shell=True, a command string."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        where = f"{filename}:{node.lineno}"
        if name in FORBIDDEN_CALLS or name.startswith(("os.exec", "os.spawn")):
            found.append(f"{where}: {name}()")
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                          and kw.value.value is False):
                found.append(f"{where}: {name}(shell=...)")
        if name in SUBPROCESS_CALLS and node.args and _is_string_expr(node.args[0]):
            found.append(f"{where}: {name}() with a command string")
    return found


def test_the_shell_check_catches_what_it_should() -> None:
    bad = ("import os, subprocess\nos.system('x')\nsubprocess.run(f'ls {p}', shell=True)\n"
           "subprocess.Popen('ls ' + p)\neval(s)\nos.execv('/bin/sh', [])\n")
    assert [f.split(": ", 1)[0] for f in shell_findings(bad, "bad.py")] == [
        "bad.py:2", "bad.py:3", "bad.py:3", "bad.py:4", "bad.py:5", "bad.py:6"]
    good = "import subprocess\nsubprocess.run(['podman', 'run', image], check=True)\n"
    assert shell_findings(good, "good.py") == []


def test_no_shell_commands_built_from_input() -> None:
    files = _python_files()
    assert len(files) > 30
    findings = [f for p in files
                for f in shell_findings(p.read_text(), str(p.relative_to(REPO)))]
    assert findings == []
