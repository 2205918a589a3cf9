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
