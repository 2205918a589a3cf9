"""``drakit cdi list`` and ``drakit cdi validate FILE…`` for operators.

``list [--cdi-root DIR...]... [--json]``: every spec file runtimes would read in each directory
(default ``/etc/cdi`` and ``/var/run/cdi``), with its cdiVersion, kind and qualified device
names; files that fail validation and names defined in two files of one directory are
marked. Exit 0.

``validate [--max-version V] FILE...``: decode each file strictly (JSON or YAML) and apply
every rule of :mod:`drakit.cdi.validate`; prints ``FILE: OK …`` on stdout or one
``FILE: path: message`` line per problem on stderr. Exit 1 when any file is invalid.

Exit status 2 for usage errors (argparse).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from drakit.cdi.errors import CDIVersionError, SpecValidationError
from drakit.cdi.store import DEFAULT_SPEC_DIRS, spec_files
from drakit.cdi.validate import SPEC_FILE_EXTENSIONS, load_spec_file, spec_errors
from drakit.cdi.version import CDI_VERSIONS


def build_parser(prog: str = "drakit cdi") -> argparse.ArgumentParser:
    """The argument parser of ``drakit cdi`` (subcommands ``list`` and ``validate``)."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Inspect and check CDI spec files.", allow_abbrev=False
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="list spec files and their qualified device names",
                            allow_abbrev=False)
    p_list.add_argument(
        "--cdi-root",
        action="extend",
        nargs="+",
        metavar="DIR",
        help="spec directories (repeatable; default: /etc/cdi and /var/run/cdi)",
    )
    p_list.add_argument("--json", action="store_true", help="print JSON instead of text")
    p_val = sub.add_parser("validate", help="check spec files against the CDI rules",
                           allow_abbrev=False)
    p_val.add_argument("files", nargs="+", metavar="FILE")
    p_val.add_argument(
        "--max-version",
        choices=CDI_VERSIONS,
        help="also reject files declaring a cdiVersion above this (e.g. 0.5.0 for podman 4.3)",
    )
    return parser


def _check_file(path: Path, max_version: str | None) -> tuple[dict[str, Any], list[str]]:
    """Summary and problems (``path: message`` strings) of one spec file."""
    info: dict[str, Any] = {"file": str(path)}
    problems: list[str] = []
    if not path.name.endswith(SPEC_FILE_EXTENSIONS):
        problems.append("file name must end in .json or .yaml (runtimes ignore other files)")
    try:
        spec = load_spec_file(path)
    except SpecValidationError as exc:
        return info, problems + [str(e) for e in exc.errors]
    except OSError as exc:
        return info, [*problems, f"cannot read: {exc.strerror or exc}"]
    info.update(
        cdiVersion=spec.cdi_version,
        kind=spec.kind,
        devices=[f"{spec.kind}={d.name}" for d in spec.devices],
    )
    try:
        problems += [str(e) for e in spec_errors(spec, max_version)]
    except CDIVersionError as exc:  # pragma: no cover - max_version is a checked choice
        problems.append(str(exc))
    return info, problems


def _cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    dirs = args.cdi_root or list(DEFAULT_SPEC_DIRS)
    report: list[dict[str, Any]] = []
    for directory in dirs:
        entry: dict[str, Any] = {"dir": directory, "exists": Path(directory).is_dir(), "specs": []}
        owners: dict[str, list[str]] = {}
        for path in spec_files(directory):
            info, problems = _check_file(path, None)
            info["errors"] = problems
            for qname in info.get("devices", []):
                owners.setdefault(qname, []).append(path.name)
            entry["specs"].append(info)
        entry["conflicts"] = {q: files for q, files in sorted(owners.items()) if len(files) > 1}
        report.append(entry)
    if args.json:
        json.dump(report, out, indent=2)
        out.write("\n")
        return 0
    for entry in report:
        if not entry["exists"]:
            out.write(f"{entry['dir']}: (missing)\n")
            continue
        out.write(f"{entry['dir']}: {len(entry['specs'])} spec file(s)\n")
        for info in entry["specs"]:
            name = Path(info["file"]).name
            if "kind" in info:
                out.write(f"  {name}  cdiVersion {info['cdiVersion']}  kind {info['kind']}\n")
            else:
                out.write(f"  {name}  (unreadable)\n")
            for qname in info.get("devices", []):
                mark = (
                    "  CONFLICT: also in "
                    + ", ".join(f for f in entry["conflicts"].get(qname, []) if f != name)
                    if qname in entry["conflicts"]
                    else ""
                )
                out.write(f"    {qname}{mark}\n")
            for problem in info["errors"]:
                out.write(f"    error: {problem}\n")
    return 0


def _cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    failed = 0
    for name in args.files:
        path = Path(name)
        info, problems = _check_file(path, args.max_version)
        if problems:
            failed += 1
            for problem in problems:
                err.write(f"{path}: {problem}\n")
        else:
            out.write(
                f"{path}: OK (cdiVersion {info['cdiVersion']}, kind {info['kind']}, "
                f"{len(info['devices'])} device(s))\n"
            )
    return 1 if failed else 0


def cdi_main(
    argv: Sequence[str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``drakit cdi`` with ``argv`` (without the ``drakit cdi`` words); returns the
    exit status (0 ok, 1 invalid files, 2 usage)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.command == "list":
        return _cmd_list(args, out)
    return _cmd_validate(args, out, err)


def main() -> None:  # pragma: no cover - thin wrapper
    """Entry point for ``python -m drakit.cdi.cli``."""
    sys.exit(cdi_main())


if __name__ == "__main__":  # pragma: no cover
    main()
