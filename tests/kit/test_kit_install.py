"""One copy of every module: the checkout's top-level folders cannot be imported by their own
names (from the repository root they fail, naming ``drakit.``), and installing the checkout
(editable, as ``make install`` does) or building its wheel prints no setuptools warning."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}


@pytest.mark.parametrize("name", ["plugin", "plugin.testing", "plugin.testing.harness",
                                  "discovery", "cdi", "cdi.spec"])
def test_a_top_level_folder_imported_from_the_repository_root_fails_naming_drakit(
        name: str) -> None:
    top = name.split(".")[0]
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"ImportError: {top} is a folder of the drakit checkout" in proc.stderr
    assert f"import drakit.{top} instead" in proc.stderr


def test_from_the_repository_root_drakit_imports_one_copy() -> None:
    code = ("import sys, drakit.plugin.testing, drakit.cdi.spec\n"
            "from drakit.plugin.testing import DriverHarness\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in "
            "('plugin', 'discovery', 'cdi')], sorted(sys.modules)\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "ok", proc.stderr


def _pip(*args: str, cwd: Path, python: str = sys.executable) -> str:
    proc = subprocess.run([python, "-m", "pip", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_building_the_wheel_prints_no_warning(tmp_path: Path) -> None:
    out = _pip("wheel", "--no-deps", "-w", str(tmp_path), str(REPO), cwd=tmp_path)
    assert "warning" not in out.lower(), out
    (wheel,) = tmp_path.glob("drakit-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert {n.split("/")[0] for n in names if not n.startswith("drakit-")} == {"drakit"}
    assert "drakit/plugin/testing/__init__.py" in names
    assert "License-Expression: Apache-2.0" in metadata


@pytest.mark.slow
def test_an_editable_install_prints_no_warning_and_puts_only_drakit_on_the_path(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    python = str(venv / "bin" / "python")
    out = _pip("install", "--no-deps", "-e", str(REPO), cwd=tmp_path, python=python)
    assert "warning" not in out.lower(), out
    assert "same name" not in out.lower(), out
    probe = subprocess.run(
        [python, "-c", "import drakit, importlib.util as u; print(drakit.__path__[0]); "
                       "print(u.find_spec('plugin'), u.find_spec('tests'))"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    lines = probe.stdout.split()
    assert Path(lines[0]).resolve() == (REPO / "src" / "drakit").resolve(), probe.stderr
    assert lines[1:] == ["None", "None"]
