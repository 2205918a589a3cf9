"""``python -m bench.celchoice``: which CEL library drakit.allocator evaluates DRA selectors
with — cel-python (``celpy``, pure Python) or cel-expr-python (the Google CEL C++ runtime) —
measured on three things (bench/README.md "CEL library"):

- conformance: a corpus of DRA selector expressions over one device, each with the value
  or error Kubernetes 1.37's environment gives (k8s.io/dynamic-resource-allocation
  ``cel/compile.go`` and k8s.io/apiserver ``pkg/cel/library``): how many a library gets
  right, with the Kubernetes functions (quantity, semver, lists) added to it as drakit would;
- speed: microseconds per evaluation of a typical DeviceClass selector, the device's
  ``device`` value built each time (what the allocator does once per device);
- memory: RSS a fresh interpreter gains by importing the library and evaluating once.

Prints a Markdown table; ``--json`` for the numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

D = "gpu.example.com"
DEVICE = {"name": "gpu-0",
          "attributes": {"model": {"string": "a100"}, "index": {"int": 2},
                         "healthy": {"bool": True}, "driverVersion": {"version": "1.2.3"},
                         "numa.example.org/node": {"int": 1}},
          "capacity": {"memory": {"value": "40Gi"}, "cores": {"value": "8"}}}
A = f'device.attributes["{D}"]'
C = f'device.capacity["{D}"]'

#: (expression, expected): True / False, or "error" (compile or runtime error in Kubernetes)
CORPUS: list[tuple[str, Any]] = [
    (f'device.driver == "{D}"', True),
    (f'{A}.model == "a100"', True),
    (f'{A}.index > 1 && {A}.healthy', True),
    ('device.attributes["numa.example.org"].node == 1', True),
    (f'{A}.nosuch == "x"', "error"),
    ('device.attributes["other.example.org"].x == 1', "error"),
    (f'has({A}.model)', True),
    (f'"{D}" in device.attributes', True),
    (f'{A}.?nosuch.orValue("none") == "none"', True),
    (f'cel.bind(g, {A}, g.model == "a100" && g.index == 2)', True),
    (f'{C}.memory.compareTo(quantity("40Gi")) == 0', True),
    (f'{C}.memory.isGreaterThan(quantity("32Gi"))', True),
    (f'{C}.memory == quantity("40960Mi")', True),
    (f'{C}.cores.asInteger() == 8', True),
    ('quantity("1.5").add(1).isLessThan(quantity("3"))', True),
    (f'{A}.driverVersion.isGreaterThan(semver("1.2.0"))', True),
    (f'{A}.driverVersion.major() == 1', True),
    ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
    ('isSemver("1.2") || isQuantity("12x")', False),
    (f'{A}.model.startsWith("a1") && {A}.model.endsWith("00")', True),
    (f'{A}.model.matches("^a[0-9]+$")', True),
    (f'{A}.model.upperAscii() == "A100"', True),
    (f'{A}.model.split("1").size() == 2', True),
    ('"%s-%d".format(["a", 1]) == "a-1"', True),
    ('[1, 2, 3].all(x, x > 0) && [1, 2].exists_one(x, x == 2)', True),
    ('[1, 2, 3].map(x, x * 2).filter(x, x > 2) == [4, 6]', True),
    ('[3, 1, 2].sort() == [1, 2, 3]', True),
    ('[1, 2].isSorted() && [1, 2, 3].sum() == 6 && [4, 2].min() == 2', True),
    ('sets.contains([1, 2, 3], [2, 3])', True),
    ('[[1], [2]].flatten() == [1, 2]', True),
    ('"a100-80g".find("[0-9]+g") == "80g"', True),
    ('{"a": 1}.all(k, v, v == 1)', True),
    ('nosuchvariable == 1', "error"),
    ('1 / 0 == 1', "error"),
]


def _q(text: str) -> Decimal:
    from drakit.plugin.slices.quantity import parse

    return parse(text).value


def celpy_adapter() -> Callable[[str], Any]:
    """cel-python with the Kubernetes quantity and semver functions added as it allows
    (custom functions; no macros, no new syntax)."""
    import celpy
    from celpy import celtypes

    from drakit.allocator import semver as sv

    class Quantity:
        def __init__(self, v: Decimal) -> None:
            self.v = v

        def __eq__(self, o: object) -> bool:
            return isinstance(o, Quantity) and o.v == self.v

    class Semver:
        def __init__(self, v: sv.Semver) -> None:
            self.v = v

    def cmp(a: Any, b: Any) -> int:
        if isinstance(a, Quantity):
            return (a.v > b.v) - (a.v < b.v)
        return int(a.v.compare(b.v))

    def ok(f: Callable[..., Any]) -> Callable[..., Any]:
        def g(*args: Any) -> Any:
            try:
                return f(*args)
            except ValueError:
                return celtypes.BoolType(False)
        return g

    functions: dict[str, Any] = {
        "quantity": lambda s: Quantity(_q(str(s))),
        "isQuantity": ok(lambda s: celtypes.BoolType(_q(str(s)) is not None)),
        "semver": lambda s: Semver(sv.parse(str(s))),
        "isSemver": ok(lambda s: celtypes.BoolType(sv.parse(str(s)) is not None)),
        "compareTo": lambda a, b: celtypes.IntType(cmp(a, b)),
        "isGreaterThan": lambda a, b: celtypes.BoolType(cmp(a, b) > 0),
        "isLessThan": lambda a, b: celtypes.BoolType(cmp(a, b) < 0),
        "asInteger": lambda a: celtypes.IntType(int(a.v)),
        "add": lambda a, b: Quantity(a.v + (b.v if isinstance(b, Quantity) else int(b))),
        "major": lambda a: celtypes.IntType(a.v.major),
    }
    env = celpy.Environment()
    cache: dict[str, Any] = {}

    def device(dev: dict[str, Any]) -> Any:
        attrs: dict[str, dict[str, Any]] = {}
        for name, a in dev["attributes"].items():
            dom, _, ident = name.rpartition("/")
            v = a.get("string", a.get("int", a.get("bool")))
            if "version" in a:
                v = Semver(sv.parse(a["version"]))
            attrs.setdefault(dom or D, {})[ident] = v
        caps = {D: {k: Quantity(_q(v["value"])) for k, v in dev["capacity"].items()}}
        return celtypes.MapType({
            celtypes.StringType("driver"): celtypes.StringType(D),
            celtypes.StringType("attributes"): _cel_map(attrs),
            celtypes.StringType("capacity"): _cel_map(caps)})

    def _cel_map(m: dict[str, dict[str, Any]]) -> Any:
        return celtypes.MapType({
            celtypes.StringType(k): celtypes.MapType({
                celtypes.StringType(i): (celpy.json_to_cel(x) if isinstance(
                    x, (str, int, bool)) else x) for i, x in inner.items()})
            for k, inner in m.items()})

    def run(expr: str) -> Any:
        try:
            prg = cache.get(expr)
            if prg is None:
                prg = cache[expr] = env.program(env.compile(expr), functions=functions)
            out = prg.evaluate({"device": device(DEVICE)})
        except Exception:
            return "error"
        if isinstance(out, Exception):
            return "error"
        return bool(out) if isinstance(out, celtypes.BoolType) else "error"

    return run


def celexpr_adapter() -> Callable[[str], Any]:
    """cel-expr-python as drakit.allocator.celenv configures it."""
    from drakit.allocator.celenv import Environment

    env = Environment()

    def run(expr: str) -> Any:
        out = env.evaluate(env.compile(expr), env.device_value(D, DEVICE))
        return "error" if out.error else out.value

    return run


ADAPTERS = {"cel-python": ("celpy", celpy_adapter),
            "cel-expr-python": ("cel_expr_python", celexpr_adapter)}
TYPICAL = (f'device.driver == "{D}" && {A}.model == "a100" && '
           f'{C}.memory.compareTo(quantity("32Gi")) >= 0')


def conformance(run: Callable[[str], Any]) -> tuple[int, list[str]]:
    wrong = [e for e, want in CORPUS if run(e) != want]
    return len(CORPUS) - len(wrong), wrong


def speed_us(run: Callable[[str], Any], n: int) -> float:
    run(TYPICAL)
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            run(TYPICAL)
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(rounds)


def rss_mb(name: str) -> float:
    """VmRSS gained by a fresh interpreter (drakit.plugin.slices.quantity already imported on
    both sides) importing the library and evaluating once."""
    script = textwrap.dedent(f"""
        import re
        def rss():
            return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read())[1])
        import drakit.plugin.slices.quantity, drakit.allocator.semver, google.protobuf
        before = rss()
        from bench.celchoice import ADAPTERS
        run = ADAPTERS[{name!r}][1]()
        run('device.driver == "x"')
        print(rss() - before)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return int(out.split()[-1]) / 1024


def measure(n: int = 2000) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, (_module, make) in ADAPTERS.items():
        run = make()
        right, wrong = conformance(run)
        out[name] = {"conformance": right, "of": len(CORPUS), "wrong": wrong,
                     "us_per_eval": speed_us(run, n), "rss_mb": rss_mb(name)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.celchoice", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true")
    p.add_argument("-n", type=int, default=2000, help="evaluations per speed round")
    args = p.parse_args(argv)
    res = measure(args.n)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print("| library | conformance | µs per evaluation | RSS added |")
    print("|---|---|---|---|")
    for name, r in res.items():
        print(f"| {name} | {r['conformance']}/{r['of']} | {r['us_per_eval']:.1f} | "
              f"{r['rss_mb']:.1f} MB |")
    for name, r in res.items():
        for e in r["wrong"]:
            print(f"- {name} wrong on: `{e}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
