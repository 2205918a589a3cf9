"""Every code block of the documentation site's guides runs (docs/*.md).

The Python blocks of one page run in order as one module, the way a reader copies them
into one file; then every ``test_*`` function the page defines is called (with a fresh
``tmp_path`` when it takes one), as pytest would. A ``pyproject.toml`` block's
``drakit.discovery`` entry points are registered for the page's module, so the page can
name its plugins the way a vendor's package does. YAML, JSON and TOML blocks must parse.
A block whose first line is ``# illustrative`` is not run (keep them few), nor is a script
whose first lines say ``(run by tests/...)``: that test runs it.

The page's blocks are in the module as ``PAGE_BLOCKS`` (language → texts), for a test on
the page that compares what it shows with what drakit does.
"""

from __future__ import annotations

import importlib
import inspect
import json
import linecache
import re
import sys
import textwrap
import tomllib
import types
from pathlib import Path

import pytest
import yaml

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
PAGES = sorted(p for p in DOCS.glob("*.md"))


def blocks(page: Path) -> list[tuple[str, str]]:
    return [(lang, textwrap.dedent(body)) for lang, body in FENCE.findall(page.read_text())]


def skipped(block: str) -> bool:
    head = block.lstrip().splitlines()[:3]
    return bool(head) and (head[0].startswith("# illustrative")
                           or any(line.startswith("# (run by tests/") for line in head))


def register_entry_points(page_blocks: list[tuple[str, str]], module: str,
                          site: Path) -> None:
    """A dist-info on ``sys.path`` mapping the page's entry points to ``module``."""
    lines = []
    for lang, body in page_blocks:
        if lang != "toml":
            continue
        doc = tomllib.loads(body)
        eps = doc.get("project", {}).get("entry-points", {}).get("drakit.discovery", {})
        for name, target in eps.items():
            lines.append(f"{name} = {module}:{target.split(':', 1)[1]}")
    if not lines:
        return
    dist = site / f"{module}-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text("[drakit.discovery]\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_code_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page_blocks = blocks(page)
    for lang, body in page_blocks:
        if lang == "yaml":
            list(yaml.safe_load_all(body))
        elif lang == "json":  # one document, or JSON lines (a log excerpt)
            try:
                json.loads(body)
            except json.JSONDecodeError:
                for line in filter(None, body.splitlines()):
                    json.loads(line)
        elif lang == "toml":
            tomllib.loads(body)
    python = [b for lang, b in page_blocks if lang == "python" and not skipped(b)]
    if not python:
        return
    name = "drakit_docs_" + re.sub(r"\W", "_", page.stem)
    module = types.ModuleType(name)
    module.__dict__["PAGE_BLOCKS"] = {
        lang: [b for k, b in page_blocks if k == lang] for lang, _ in page_blocks}
    monkeypatch.setitem(sys.modules, name, module)
    register_entry_points(page_blocks, name, tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    for i, body in enumerate(python):
        filename = f"{page.name}[python block {i + 1}]"
        linecache.cache[filename] = (len(body), None, body.splitlines(True), filename)
        exec(compile(body, filename, "exec"), module.__dict__)
    tests = [(k, v) for k, v in module.__dict__.items()
             if k.startswith("test_") and inspect.isfunction(v) and v.__module__ == name]
    for test_name, fn in tests:
        kwargs = {}
        if "tmp_path" in inspect.signature(fn).parameters:
            kwargs["tmp_path"] = tmp_path / test_name
            kwargs["tmp_path"].mkdir()
        fn(**kwargs)


def test_the_runner_skips_only_marked_blocks() -> None:
    sample = "```python\n# illustrative: not run\nraise SystemExit\n```\n"
    [(lang, body)] = FENCE.findall(sample)
    assert lang == "python" and skipped(body)
    assert skipped("# make_claim.py KUBECONFIG\n# (run by tests/integration/x.py)\nimport sys\n")
    assert not skipped("import sys\n# illustrative\n")
