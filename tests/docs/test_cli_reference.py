"""The command-line reference (docs/cli.md) lists every flag of ``drakit run`` as the parser
defines it: its spellings, its environment variable and its default, and no flag the
parser does not have."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from drakit.plugin.ops.config import add_run_arguments

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _run_parser(monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    probe = argparse.ArgumentParser(add_help=False)
    add_run_arguments(probe)
    for action in probe._actions:  # the defaults as documented: no variable set
        env = re.search(r"\[([A-Z_]+)\]$", action.help or "")
        if env:
            monkeypatch.delenv(env.group(1), raising=False)
    add_run_arguments(parser)
    return parser


def _doc_rows() -> dict[str, list[str]]:
    """The ``drakit run`` table: first flag → cells (flags, environment, default, what)."""
    section = PAGE.read_text().split("## drakit run", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `-"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[re.findall(r"`([^`]+)`", cells[0])[0]] = cells
    return rows


def _default(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if action.default is None:
        return "unset"
    return f"`{action.default}`"


def test_every_run_flag_is_in_the_reference_with_its_variable_and_default(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _doc_rows()
    parser = _run_parser(monkeypatch)
    flags = [a for a in parser._actions if a.option_strings]
    assert "--sysfs-root" in {s for a in flags for s in a.option_strings}
    for action in flags:
        cells = rows.pop(action.option_strings[0], None)
        assert cells is not None, f"docs/cli.md: no row for {action.option_strings[0]}"
        spelled, env, default, what = cells
        assert re.findall(r"`([^`]+)`", spelled) == action.option_strings, spelled
        env_var = re.search(r"\[([A-Z_]+)\]$", action.help or "")
        assert env_var is not None, action.option_strings
        assert env == f"`{env_var.group(1)}`", (action.option_strings, env)
        assert default.split(" (")[0] == _default(action), (action.option_strings, default)
        assert what
    assert not rows, f"docs/cli.md lists flags drakit run does not have: {sorted(rows)}"


def test_the_reference_is_in_the_site_navigation() -> None:
    mkdocs = (PAGE.parents[1] / "mkdocs.yml").read_text()
    assert re.search(r"^  - .*: cli\.md$", mkdocs, re.M)
