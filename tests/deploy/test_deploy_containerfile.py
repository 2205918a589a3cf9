"""Static checks of deploy/Containerfile: a multi-stage build whose final stage is a slim
base plus the builder's virtual environment, with no compiler or build tool, no package
installation, and an unprivileged default user.

The image is not built here: the base image comes from a container registry this machine
cannot reach.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deploy_helpers import CONTAINERFILE, REPO

BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|cc|c\+\+|clang|make|cmake|ninja|build-essential|autoconf|automake|libtool|"
    r"pkg-config|[\w.+-]+-dev|[\w.+-]+-devel|python3-dev|cargo|rustc|go|golang)\b")
INSTALLERS = re.compile(
    r"\b(apt-get|apt|apk|dnf|yum|microdnf)\s+(install|add)\b|\bpip3?\s+(install|wheel|download)\b"
    r"|-m\s+pip\s+(install|wheel|download)\b|\bsetup\.py\b|\bpython3?\s+-m\s+build\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with line continuations joined and comments
    dropped. Raises ValueError for an instruction before the first FROM (other than ARG)."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]),
                          words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages:
            if op != "ARG":
                raise ValueError(f"{op} before the first FROM")
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip()
        else:
            stages[-1].instructions.append((op, rest))
    return args, stages


def final_stage_problems(text: str) -> list[str]:
    """What is wrong with the final stage (empty list: nothing)."""
    _, stages = parse(text)
    problems = []
    if len(stages) < 2:
        problems.append("not a multi-stage build")
    final = stages[-1]
    if not re.search(r"python:3\.11-slim", final.base):
        problems.append(f"final base {final.base} is not python:3.11-slim")
    names = {s.name for s in stages[:-1]}
    for op, rest in final.instructions:
        if op == "RUN":
            if INSTALLERS.search(rest):
                problems.append(f"final stage installs or builds packages: RUN {rest}")
            for command in re.split(r"&&|;|\|\|", rest):
                removing = re.search(r"\b(uninstall|remove|purge)\b", command)
                if not removing and BUILD_TOOLS.search(command.replace("--", " ")):
                    problems.append(f"final stage uses a build tool: {command.strip()}")
        if op in ("COPY", "ADD"):
            words = shlex.split(rest)
            sources = [w for w in words if w.startswith("--from=")]
            if not sources or sources[0].removeprefix("--from=") not in names:
                problems.append(f"final stage copies from outside the builder: {op} {rest}")
    return problems


def test_containerfile_final_stage_is_clean() -> None:
    assert final_stage_problems(CONTAINERFILE.read_text()) == []


def test_builder_builds_a_wheel_into_a_venv_without_pip() -> None:
    _, stages = parse(CONTAINERFILE.read_text())
    builder = stages[0]
    assert builder.name == "builder"
    run = " ".join(rest for op, rest in builder.instructions if op == "RUN")
    assert "pip wheel" in run and "venv --without-pip /opt/drakit" in run
    copies = [rest for op, rest in builder.instructions if op == "COPY"]
    for source in ("pyproject.toml", "cdi", "discovery", "plugin"):
        assert any(source in c for c in copies), f"builder does not copy {source}"
        assert (REPO / source).exists()


def test_final_stage_runs_drakit_unprivileged_and_strips_pip() -> None:
    _, stages = parse(CONTAINERFILE.read_text())
    final = stages[-1]
    ops = dict(final.instructions)
    assert ops["USER"] == "65532:65532"
    assert ops["ENTRYPOINT"] == '["drakit"]'
    assert ops["CMD"] == '["run"]'
    run = " ".join(rest for op, rest in final.instructions if op == "RUN")
    assert "pip uninstall --yes --quiet pip setuptools wheel" in run
    assert "drakit --help" in run  # the image proves it starts
    assert [rest for op, rest in final.instructions if op == "COPY"] == [
        "--from=builder /opt/drakit /opt/drakit"]


@pytest.mark.parametrize("bad", [
    "RUN apt-get update && apt-get install -y gcc",
    "RUN pip install grpcio",
    "RUN python -m pip install .",
    "RUN apt-get install -y --no-install-recommends libudev-dev",
    "COPY . /src",
    "RUN drakit --help && make install",
])
def test_checker_catches_a_dirty_final_stage(bad: str) -> None:
    text = CONTAINERFILE.read_text() + "\n" + bad + "\n"
    assert final_stage_problems(text), f"not caught: {bad}"


def test_checker_catches_a_full_python_base(tmp_path: Path) -> None:
    text = CONTAINERFILE.read_text().replace("python:3.11-slim-bookworm", "python:3.11-bookworm")
    assert any("not python:3.11-slim" in p for p in final_stage_problems(text))
