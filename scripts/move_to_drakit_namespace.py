#!/usr/bin/env python3
"""Put drakit's import packages under one top-level name, ``drakit`` (issue #17). Idempotent.

Usage::

    python scripts/move_to_drakit_namespace.py          # apply (safe to run again)
    python scripts/move_to_drakit_namespace.py --check  # exit 1 when something is left to do

Layout afterwards: the top-level folders stay where they are (``proto/``, ``plugin/``,
``discovery/``, ``cdi/``, ``deploy/``, ``tests/``), and a folder ``drakit/`` holds
``__init__.py``, ``py.typed`` and three *relative symlinks* ``plugin -> ../plugin``,
``discovery -> ../discovery``, ``cdi -> ../cdi``. Every tool then sees one set of names:

- the wheel: setuptools' package finder follows the links (``include = ["drakit*"]``) and
  ``build_py`` copies the files, so the wheel's only top-level import package is ``drakit``
  (``drakit/plugin/...`` etc.; no symlink inside the wheel);
- an editable install: setuptools maps ``drakit`` to ``./drakit``; the links do the rest;
- mypy (``packages = ["drakit"]``), ruff (first party ``drakit``) and pytest (rootdir on
  ``sys.path``) read the same files under the same ``drakit.*`` names, and ``python -m
  drakit.plugin.cli`` works from the checkout;
- a vendor's own ``plugin.py`` or ``plugin/`` in the working directory is just their module:
  drakit never imports a top-level ``plugin``, ``discovery`` or ``cdi`` any more.

(The alternative, ``[tool.setuptools.package-dir]`` mapping ``drakit.plugin`` to ``plugin``,
builds the same wheel, but mypy cannot follow such a mapping from the checkout, and an
editable install would only work through setuptools' import hook.)

What the script changes:

1. creates ``drakit/__init__.py``, ``drakit/py.typed`` and the three links;
2. rewrites every reference to a drakit module in plugin/ discovery/ cdi/ tests/ bench/
   examples/ scripts/ deploy/ and the top-level docs and build files: ``from plugin.x
   import``, ``import cdi.y as z``, ``from discovery import``, and dotted names in strings,
   entry points, ``-m`` arguments, docstrings and Markdown (``plugin.testing.apiserver``,
   ``discovery.builtin.net:NetDiscovery``). A dotted name is rewritten only when it names a
   real module of the three packages, so ``discovery.net.naming`` (a config key) or
   ``cdi.k8s.io`` stay as they are;
3. pyproject.toml: packages.find, mypy ``packages``, ruff ``known-first-party``;
4. scripts/gen_proto.py: stubs are generated as ``drakit.plugin._proto.*`` (then
   regenerated: the serialized descriptors carry their file names, so they are not edited);
5. the Containerfile's builder copies ``drakit/`` too; README explains the layout;
6. adds tests/test_drakit_namespace.py (a vendor ``plugin.py``/``plugin/`` in the cwd, no
   top-level import left, the wheel's top-level names).

Refuses (exit 2, nothing written) when it finds ``import plugin.x`` without ``as`` (its uses
``plugin.x.f`` would need rewriting too) or a bare ``import plugin``.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOP = ("plugin", "discovery", "cdi")
REWRITE_DIRS = ("plugin", "discovery", "cdi", "tests", "bench", "examples", "scripts", "deploy")
REWRITE_FILES = ("README.md", "SECURITY.md", "Makefile", "pyproject.toml", ".ci/run")
SKIP_PARTS = {"_proto", "__pycache__", ".venv", ".venv-floor", ".mypy_cache", ".ruff_cache",
              ".pytest_cache", "build", "dist", ".hypothesis"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".sh", ".json",
                 ".pyi", ""}
THIS = Path(__file__).resolve()

INIT = '''"""drakit: a Python framework for Kubernetes DRA kubelet plugins.

The one top-level import package. Its subpackages live in the repository's top-level
folders (``drakit/plugin`` etc. are links to ``plugin/``, ``discovery/``, ``cdi/``):

- :mod:`drakit.discovery`: the device model and the interface a vendor implements;
- :mod:`drakit.cdi`: CDI spec model, versions, validation and store;
- :mod:`drakit.plugin`: the node agent (``drakit.plugin.testing``: the test kit).
"""
'''

NAMESPACE_TEST = '''"""The wheel's only top-level import package is ``drakit`` (#17): a vendor's
own ``plugin.py`` or ``plugin/`` folder neither breaks drakit nor merges with it, and no drakit
module imports the old top-level names (which would load a second copy of a module)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OLD = ("plugin", "discovery", "cdi")


def test_a_vendors_plugin_module_and_folders_in_the_cwd_change_nothing(tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text("VENDOR = 'module'\\n")
    for name in ("discovery", "cdi"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"VENDOR = {name!r}\\n")
    (tmp_path / "cdi" / "spec.py").write_text("VENDOR = 'spec'\\n")
    code = (
        "import plugin, discovery, cdi\\n"
        "from drakit.plugin.testing import DriverHarness\\n"
        "from drakit.discovery import DiscoveryPlugin\\n"
        "from drakit.cdi.spec import ContainerEdits\\n"
        "import drakit.cdi.spec, drakit.plugin\\n"
        "assert plugin.VENDOR == 'module' and discovery.VENDOR == 'discovery'\\n"
        "assert cdi.VENDOR == 'cdi' and not hasattr(cdi, 'SpecStore')\\n"
        "assert not hasattr(drakit.cdi.spec, 'VENDOR')\\n"
        "cwd = __import__('os').getcwd()\\n"
        "assert not any(p.startswith(cwd) for p in drakit.plugin.__path__)\\n"
        "print('ok')\\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def _python_files() -> list[Path]:
    dirs = ("plugin", "discovery", "cdi", "tests", "bench", "examples", "scripts")
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py")
                  if "_proto" not in p.parts and "__pycache__" not in p.parts)


def test_no_module_imports_an_old_top_level_name() -> None:
    found = []
    files = _python_files()
    assert len(files) > 100
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names
                      if n.split(".")[0] in OLD]
    assert found == []


@pytest.mark.slow
def test_the_wheels_only_top_level_package_is_drakit(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
         str(REPO)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [wheel] = tmp_path.glob("drakit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"drakit"}
    assert "drakit/plugin/cli.py" in names and "drakit/plugin/_proto/dra/v1/api_pb2.py" in names
    assert "drakit/discovery/builtin/example-devices.yaml" in names
    assert "drakit/cdi/py.typed" in names and "drakit/py.typed" in names
'''

README_NOTE = """
One import name: the wheel's only top-level import package is `drakit`. The folders stay
where they are; `drakit/` holds relative links to `plugin/`, `discovery/` and `cdi/`, so
they import as `drakit.plugin`, `drakit.discovery` and `drakit.cdi` (a vendor's own
`plugin.py` or `plugin/` folder cannot shadow or merge with them). setuptools follows the
links into the wheel; mypy, ruff and pytest see the same names from the checkout
(`scripts/move_to_drakit_namespace.py` made this layout).
"""


def module_names() -> set[str]:
    """Every module and package name under the three top-level folders (``plugin.cli``,
    ``plugin.testing``, ``discovery.builtin.net``, ...), the three names themselves too."""
    names: set[str] = set(TOP)
    for top in TOP:
        for path in (REPO / top).rglob("*"):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(REPO)
            if path.is_dir():
                names.add(".".join(rel.parts))
            elif path.suffix == ".py" and path.name != "__init__.py":
                names.add(".".join(rel.with_suffix("").parts))
    return names


DOTTED = re.compile(r"(?<![\w.\-/])((?:plugin|discovery|cdi)(?:\.[A-Za-z_]\w*)+)")
FROM_TOP = re.compile(r"^(\s*)from (plugin|discovery|cdi) import ", re.M)
BARE_IMPORT = re.compile(r"^\s*import (plugin|discovery|cdi)(\.[\w.]+)?\s*(#.*)?$", re.M)


def _rewrite_dotted(text: str, modules: set[str]) -> str:
    def dotted(m: re.Match[str]) -> str:
        parts = m.group(1).split(".")
        # the longest prefix of two or more parts that is a real module
        for n in range(len(parts), 1, -1):
            if ".".join(parts[:n]) in modules:
                return "drakit." + m.group(1)
        return m.group(1)

    text = FROM_TOP.sub(lambda m: f"{m.group(1)}from drakit.{m.group(2)} import ", text)
    return DOTTED.sub(dotted, text)


def rewrite_text(text: str, modules: set[str]) -> str:
    """``text`` (not Python) with every reference to a drakit module prefixed by ``drakit.``."""
    return _rewrite_dotted(text, modules)


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _python_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of a Python source where module names are rewritten: import
    statements, string literals and comments. Code is left alone (``plugin.names = ...``
    may be an attribute of a local variable called ``plugin``)."""
    starts = _offsets(text)
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    spans: list[tuple[int, int]] = []
    at_start = True
    for i, tok in enumerate(toks):
        begin = starts[tok.start[0] - 1] + tok.start[1]
        end = starts[tok.end[0] - 1] + tok.end[1]
        if at_start and tok.type == tokenize.NAME and tok.string in ("import", "from"):
            j = i
            while toks[j].type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
                j += 1
            spans.append((begin, starts[toks[j].start[0] - 1] + toks[j].start[1]))
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            spans.append((begin, end))
        at_start = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                tokenize.NL, tokenize.ENCODING) or (
            tok.type == tokenize.OP and tok.string == ";")
    merged: list[tuple[int, int]] = []
    for span in sorted(spans):
        if merged and span[0] < merged[-1][1]:
            continue  # a comment inside an import statement
        merged.append(span)
    return merged


def rewrite_python(text: str, modules: set[str]) -> str:
    """A Python source with drakit module names rewritten in its import statements, string
    literals and comments (see :func:`_python_spans`), long lines wrapped again."""
    out, pos = [], 0
    for begin, end in _python_spans(text):
        out += [text[pos:begin], _rewrite_dotted(text[begin:end], modules)]
        pos = end
    out.append(text[pos:])
    return _wrap_long_lines("".join(out))


def _wrap_at_space(line: str, limit: int, prefix: str) -> list[str] | None:
    lead = len(line) - len(line.lstrip())
    cut = line.rfind(" ", lead + 2, limit + 1)
    if cut <= lead + 1:
        return None
    return [line[:cut].rstrip(), prefix + line[cut + 1:].lstrip()]


def _wrap_long_lines(text: str, limit: int = 100) -> str:
    """Lines the rewrite made longer than ``limit`` (they hold ``drakit.``) are wrapped:
    a ``from a import b, c`` becomes the parenthesized form, a comment or a line inside a
    triple-quoted string is broken at a space, a code line after a comma inside brackets.
    Raises SystemExit naming a line it cannot wrap."""
    for _ in range(50):
        lines = text.split("\n")
        long = [i for i, line in enumerate(lines) if len(line) > limit and "drakit." in line]
        if not long:
            return text
        in_docstring: set[int] = set()
        comment_lines: set[int] = set()
        commas: dict[int, list[tuple[int, int]]] = {}  # line -> [(column, bracket column)]
        strings: dict[int, list[tuple[int, int, str, int]]] = {}  # (start, end, text, bracket)
        brackets: list[int] = []
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            row = tok.start[0] - 1
            if tok.type == tokenize.STRING and tok.string.lstrip("rbfuRBFU")[:3] in (
                    '"""', "'''"):
                in_docstring.update(range(row, tok.end[0]))
            elif tok.type == tokenize.STRING and brackets and tok.start[0] == tok.end[0]:
                strings.setdefault(row, []).append(
                    (tok.start[1], tok.end[1], tok.string, brackets[-1]))
            elif tok.type == tokenize.COMMENT and lines[row].lstrip().startswith("#"):
                comment_lines.add(row)
            elif tok.type == tokenize.OP and tok.string in ("(", "[", "{"):
                brackets.append(tok.start[1])
            elif tok.type == tokenize.OP and tok.string in (")", "]", "}"):
                brackets.pop()
            elif tok.type == tokenize.OP and tok.string == "," and brackets:
                commas.setdefault(row, []).append((tok.start[1], brackets[-1]))
        i = long[0]
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip())]
        new: list[str] | None = None
        m = re.fullmatch(r"(\s*)from ([\w.]+) import ([^()#\\]+?)(\s*#.*)?", line)
        if m:
            ind, module, names, comment = m.group(1), m.group(2), m.group(3), m.group(4)
            new = [f"{ind}from {module} import ({(comment or '').strip()}".rstrip()]
            new += [f"{ind}    {n.strip()}," for n in names.split(",") if n.strip()]
            new.append(f"{ind})")
        elif i in comment_lines:
            new = _wrap_at_space(line, limit, indent + "# ")
        elif i in in_docstring:
            new = _wrap_at_space(line, limit, indent)
        else:
            fits = [(col, br) for col, br in commas.get(i, [])
                    if col + 1 <= limit and len(line[:col + 1].rstrip()) > len(indent)]
            split = [(a, b, t, br) for a, b, t, br in strings.get(i, [])
                     if a < limit < b and t[:1] in "'\"" and " " in t]
            if fits and not (split and fits[-1][0] < split[0][0]
                             and split[0][1] - split[0][0] > limit - fits[-1][1]):
                col, br = fits[-1]
                new = [line[: col + 1], " " * (br + 1) + line[col + 1:].lstrip()]
            elif split:
                # a plain string literal across the limit: two adjacent literals
                a, _, lit, br = split[0]
                cut = line.rfind(" ", a + 1, limit - 1)
                if cut > a + 1:
                    q = lit[0]
                    new = [line[: cut + 1] + q, " " * (br + 1) + q + line[cut + 1:]]
        if new is None:
            raise SystemExit(f"cannot wrap line {i + 1} ({len(line)} characters): {line!r}")
        text = "\n".join(lines[:i] + new + lines[i + 1:])
    raise SystemExit("too many long lines to wrap")


def files_to_rewrite() -> list[Path]:
    files = [REPO / f for f in REWRITE_FILES if (REPO / f).is_file()]
    for d in REWRITE_DIRS:
        for path in sorted((REPO / d).rglob("*")):
            rel = path.relative_to(REPO)
            if (path.is_file() and not path.is_symlink() and path.resolve() != THIS
                    and not SKIP_PARTS.intersection(rel.parts)
                    and not any(p.endswith(".egg-info") for p in rel.parts)
                    and (path.suffix in TEXT_SUFFIXES or path.name == "Containerfile")):
                files.append(path)
    return files


def _edit_pyproject(text: str) -> str:
    text = re.sub(r'include = \["plugin\*", "discovery\*", "cdi\*"\]', 'include = ["drakit*"]',
                  text)
    text = re.sub(r'packages = \["plugin", "discovery", "cdi"\]', 'packages = ["drakit"]', text)
    if "known-first-party" not in text:
        text = text.replace('[tool.ruff.lint]\n', '[tool.ruff.lint]\n', 1)
        text = text.replace("\n[tool.mypy]\n",
                            '\n[tool.ruff.lint.isort]\nknown-first-party = ["drakit"]\n'
                            "\n[tool.mypy]\n", 1)
    return text


def _edit_gen_proto(text: str) -> str:
    return text.replace('PACKAGE_PREFIX = Path("plugin") / "_proto"',
                        'PACKAGE_PREFIX = Path("drakit") / "plugin" / "_proto"')


def _edit_containerfile(text: str) -> str:
    if "COPY drakit ./drakit" in text:
        return text
    return text.replace("COPY plugin ./plugin\n", "COPY plugin ./plugin\nCOPY drakit ./drakit\n")


def _edit_containerfile_test(text: str) -> str:
    return text.replace('for source in ("pyproject.toml", "cdi", "discovery", "plugin"):',
                        'for source in ("pyproject.toml", "cdi", "discovery", "plugin", '
                        '"drakit"):')


def _edit_readme(text: str) -> str:
    if "One import name:" in text:
        return text
    anchor = "import `plugin`.\n"
    if anchor not in text:
        return text + README_NOTE
    return text.replace(anchor, anchor + README_NOTE, 1)


SPECIAL = {
    "pyproject.toml": _edit_pyproject,
    "scripts/gen_proto.py": _edit_gen_proto,
    "deploy/Containerfile": _edit_containerfile,
    "tests/deploy/test_deploy_containerfile.py": _edit_containerfile_test,
    "README.md": _edit_readme,
}


def plan() -> tuple[dict[Path, str], list[str]]:
    """The new text of every file that changes, and the problems that stop the move."""
    modules = module_names()
    changes: dict[Path, str] = {}
    problems: list[str] = []
    for path in files_to_rewrite():
        try:
            old = path.read_text()
        except UnicodeDecodeError:
            continue
        rel = str(path.relative_to(REPO))
        if path.suffix == ".py":
            for m in BARE_IMPORT.finditer(old):
                problems.append(f"{rel}: '{m.group(0).strip()}' has no 'as' name; "
                                "rewrite it as 'from ... import' or 'import ... as' first")
        if path.suffix == ".py":
            try:
                new = rewrite_python(old, modules)
            except SystemExit as e:
                problems.append(f"{rel}: {e}")
                continue
        else:
            new = rewrite_text(old, modules)
        if rel in SPECIAL:
            new = SPECIAL[rel](new)
        if new != old:
            changes[path] = new
    return changes, problems


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.move-tmp")
    tmp.write_text(text)
    os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o644)
    os.replace(tmp, path)


def layout_missing() -> list[str]:
    pkg = REPO / "drakit"
    missing = [str(p.relative_to(REPO)) for p in (pkg / "__init__.py", pkg / "py.typed")
               if not p.is_file()]
    for top in TOP:
        link = pkg / top
        if not (link.is_symlink() and os.readlink(link) == f"../{top}"):
            missing.append(f"drakit/{top} -> ../{top}")
    if not (REPO / "tests" / "test_drakit_namespace.py").is_file():
        missing.append("tests/test_drakit_namespace.py")
    return missing


def make_layout() -> None:
    pkg = REPO / "drakit"
    pkg.mkdir(exist_ok=True)
    if not (pkg / "__init__.py").is_file():
        _write(pkg / "__init__.py", INIT)
    if not (pkg / "py.typed").is_file():
        _write(pkg / "py.typed", "")
    for top in TOP:
        link = pkg / top
        if link.is_symlink() and os.readlink(link) == f"../{top}":
            continue
        if link.exists() or link.is_symlink():
            raise SystemExit(f"drakit/{top} exists and is not a link to ../{top}; move it away")
        link.symlink_to(f"../{top}", target_is_directory=True)
    test = REPO / "tests" / "test_drakit_namespace.py"
    if not test.is_file():
        _write(test, NAMESPACE_TEST)


def stubs_prefix_ok() -> bool:
    stub = REPO / "plugin" / "_proto" / "dra" / "v1" / "api_pb2_grpc.py"
    return "from drakit.plugin._proto.dra.v1 import api_pb2" in stub.read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 when the move is not (fully) applied")
    args = parser.parse_args(argv)
    changes, problems = plan()
    if problems:
        print("not moved:", *problems, sep="\n  ", file=sys.stderr)
        return 2
    missing = layout_missing()
    if args.check:
        todo = missing + [str(p.relative_to(REPO)) for p in changes]
        if not stubs_prefix_ok():
            todo.append("plugin/_proto (regenerate as drakit.plugin._proto)")
        print("\n".join(todo) if todo else "drakit namespace: applied")
        return 1 if todo else 0
    make_layout()
    for path, text in changes.items():
        _write(path, text)
    print(f"layout: {'created ' + ', '.join(missing) if missing else 'already there'}")
    print(f"rewrote {len(changes)} files")
    if not stubs_prefix_ok():
        print("regenerating plugin/_proto as drakit.plugin._proto ...", flush=True)
        subprocess.run([sys.executable, str(REPO / "scripts" / "gen_proto.py")], check=True,
                       timeout=900)
    return 0


if __name__ == "__main__":
    sys.exit(main())
