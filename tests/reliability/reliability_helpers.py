"""Shared pieces of the reliability tests: the fuzz budget, the case counter, hostile-string
strategies and a raw gRPC client for the DRA socket."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from drakit.plugin.kubelet.protocol import DRA_MODULES, DRA_V1

DEFAULT_TOTAL = 1300
"""Cases of the default run: the sum of the per-test shares (the gRPC share counts twice,
once per DRA version). See :func:`fuzz_settings`."""


class CaseCounter:
    """Counts fuzz cases per test and crashes (an exception that escaped a component)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.crashes = 0

    def hit(self, test: str) -> None:
        with self._lock:
            self.counts[test] += 1

    @contextmanager
    def case(self, test: str) -> Iterator[None]:
        """Count one case; an exception leaving the block counts as a crash (and fails)."""
        self.hit(test)
        try:
            yield
        except BaseException:
            with self._lock:
                self.crashes += 1
            raise


CASES = CaseCounter()


def fuzz_examples(share: int) -> int:
    """Examples for a test whose default share is ``share``; scaled by DRAKIT_FUZZ_EXAMPLES."""
    raw = os.environ.get("DRAKIT_FUZZ_EXAMPLES")
    if not raw:
        return share
    return max(1, round(share * int(raw) / DEFAULT_TOTAL))


def fuzz_settings(share: int, deadline_s: float = 10.0) -> settings:
    """Bounded hypothesis settings: ``fuzz_examples(share)`` examples, a per-example deadline
    (a hang guard, generous for a noisy 2-core machine), no example database on disk."""
    return settings(
        max_examples=fuzz_examples(share),
        deadline=timedelta(seconds=deadline_s),
        database=None,
        derandomize=not os.environ.get("DRAKIT_FUZZ_EXAMPLES"),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.large_base_example, HealthCheck.filter_too_much],
    )


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Pick one strategy with the given integer weights (``st.one_of(a, a, b)`` does not
    weigh: hypothesis draws its branches about evenly however often one is listed)."""
    table = [s for w, s in choices for _ in range(w)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


# -- hostile strings -----------------------------------------------------------------------

MARKER = "drkpwn"
"""Part of many hostile names: after a run, no file anywhere may carry it in its name."""

HOSTILE_NAMES = [
    "", ".", "..", "../", f"../../{MARKER}", f"../../../../../../tmp/{MARKER}",
    f"/tmp/{MARKER}", f"/{MARKER}", f"a/../../{MARKER}", f"{MARKER}/..", f"{MARKER}\x00x",
    f"{MARKER}\n", f"\n{MARKER}", f"{MARKER}\r", f"{MARKER} x", f"{MARKER}\\..\\x",
    f"{MARKER}" + "x" * 300, "x" * 64, "x" * 129, "x" * 254, "x" * 5000,
    f"{MARKER}\u2215x", f"{MARKER}\uff0e\uff0e", f"{MARKER}\u202e", "\uff21\uff22\uff23", "💥",
    f"./{MARKER}", f"~/{MARKER}", f"${{HOME}}/{MARKER}", f"$(touch /tmp/{MARKER})",
    f"`touch /tmp/{MARKER}`", f"{MARKER};rm -rf /", f"{MARKER}|cat", "-rf", "--help",
    f"{MARKER}*", f"{MARKER}?", "%2e%2e%2f", f"{MARKER}.json", f".{MARKER}.tmp",
    "UPPER", "a_b", "-leading", "trailing-", "a..b", "a.-b",
]
"""Values for claim UIDs, namespaces, names, pools, devices, share IDs."""

_text = st.text(
    alphabet=st.characters(codec="utf-8"), max_size=80
)  # protobuf strings must be valid UTF-8: no lone surrogates

hostile_strings = st.one_of(
    st.sampled_from(HOSTILE_NAMES),
    _text,
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
    st.builds(lambda a, b: f"{a}/{b}", _text, _text),
    st.builds(lambda n: "a" * n, st.integers(60, 300)),
)
"""Any string: mostly hostile, some valid DNS labels (so valid paths get exercised too)."""

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), _text, st.sampled_from(HOSTILE_NAMES),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=12,
)
"""Arbitrary JSON-like values (what a broken or hostile API object may hold)."""


# -- raw gRPC ------------------------------------------------------------------------------

class RawDRA:
    """A raw DRA client on a socket path: sends any request (duplicates, huge, odd UTF-8)
    and returns the response message as is, unlike the fake kubelet which checks it."""

    def __init__(self, socket_path: Path | str, version: str = DRA_V1) -> None:
        self.pb2, grpc_mod = DRA_MODULES[version]
        self.channel = grpc.insecure_channel(
            f"unix:{socket_path}",
            options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        )
        self.stub = grpc_mod.DRAPluginStub(self.channel)

    def request(self, claims: list[tuple[str, str, str]], unprepare: bool = False) -> Any:
        cls = (self.pb2.NodeUnprepareResourcesRequest if unprepare
               else self.pb2.NodePrepareResourcesRequest)
        return cls(claims=[self.pb2.Claim(namespace=n, name=m, uid=u) for n, m, u in claims])

    def prepare(self, claims: list[tuple[str, str, str]], timeout: float = 45.0) -> Any:
        return self.stub.NodePrepareResources(self.request(claims), timeout=timeout)

    def unprepare(self, claims: list[tuple[str, str, str]], timeout: float = 45.0) -> Any:
        return self.stub.NodeUnprepareResources(self.request(claims, True), timeout=timeout)

    def close(self) -> None:
        self.channel.close()


def tree(root: Path) -> set[str]:
    """Every path below ``root`` (relative), files and directories."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def names_with_marker(*roots: Path | str, marker: str = MARKER, max_depth: int = 3) -> list[str]:
    """Paths below ``roots`` (to ``max_depth`` levels) whose name contains ``marker``."""
    found: list[str] = []
    for root in roots:
        root_s = os.fspath(root)
        if not os.path.isdir(root_s):
            continue
        base_depth = root_s.rstrip("/").count("/")
        for dirpath, dirnames, filenames in os.walk(root_s):
            if dirpath.count("/") - base_depth >= max_depth:
                dirnames[:] = []
            found += [os.path.join(dirpath, n) for n in dirnames + filenames if marker in n]
    return found


# -- a new consumer for a claim ------------------------------------------------------------

def reserve_anew(h: Any, claims: list[tuple[str, str, str]]) -> None:
    """Reserve each of ``claims`` (namespace, name, uid) for a new pod, as the scheduler does
    for the next pod using a claim: after an unprepare, a prepare of an unchanged claim is
    a stale retry and refused; a fuzz case that prepares the same claim again
    plays the next pod. Retries the read-modify-write while the agent's own status write
    conflicts (409)."""
    import uuid

    from drakit.plugin.testing.apiserver.errors import ApiError

    assert h.app.status.flush(10)
    for ns, name, _uid in {c[2]: c for c in claims}.values():
        for _ in range(20):
            cur = h.apiserver.get_object("resourceclaims", name, ns)
            if cur is None:
                break
            pod = uuid.uuid4()
            cur["status"]["reservedFor"] = [{"resource": "pods", "name": f"pod-{pod.hex[:8]}",
                                             "uid": str(pod)}]
            try:
                h.apiserver.update_object("resourceclaims", cur, subresource="status")
                break
            except ApiError as e:
                if e.code != 409:
                    raise
