"""The wheel's only top-level import package is ``drakit`` (#17): a vendor's
own ``plugin.py`` or ``plugin/`` folder neither breaks drakit nor merges with it, and no drakit
module imports the old top-level names (which would load a second copy of a module)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OLD = ("plugin", "discovery", "cdi")


def test_a_vendors_plugin_module_and_folders_in_the_cwd_change_nothing(tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text("VENDOR = 'module'\n")
    for name in ("discovery", "cdi"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"VENDOR = {name!r}\n")
    (tmp_path / "cdi" / "spec.py").write_text("VENDOR = 'spec'\n")
    code = (
        "import plugin, discovery, cdi\n"
        "from drakit.plugin.testing import DriverHarness\n"
        "from drakit.discovery import DiscoveryPlugin\n"
        "from drakit.cdi.spec import ContainerEdits\n"
        "import drakit.cdi.spec, drakit.plugin\n"
        "assert plugin.VENDOR == 'module' and discovery.VENDOR == 'discovery'\n"
        "assert cdi.VENDOR == 'cdi' and not hasattr(cdi, 'SpecStore')\n"
        "assert not hasattr(drakit.cdi.spec, 'VENDOR')\n"
        "cwd = __import__('os').getcwd()\n"
        "assert not any(p.startswith(cwd) for p in drakit.plugin.__path__)\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def _python_files() -> list[Path]:
    dirs = ("plugin", "discovery", "cdi", "tests", "bench", "examples", "scripts")
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py")
                  if "_proto" not in p.parts and "__pycache__" not in p.parts)


def test_no_module_imports_an_old_top_level_name() -> None:
    found = []
    files = _python_files()
    assert len(files) > 100
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names
                      if n.split(".")[0] in OLD]
    assert found == []


@pytest.mark.slow
def test_the_wheels_only_top_level_package_is_drakit(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
         str(REPO)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [wheel] = tmp_path.glob("drakit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"drakit"}
    assert "drakit/plugin/ops/cli.py" in names and "drakit/plugin/_proto/dra/v1/api_pb2.py" in names
    assert "drakit/discovery/builtin/example-devices.yaml" in names
    assert "drakit/cdi/py.typed" in names and "drakit/py.typed" in names
