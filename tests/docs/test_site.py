"""The documentation site builds with no warning (what ``make docs`` runs:
``mkdocs build --strict``), into a temporary directory. Skips with the reason when the
``docs`` extra (mkdocs, mkdocstrings) is not installed; CI installs it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_without_warnings(tmp_path: Path) -> None:
    missing = [m for m in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python")
               if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[docs]'; "
                    "make docs installs it)")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    for page in ("index.html", "vendor-guide/index.html", "harness/index.html",
                 "go-helper/index.html", "reference/discovery/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    reference = (tmp_path / "site" / "reference/testing/index.html").read_text()
    assert "watch_health" in reference and "cdi_files" in reference
