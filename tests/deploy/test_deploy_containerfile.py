"""Static checks of deploy/Containerfile: a multi-stage build whose final stage is the
root filesystem the ``rootfs`` stage made, flattened onto ``scratch``, with no compiler or
build tool, no package installation, and an unprivileged default user; and of the one
definition of the image's content (deploy/image/: packages.txt, requirements.txt,
install.sh) that the Containerfile and deploy/image/build.sh share.

The image itself is built and run by tests/deploy/test_deploy_image.py (podman).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deploy_helpers import CONTAINERFILE, REPO

IMAGE_DIR = REPO / "deploy" / "image"

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
    if final.base != "scratch":
        problems.append(f"final base {final.base} is not scratch (the rootfs stage only)")
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


def test_wheels_stage_builds_drakit_and_downloads_the_pinned_requirements() -> None:
    _, stages = parse(CONTAINERFILE.read_text())
    wheels = stages[0]
    assert wheels.name == "wheels"
    run = " ".join(rest for op, rest in wheels.instructions if op == "RUN")
    assert "pip wheel --quiet --no-deps --wheel-dir /wheels /src" in run
    assert "pip download" in run and "--only-binary=:all:" in run
    assert "-r /src/deploy/image/requirements.txt pip" in run
    copies = [rest for op, rest in wheels.instructions if op == "COPY"]
    # src/drakit holds the links that make plugin/, discovery/, cdi/ and allocator/ the
    # drakit.* packages: without it the wheel has no drakit package at all
    for source in ("pyproject.toml", "cdi", "discovery", "plugin", "allocator", "src",
                   "deploy/image/requirements.txt"):
        assert any(source in c for c in copies), f"wheels stage does not copy {source}"
        assert (REPO / source).exists()


def test_rootfs_stage_is_install_sh_on_the_debian_base() -> None:
    args, stages = parse(CONTAINERFILE.read_text())
    assert args["DEBIAN_IMAGE"] == "docker.io/library/debian:bookworm-slim"
    rootfs = next(s for s in stages if s.name == "rootfs")
    assert rootfs.base == args["DEBIAN_IMAGE"]
    ops = rootfs.instructions
    assert ("COPY", "deploy/image/packages.txt deploy/image/requirements.txt "
            "deploy/image/install.sh /tmp/image/") in ops
    assert ("COPY", "--from=wheels /wheels /tmp/wheels") in ops
    assert ("COPY", "--from=wheels /sbom-wheels /tmp/sbom-wheels") in ops
    run = [" ".join(rest.split()) for op, rest in ops if op == "RUN"]
    assert run == ["/tmp/image/install.sh /tmp/wheels "
                   "&& cp /tmp/wheels/pip-*.whl /tmp/sbom-wheels/ "
                   "&& /tmp/image/sbom.sh /tmp/sbom-wheels /tmp/image/pyproject.toml "
                   "/opt/drakit/sbom.cdx.json "
                   "&& rm -rf /tmp/image /tmp/wheels /tmp/sbom-wheels"]


def test_final_stage_has_the_oci_labels_and_names_the_sbom() -> None:
    """version, revision, source and created come from build arguments, which build.sh
    sets (pyproject's version, the git commit, the origin URL, the build time)."""
    _, stages = parse(CONTAINERFILE.read_text())
    final = stages[-1]
    label = next(rest for op, rest in final.instructions if op == "LABEL")
    labels = dict(shlex.split(x)[0].split("=", 1) for x in re.findall(r'[\w.]+="[^"]*"', label))
    args = {rest.split("=")[0] for op, rest in final.instructions if op == "ARG"}
    for key, arg in (("version", "VERSION"), ("revision", "REVISION"), ("source", "SOURCE"),
                     ("created", "CREATED")):
        assert labels[f"org.opencontainers.image.{key}"] == "${" + arg + "}"
        assert arg in args
    assert labels["io.drakit.sbom"] == "/opt/drakit/sbom.cdx.json"
    build = (IMAGE_DIR / "build.sh").read_text()
    for arg in ("VERSION", "REVISION", "SOURCE", "CREATED", "SOURCE_DATE_EPOCH"):
        assert f"--build-arg {arg}=" in build, arg
    assert 'podman cp "$cid:/opt/drakit/sbom.cdx.json" "$out"' in build  # beside the image


def test_sbom_sh_describes_a_python_environment(tmp_path: Path) -> None:
    """deploy/image/sbom.sh on this test's own environment (the generator installed here, as
    $CYCLONEDX_PY): a CycloneDX 1.6 JSON document whose main component is drakit and whose
    components are the environment's distributions at their installed versions."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    from importlib.metadata import version

    tool = shutil.which("cyclonedx-py", path=str(Path(sys.executable).parent))
    if tool is None:
        pytest.skip("cyclonedx-bom is not installed (pip install -e '.[dev]')")
    out = tmp_path / "sbom" / "drakit.cdx.json"
    r = subprocess.run(["sh", str(IMAGE_DIR / "sbom.sh"), str(tmp_path / "no-wheels"),
                        str(REPO / "pyproject.toml"), str(out), sys.executable],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "CYCLONEDX_PY": tool, "SOURCE_DATE_EPOCH": "1700000000"})
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    assert doc["metadata"]["component"]["name"] == "drakit"
    assert doc["metadata"]["timestamp"].startswith("2023-11-14")
    from packaging.utils import canonicalize_name

    components = {canonicalize_name(c["name"]): c for c in doc["components"]}
    for dist in ("grpcio", "pydantic", "kubernetes", "prometheus-client"):
        assert components[dist]["version"] == version(dist), dist
        assert canonicalize_name(components[dist]["purl"].split("/")[1].split("@")[0]) == dist
    assert not list(out.parent.glob("*.tmp"))


def test_final_stage_runs_drakit_unprivileged_from_the_rootfs_only() -> None:
    _, stages = parse(CONTAINERFILE.read_text())
    final = stages[-1]
    ops = dict(final.instructions)
    assert ops["USER"] == "65532:65532"
    assert ops["ENTRYPOINT"] == '["drakit"]'
    assert ops["CMD"] == '["run"]'
    assert ops["ENV"].startswith("PATH=/opt/drakit/bin:")
    assert not [rest for op, rest in final.instructions if op == "RUN"]
    assert [rest for op, rest in final.instructions if op == "COPY"] == ["--from=rootfs / /"]


def test_one_package_list_for_the_containerfile_and_build_sh() -> None:
    """build.sh's debootstrap includes packages.txt and builds the Containerfile; install.sh
    (the rootfs stage) installs what packages.txt and requirements.txt name."""
    build = (IMAGE_DIR / "build.sh").read_text()
    install = (IMAGE_DIR / "install.sh").read_text()
    assert '--include="$(packages | paste -sd,)"' in build
    assert "-f deploy/Containerfile" in build and "--pull=never" in build
    assert '"$here/packages.txt"' in install and '"$here/requirements.txt"' in install
    packages = [line.split()[0] for line in (IMAGE_DIR / "packages.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert "python3" in packages and "libudev1" in packages
    assert not [p for p in packages if BUILD_TOOLS.search(p)], packages


def test_build_sh_image_key_covers_every_source_the_containerfile_copies() -> None:
    """build.sh reuses an image whose tag (the hash of its inputs) exists: every folder the
    Containerfile's stages COPY from the checkout must be in that hash, or a change there
    (e.g. to allocator/, which `drakit explain` runs) leaves the old image in place."""
    build = (IMAGE_DIR / "build.sh").read_text()
    find = re.search(r"^\s*find ([\w ]+?) -type f", build, re.M)
    assert find, "build.sh: no `find DIRS -type f` in the image key"
    hashed = set(find.group(1).split())
    _, stages = parse(CONTAINERFILE.read_text())
    copied: set[str] = set()
    for stage in stages:
        for op, rest in stage.instructions:
            if op == "COPY" and not rest.startswith("--from"):
                copied.update(s for s in rest.split()[:-1] if (REPO / s).is_dir())
    assert copied >= {"plugin", "allocator", "src"}, copied
    assert copied <= hashed, f"build.sh's image key leaves out {sorted(copied - hashed)}"


def test_requirements_pin_every_dependency_of_pyproject() -> None:
    """requirements.txt pins (==) each of pyproject.toml's dependencies, and each of its
    ``explain`` extra (the CEL runtime of ``drakit explain``, which an operator runs in the
    DaemonSet's container), at a version its specifier allows (the rest of the closure is
    checked by `pip check` in install.sh)."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (IMAGE_DIR / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            assert pinned, f"requirements.txt: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = pinned.strip()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    explain = project["optional-dependencies"]["explain"]
    assert any(canonicalize_name(Requirement(d).name) == "cel-expr-python" for d in explain)
    for dep in [*project["dependencies"], *explain]:
        req = Requirement(dep)
        name = canonicalize_name(req.name)
        assert name in pins, f"requirements.txt does not pin {req.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements.txt pins {req.name}=={pins[name]}, outside {req.specifier}")


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


def test_checker_catches_a_final_stage_on_a_full_base() -> None:
    text = CONTAINERFILE.read_text().replace("FROM scratch", "FROM ${DEBIAN_IMAGE}")
    assert any("is not scratch" in p for p in final_stage_problems(text))
