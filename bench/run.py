"""``python -m bench.run``: measure drakit's performance figures and compare with the goals.

Prints a table and writes a JSON file (default ``bench/results.json``) with, per figure, the
median and spread over repeats, the goal and pass / miss. ``--quick`` shrinks every workload
(a smoke test, figures meaningless); ``--only NAME`` (repeatable, comma-separated) runs the
groups measuring the named figures or groups. Exit status 0 unless a group crashed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.env import BenchConfig, byte_compile_drakit
from bench.figures import SPECS, Result, fmt, markdown_table
from bench.runtime import runtime_python

log = logging.getLogger("bench")


@dataclass(frozen=True)
class Group:
    """A measurement that yields several figures (they share one agent or fixture)."""

    name: str
    figures: tuple[str, ...]
    run: Callable[[BenchConfig], list[Result]]


def _groups() -> list[Group]:
    from bench import claims, discovery, explain, held, hotplug, process, publish, pydra, vsgo

    return [
        Group("claims", ("prepare_p50", "prepare_p99", "unprepare_p50", "unprepare_p99",
                         "fsync_floor", "grpc_floor", "claim_get_floor", "claim_cpu",
                         "prepare_throughput", "rss_loaded"),
              claims.run_claims),
        Group("start", ("start_to_registered", "rss_idle"), process.run_start),
        Group("publish", ("publish_cold_10k", "resync_writes"), publish.run_publish),
        Group("discovery", ("discovery_4096",), discovery.run_discovery),
        Group("hotplug", ("hotplug",), hotplug.run_hotplug),
        Group("explain", ("explain_1000",), explain.run_explain),
        Group("explain_cluster", ("explain_cluster_1000",), explain.run_explain_cluster),
        Group("pydra", ("pydra_prepare_p50", "pydra_prepare_p99", "pydra_unprepare_p50",
                        "pydra_throughput"), pydra.run_pydra),
        Group("go", tuple(vsgo.FIGURES), vsgo.run_vsgo),
        Group("go_publish", (vsgo.PUBLISH_FIGURE,), vsgo.run_vsgo_publish),
        Group("held", tuple(held.FIGURES), held.run_held),
    ]


def select(groups: Sequence[Group], only: Sequence[str]) -> list[Group]:
    """Groups named in ``only`` or measuring a figure named there (all when empty).
    Raises ValueError for an unknown name."""
    if not only:
        return list(groups)
    known = {g.name for g in groups} | set(SPECS)
    unknown = [n for n in only if n not in known]
    if unknown:
        raise ValueError(f"unknown figure or group {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    return [g for g in groups if g.name in only or set(g.figures) & set(only)]


def ratios(results: dict[str, Result]) -> list[Result]:
    """pydra / drakit latency and drakit / pydra throughput (> 1 means drakit is ahead)."""
    out = []
    pairs = (("ratio_prepare_p50", "pydra_prepare_p50", "prepare_p50", False),
             ("ratio_throughput", "prepare_throughput", "pydra_throughput", False))
    for name, num, den, _ in pairs:
        a, b = results.get(num), results.get(den)
        if a and b and a.summary and b.summary and b.summary.median > 0:
            r = Result(name, samples=[a.summary.median / b.summary.median])
            r.notes.append(f"median {num} / median {den}")
            out.append(r)
    return out


def table(results: Sequence[Result]) -> str:
    """The results as a Markdown table."""
    rows = [("figure", "median", "spread (min-max)", "goal", "verdict")]
    for r in results:
        spec = r.spec
        s = r.summary
        if s is None:
            rows.append((spec.title, "-", "-", spec.goal.text(spec.unit),
                         f"skipped: {r.skipped}"))
            continue
        spread = f"{fmt(s.min)}-{fmt(s.max)}" if s.n > 1 else "(1 run)"
        rows.append((spec.title, f"{fmt(s.median)} {spec.unit}", spread,
                     spec.goal.text(spec.unit), r.verdict))
    return markdown_table(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="tiny workloads: proves the bench works; figures are not meaningful")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="figure or group to run (repeatable, comma-separated)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results.json")),
                        help="JSON output file (default: bench/results.json)")
    parser.add_argument("--workdir", default=None,
                        help="parent of the temporary directories (default: system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep temporary directories (logs)")
    parser.add_argument("--list", action="store_true", help="list groups and figures and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    groups = _groups()
    if args.list:
        for g in groups:
            print(f"{g.name}: {', '.join(g.figures)}")
        return 0
    only = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    try:
        chosen = select(groups, only)
    except ValueError as e:
        parser.error(str(e))
    workdir = Path(tempfile.mkdtemp(prefix="drakit-bench-", dir=args.workdir))
    cfg = BenchConfig(quick=args.quick, workdir=workdir, keep=args.keep)
    byte_compile_drakit()  # the agents start as the image's do: from byte-compiled modules
    results: dict[str, Result] = {}
    crashed: list[str] = []
    started = time.monotonic()
    try:
        for g in chosen:
            t0 = time.monotonic()
            print(f"[bench] {g.name} ...", file=sys.stderr, flush=True)
            try:
                for r in g.run(cfg):
                    results[r.name] = r
            except Exception as e:
                crashed.append(g.name)
                traceback.print_exc()
                for name in g.figures:
                    results.setdefault(name, Result(name, skipped=f"error: {e}"))
            print(f"[bench] {g.name} done in {time.monotonic() - t0:.1f}s", file=sys.stderr,
                  flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    for r in ratios(results):
        results[r.name] = r
    ordered = [results[n] for n in SPECS if n in results]
    print(table(ordered))
    from bench.vsgo import side_by_side

    versus = side_by_side(results)
    if versus:
        print("\ndrakit vs the Go reference driver (bench/go; median and range over rounds):\n")
        print(versus)
    notes = [f"{r.name}: {n}" for r in ordered for n in r.notes]
    if runtime_python()[1]:
        notes.insert(0, f"agents: {runtime_python()[1]}")
    if notes:
        print("\nnotes:")
        for n in notes:
            print(f"- {n}")
    doc: dict[str, Any] = {
        "quick": args.quick,
        "seconds": round(time.monotonic() - started, 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "kernel": platform.release()},
        "agent_python": {"path": runtime_python()[0], "note": runtime_python()[1]},
        "figures": [r.to_json() for r in ordered],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {out}", file=sys.stderr)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
