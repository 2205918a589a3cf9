"""``make test`` on a fresh clone builds every binary the suite's tiers look for: the
Makefile's K8S_COMPONENTS hold every component .ci/run builds (helm for the chart tests
included), and the CDI schema the schema checks need is a file of the repository."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _make_components() -> set[str]:
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(r"^K8S_COMPONENTS \?=(.*)$", text, re.M)
    assert match is not None
    return set(match.group(1).split())


def _ci_components() -> set[str]:
    text = (REPO / ".ci" / "run").read_text()
    match = re.search(r"scripts/build-k8s\.sh ([^)\"]*)", text)
    assert match is not None
    return set(shlex.split(match.group(1)))


def test_make_test_builds_what_ci_builds() -> None:
    assert "helm" in _make_components()
    assert _ci_components() <= _make_components()


def _make_var(name: str) -> str:
    match = re.search(rf"^{name} \?= *(.*)$", (REPO / "Makefile").read_text(), re.M)
    assert match is not None, f"Makefile: no {name} ?="
    return match.group(1).strip()


def test_make_test_runs_the_version_matrix_for_the_release_it_builds() -> None:
    """`make test` builds one release (K8S_VERSION, scripts/build-k8s.sh's default) and runs
    the version matrix for that one (DRAKIT_VERSIONS), so tests/versions skips nothing there;
    `make test-versions` builds and runs the whole matrix."""
    script = (REPO / "scripts" / "build-k8s.sh").read_text()
    default = re.search(r'^K8S_VERSION="\$\{K8S_VERSION:-([^}]+)\}"', script, re.M)
    assert default is not None
    assert _make_var("K8S_VERSION") == default.group(1)
    assert _make_var("DRAKIT_VERSIONS") == "$(K8S_VERSION)"
    assert default.group(1) in _make_var("MATRIX_VERSIONS").split()
    makefile = (REPO / "Makefile").read_text()
    assert 'DRAKIT_VERSIONS="$(DRAKIT_VERSIONS)" $(PY) -m pytest -q -ra' in makefile
    assert "K8S_VERSION=$(K8S_VERSION) scripts/build-k8s.sh $(K8S_COMPONENTS)" in makefile


def test_the_cdi_schema_is_carried_by_the_repository() -> None:
    for name in ("schema.json", "defs.json", "LICENSE", "PROVENANCE.md"):
        assert (REPO / "tests" / "data" / "cdi-schema" / name).is_file()
    for conftest in ("tests/cdi/conftest.py", "tests/integration/conftest.py",
                     "tests/reliability/test_rel_fuzz_cdi.py"):
        assert '"shared"' not in (REPO / conftest).read_text(), conftest


def test_make_wheel_builds_the_wheel_the_install_page_names(tmp_path: Path) -> None:
    """``make wheel`` (docs/index.md "Install") builds the wheel without a package index
    (the virtualenv's setuptools, no build isolation), named as the page names it, with the
    ``drakit`` command, the built-in plugins and the ``explain`` extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    name = f"drakit-{project['version']}-py3-none-any.whl"
    assert f"pip install 'dist/{name}[explain]'" in (REPO / "docs" / "index.md").read_text()
    proc = subprocess.run(["make", "-o", "install", "wheel", f"PY={sys.executable}",
                           f"DIST={tmp_path}"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]
    with zipfile.ZipFile(tmp_path / name) as z:
        info = f"drakit-{project['version']}.dist-info"
        entry_points = z.read(f"{info}/entry_points.txt").decode()
        metadata = z.read(f"{info}/METADATA").decode()
        assert "drakit/plugin/ops/cli.py" in z.namelist()
    assert "drakit = drakit.plugin.ops.cli:main" in entry_points
    assert "[drakit.discovery]" in entry_points
    assert "Provides-Extra: explain" in metadata


def test_make_test_fast_runs_the_suite_without_the_real_tiers() -> None:
    """``make test-fast`` (README "Development") has a recipe: pytest over tests/ without
    the tiers that need real Kubernetes binaries and without podman."""
    proc = subprocess.run(["make", "-n", "test-fast"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [command] = [line for line in proc.stdout.splitlines() if "-m pytest" in line]
    args = shlex.split(command)
    assert {"--ignore=tests/real", "--ignore=tests/realnode", "--ignore=tests/versions"} \
        <= set(args)
    assert args[args.index("-m", args.index("pytest")) + 1] == "not podman"
    tiers = {p.name for p in (REPO / "tests").iterdir() if p.is_dir()}
    assert {"real", "realnode", "versions"} <= tiers
    assert "make test-fast" in (REPO / "README.md").read_text()
