"""The node agent never loads the allocator or a CEL runtime: ``drakit run`` idles at the same
RSS with and without ``drakit[explain]`` installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from drakit.plugin.testing.harness import DriverHarness

FORBIDDEN = ("drakit.allocator", "cel_expr_python", "celpy")


def test_agent_in_process_import_closure(tmp_path: Path) -> None:
    """A fresh interpreter starts the agent (and publishes its slices) in-process: none of the
    forbidden modules is imported."""
    script = textwrap.dedent(f"""
        import sys
        from drakit.plugin.testing.harness import DriverHarness
        with DriverHarness({str(tmp_path / "h")!r}) as h:
            h.wait_for(h.pools_complete, 60, "slices published")
            bad = [m for m in sys.modules if m.split(".")[0] in ("cel_expr_python", "celpy")
                   or m == "drakit.allocator" or m.startswith("drakit.allocator.")]
        print("FORBIDDEN", sorted(bad))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=180, check=True).stdout
    assert "FORBIDDEN []" in out, out


def test_drakit_run_maps_no_cel_runtime(tmp_path: Path) -> None:
    """The real ``drakit run`` process has no shared object of the CEL runtime mapped."""
    with DriverHarness(tmp_path / "s", subprocess=True) as h:
        h.wait_for(h.pools_complete, 60, "slices published")
        assert h.process is not None
        maps = Path(f"/proc/{h.process.pid}/maps").read_text()
    assert "cel_expr_python" not in maps
    assert "drakit/allocator" not in maps
