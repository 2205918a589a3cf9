"""The walk of one claim in docs/architecture.md is the code's: a profiler records the
functions a NodePrepareResources (both prepare paths) and a NodeUnprepareResources run, and
the test fails when they differ from the map, printing the map of the code as it is.

The agent runs in this process (``DriverHarness``) on the embedded API server. A profile
hook (``sys.setprofile`` and ``threading.setprofile``, set before the agent starts so every
thread it starts has it) records each Python function called on the threads that serve the
call: the gRPC worker (``drakit-dra-*``), the claim-read threads and the hook workers
(``claim-hooks-*``). Background work (AllocatedDeviceStatus applies, slice publishing) runs
on threads of its own and is not part of the walk. A first claim is prepared and
unprepared before the recorded one, so the walk is a steady one (the checkpoint has its log,
the hook worker exists), and each call starts once the status writer's work is settled.

The map lists ``file: function, ...`` for the claim core (plugin/claims/, plugin/kubelet/)
and, for every other file the walk enters, its name only (``calls into:``): the rooms below
are libraries to the claim path.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar

import pytest

import drakit.cdi
import drakit.discovery
import drakit.plugin
from drakit.discovery.model import Device, Pool
from drakit.discovery.plugin import DiscoveryContext, DiscoveryPlugin
from drakit.plugin.claims import owedstatus
from drakit.plugin.testing.harness import DriverHarness

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
DRIVER, NODE, POOL = "drakit.example.com", "node-1", "pool-walk"

_ROOTS = {
    "plugin": Path(drakit.plugin.__file__).resolve().parent,
    "cdi": Path(drakit.cdi.__file__).resolve().parent,
    "discovery": Path(drakit.discovery.__file__).resolve().parent,
}
#: The files whose functions the map lists one by one.
CORE = ("plugin/claims/", "plugin/kubelet/")
#: Threads that serve a kubelet call.
CALL_THREADS = ("drakit-dra-", "claim-hooks-", "claim-read")
#: The walks of the map, by the name of their block in docs/architecture.md.
WALKS = ("prepare-one-write", "prepare-two-writes", "unprepare")


def _file_of(filename: str) -> str | None:
    """``plugin/claims/prepare.py`` for a file of drakit (the test kit and the generated
    gRPC modules left out); None elsewhere."""
    try:
        path = Path(filename).resolve()
    except OSError:
        return None
    for room, root in _ROOTS.items():
        if path.is_relative_to(root):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(("testing/", "_proto/")):
                return None
            return f"{room}/{rel}"
    return None


class _Recorder:
    """The code objects called on the call's threads while :attr:`active`, in order."""

    def __init__(self) -> None:
        self.active = False
        self.codes: dict[Any, None] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if (self.active and event == "call"
                and threading.current_thread().name.startswith(CALL_THREADS)):
            self.codes.setdefault(frame.f_code, None)  # atomic under the GIL

    def walk(self) -> dict[str, list[str]]:
        """File → its functions (qualified names, in the order first called; nested
        comprehensions and lambdas belong to their function)."""
        out: dict[str, list[str]] = {}
        for code in list(self.codes):
            where = _file_of(code.co_filename)
            if where is None:
                continue
            names = out.setdefault(where, [])
            name = code.co_qualname
            if "<" not in name and name not in names:
                names.append(name)
        return out


def render(walk: dict[str, list[str]]) -> str:
    """The map's lines of one walk."""
    lines = [f"- `{f}`: " + ", ".join(f"`{n}`" for n in names)
             for f, names in walk.items() if f.startswith(CORE)]
    others = sorted(f for f in walk if not f.startswith(CORE))
    lines.append("- calls into: " + ", ".join(f"`{f}`" for f in others))
    return "\n".join(lines)


def parse(block: str) -> tuple[dict[str, set[str]], set[str]]:
    """(core file → its functions, the other files) of one walk's lines of the map."""
    core: dict[str, set[str]] = {}
    others: set[str] = set()
    for item in re.split(r"^- ", block, flags=re.M):
        head, _, rest = " ".join(item.split()).partition(": ")
        names = set(re.findall(r"`([^`]+)`", rest))
        if head == "calls into":
            others |= names
        elif head:
            core[head.strip("`")] = names
    return core, others


def map_blocks(text: str) -> dict[str, str]:
    """The blocks ``<!-- walk: NAME -->`` ... ``<!-- /walk -->`` of the document."""
    return {m[1]: m[2].strip() for m in
            re.finditer(r"<!-- walk: ([\w-]+) -->\n(.*?)<!-- /walk -->", text, re.S)}


class _WalkPlugin(DiscoveryPlugin):
    """Three devices; the default prepare (container edits only) and unprepare."""

    name: ClassVar[str] = "walk"
    prepare_changes_node: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__(DiscoveryContext(driver_name=DRIVER, node_name=NODE))

    def discover(self) -> list[Pool]:
        return [Pool(name=POOL, devices=[Device(name=f"d{i}") for i in range(3)])]


class _ChangingPlugin(_WalkPlugin):
    """The same, declared to change the node in its prepare: the two-write path."""

    prepare_changes_node: ClassVar[bool] = True


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    rec = _Recorder()
    threading.setprofile(rec)
    sys.setprofile(rec)
    try:
        yield rec
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def _settled(h: DriverHarness) -> None:
    """Wait until no AllocatedDeviceStatus is owed (the status writer has applied and
    recorded its work): its checkpoint write then cannot join the recorded call's write
    (group commit runs the changes of a batch on one of its callers' threads)."""
    h.wait_for(lambda: owedstatus.owed(h.app.checkpoint.state()) == ([], []), 30,
               "the status writer's work settled")


def _walks(root: Path, rec: _Recorder, plugin: DiscoveryPlugin) -> dict[str, dict[str, list[str]]]:
    """The recorded prepare and unprepare walks of a claim of ``plugin``."""
    out: dict[str, dict[str, list[str]]] = {}
    with DriverHarness(root, plugins=[plugin], settings={"resync_seconds": 3600.0,
                                                         "health_resend_seconds": 20.0}) as h:
        first = h.allocate("first", [(POOL, "d0")])
        assert h.prepare(first)[first["metadata"]["uid"]].error == ""
        assert h.unprepare(first) == {first["metadata"]["uid"]: ""}
        claim = h.allocate("walked", [(POOL, "d1")])
        uid = claim["metadata"]["uid"]
        for what in ("prepare", "unprepare"):
            _settled(h)
            rec.codes.clear()
            rec.active = True
            try:
                got: Any = h.prepare(claim) if what == "prepare" else h.unprepare(claim)
            finally:
                rec.active = False
            assert (got[uid].error if what == "prepare" else got[uid]) == ""
            out[what] = rec.walk()
    return out


def test_the_map_of_a_claims_walk_is_the_code(short_tmp_path: Path,
                                              recorder: _Recorder) -> None:
    one = _walks(short_tmp_path / "one", recorder, _WalkPlugin())
    two = _walks(short_tmp_path / "two", recorder, _ChangingPlugin())
    assert one["unprepare"].keys() == two["unprepare"].keys()
    recorded = {"prepare-one-write": one["prepare"], "prepare-two-writes": two["prepare"],
                "unprepare": one["unprepare"]}
    # The walks pass through the path's own rooms.
    assert "plugin/claims/prepare.py" in recorded["prepare-one-write"]
    assert "plugin/claims/unprepare.py" in recorded["unprepare"]
    blocks = map_blocks(DOC.read_text())
    wrong = []
    for name in WALKS:
        want = parse(blocks.get(name, ""))
        got = parse(render(recorded[name]))
        if want != got:
            wrong.append(name)
    fresh = "\n\n".join(f"<!-- walk: {n} -->\n{render(recorded[n])}\n<!-- /walk -->"
                        for n in WALKS)
    assert not wrong, (f"docs/architecture.md's walk(s) {', '.join(wrong)} differ from the "
                       f"code; the code's walks:\n\n{fresh}")


def test_parse_reads_what_render_writes() -> None:
    walk = {"plugin/claims/node.py": ["NodeLogic.prepare_claims", "NodeLogic._x"],
            "plugin/klog.py": ["V"], "cdi/spec.py": ["Spec.write"]}
    assert parse(render(walk)) == (
        {"plugin/claims/node.py": {"NodeLogic.prepare_claims", "NodeLogic._x"}},
        {"plugin/klog.py", "cdi/spec.py"})
    doc = f"x\n<!-- walk: unprepare -->\n{render(walk)}\n<!-- /walk -->\n"
    assert parse(map_blocks(doc)["unprepare"]) == parse(render(walk))
