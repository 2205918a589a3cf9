"""The README's vendor example runs as written: the plugin class publishes through the real
agent and its test snippet passes against the harness."""

from __future__ import annotations

import re
import sys
import textwrap
import types
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return [textwrap.dedent(b) for b in
            re.findall(r"```python\n(.*?)```", README.read_text(), re.S)]


def test_readme_vendor_example(tmp_path: Path) -> None:
    plugin_src, test_src = python_blocks()[:2]
    module = types.ModuleType("readme_acme")
    exec(compile(plugin_src, "README.md[plugin]", "exec"), module.__dict__)
    sys.modules["readme_acme"] = module
    try:
        test_ns: dict[str, object] = {}
        # the README names the plugin by its entry point; here it is loaded as module:Class
        exec(compile(test_src.replace('["acme"]', '["readme_acme:AcmeDiscovery"]'),
                     "README.md[test]", "exec"), test_ns)
        test_ns["test_acme"](tmp_path)  # type: ignore[operator]
    finally:
        del sys.modules["readme_acme"]


def test_readme_plugin_example_passes_mypy_strict(tmp_path: Path) -> None:
    """The vendor example type-checks under ``mypy --strict`` with no project config (what a
    vendor's own CI would run). MYPYPATH points at this checkout because an editable install
    reaches drakit through an import hook mypy cannot follow; ``--follow-imports silent``
    then treats drakit as mypy treats an installed package (its types used, its own
    findings not reported)."""
    import os
    import subprocess

    plugin_src = python_blocks()[0]
    (tmp_path / "acme_plugin.py").write_text(plugin_src)
    env = {**os.environ, "MYPYPATH": str(README.parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", os.devnull,
         "--follow-imports", "silent", "--cache-dir", str(tmp_path / ".mypy_cache"),
         "acme_plugin.py"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found in 1 source file" in proc.stdout


def test_readme_links_and_make_targets_exist() -> None:
    """Every relative link of the README names a file of the repository, and every
    ``make X`` it shows is a target of the Makefile."""
    text = README.read_text()
    root = README.parent
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links, "the README links into the documentation site"
    for link in links:
        if "://" in link:
            continue
        assert (root / link).exists(), link
    makefile = (root / "Makefile").read_text()
    for target in set(re.findall(r"^make ([a-z-]+)", text, re.M)):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target}"
