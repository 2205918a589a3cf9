"""Every reference a reader can follow: docstrings and comments cite public sources (an API
field and its Kubernetes version, a KEP, a CDI spec version, a path in k8s.io/kubernetes),
never files outside the repository (``../shared``, a fact sheet) or "§" sections of them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("plugin", "discovery", "cdi", "tests", "bench", "scripts", "examples", "proto",
           "docs")
SUFFIXES = {".py", ".proto", ".md", ".sh", ".yaml", ".yml", ".toml"}
FORBIDDEN = re.compile(
    r"§|\.\./shared|shared/(reference|design|recipes|README)|/work/shared|fact sheet"
    r"|resource-api-validation\.md|kubelet-wire-protocol\.md|existing-drivers\.md"
    r"|real-control-plane\.md|podman-cdi\.md|udev-hotplug\.md", re.IGNORECASE)
# Code, not citations: the CDI schema is read from beside the checkout until the repository
# carries its own copy (then these lines go, and so do these entries).
ALLOWED = {
    ("tests/cdi/conftest.py", "shared/reference/cdi-schema (beside the repo clone)"),
    ("tests/cdi/conftest.py", "(shared/ must sit beside the repo)"),
    ("tests/integration/conftest.py", "(shared/ must sit beside the repo)"),
}
THIS = Path(__file__).resolve()


def offending_lines() -> list[str]:
    found = []
    files = [ROOT / "README.md", ROOT / "mkdocs.yml"]
    for top in SCANNED:
        files.extend(p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES)
    for path in files:
        if not path.is_file() or path.resolve() == THIS or "/build/" in str(path) \
                or "/.venv" in str(path) or "/site/" in str(path):
            continue
        rel = str(path.relative_to(ROOT))
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line) and not any(
                    rel == f and text in line for f, text in ALLOWED):
                found.append(f"{rel}:{n}: {line.strip()}")
    return found


def test_no_citation_of_files_outside_the_repository() -> None:
    assert offending_lines() == []


def test_the_check_finds_a_citation_coming_back(tmp_path: Path) -> None:
    for line in ("see shared/reference/cdi.md §3.7", "(fact sheet §4.5)",
                 "(../shared/design.md)"):
        assert FORBIDDEN.search(line), line
    assert not FORBIDDEN.search("KEP-4815, resource.k8s.io/v1 in Kubernetes 1.34")
