"""Every name that becomes part of a path is validated, and hostile names written nowhere.

Path components: claim UID (CDI spec file name), namespace and name (checkpoint records),
driver name (data dir, socket names, CDI vendor), pod UID (socket and lock names), pool
and device names (CDI device names). ``../``, ``/``, NUL, newlines and over-long values are
rejected with an error naming the field. The end-to-end test runs prepares with hostile
names through the real agent and proves nothing new appeared anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from reliability_helpers import (
    HOSTILE_NAMES,
    MARKER,
    RawDRA,
    names_with_marker,
    reserve_anew,
    tree,
)

from drakit.cdi.errors import CDIError
from drakit.cdi.names import validate_claim_uid
from drakit.cdi.spec import ContainerEdits
from drakit.cdi.spec import Device as CDIDevice
from drakit.cdi.store import SpecStore
from drakit.discovery.model import Device, Pool
from drakit.discovery.plugin import ClaimRef, DiscoveryContext, DiscoveryPlugin
from drakit.plugin.claims.checkpoint import Checkpoint
from drakit.plugin.claims.node import NodeLogic
from drakit.plugin.kubelet.sockets import SocketPathError, SocketPaths
from drakit.plugin.names import (
    InvalidNameError,
    check_claim_uid,
    check_device_name,
    check_driver_name,
    check_namespace,
    check_object_name,
    check_pool_name,
)
from drakit.plugin.ops.config import Settings
from drakit.plugin.slices.inventory import Inventory
from drakit.plugin.testing.harness import DriverHarness

TRAVERSAL = ["..", "../x", "a/../b", "/abs", "a/b", "a\x00b", "a\nb", "a\n", "\n", "", " a",
             "x" * 1000]
"""Values no path component may take (for pool names ``a/b`` is legal: pools are never a
path component, and '/'-joined DNS subdomains are their API rule)."""

VALIDATORS: dict[str, Callable[[Any], Any]] = {
    "claim.uid": check_claim_uid,
    "claim.namespace": check_namespace,
    "claim.name": check_object_name,
    "device": check_device_name,
    "driver": check_driver_name,
    "pool": check_pool_name,
}


@pytest.mark.parametrize("field,value", [
    (f, v) for f in sorted(VALIDATORS) for v in TRAVERSAL
    if not (f == "pool" and v == "a/b")  # a valid pool name (never a path component)
])
def test_name_validators_reject_path_tricks(field: str, value: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        VALIDATORS[field](value)
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize("value", [*TRAVERSAL, f"../{MARKER}", f"{MARKER}/x", "x" * 129])
def test_cdi_and_socket_names_reject_path_tricks(value: str, tmp_path: Path) -> None:
    with pytest.raises(CDIError):
        validate_claim_uid(value)
    with pytest.raises(CDIError):
        SpecStore(tmp_path / "cdi", "drakit.example.com", "device").path_for(value)
    with pytest.raises(SocketPathError):
        SocketPaths.for_instance(value, tmp_path / "r", tmp_path / "p")  # driver name
    with pytest.raises(SocketPathError):
        SocketPaths.for_instance("drakit.example.com", tmp_path / "r", tmp_path / "p", value)
    with pytest.raises(ValueError):
        Checkpoint(tmp_path / "c.json", owner=value)
    with pytest.raises(ValueError, match="driver"):
        Settings(driver_name=value, node_name="n")
    assert list(tmp_path.iterdir()) == []


class HostilePlugin(DiscoveryPlugin):
    """A (buggy) discovery plugin reporting devices with path-like names."""

    name = "hostile"

    def discover(self) -> list[Pool]:
        return [Pool(name=f"../{MARKER}", devices=[Device(name="d0")]),
                Pool(name="node-1", devices=[Device(name=f"../../{MARKER}"),
                                             Device(name=f"{MARKER}\x00"),
                                             Device(name="ok-0")])]


class OneClaim:
    def __init__(self) -> None:
        self.claim: dict[str, Any] = {}

    def get_claim(self, namespace: str, name: str,
                  deadline: float | None = None) -> dict[str, Any] | None:
        return self.claim


@pytest.mark.parametrize("pool,device,share,request_name", [
    (f"../{MARKER}", "d0", None, "r"),
    ("node-1", f"../../{MARKER}", None, "r"),
    ("node-1", f"{MARKER}\x00", None, "r"),
    ("node-1", "ok-0", f"../../{MARKER}", "r"),
    ("node-1", "ok-0", f"x/{MARKER}", "r"),
    ("node-1", "ok-0", None, f"../../{MARKER}"),
])
def test_hostile_pool_device_share_names_write_nothing(
        tmp_path: Path, pool: str, device: str, share: str | None, request_name: str) -> None:
    """Names from the claim and the inventory never reach a path; a CDI name built from them
    is validated; the claim fails with a message naming it; only the checkpoint is written."""
    inventory = Inventory([HostilePlugin(DiscoveryContext(driver_name="drakit.example.com",
                                                          node_name="node-1"))])
    inventory.refresh()
    claims = OneClaim()
    specs = SpecStore(tmp_path / "cdi", "drakit.example.com", "device", host_root=None)
    checkpoint = Checkpoint(tmp_path / "data" / "checkpoint.json")
    node = NodeLogic("drakit.example.com", inventory, claims, specs, checkpoint)
    ref = ClaimRef(namespace="ns", name="hostile", uid="7c0a2f4e-2b1c-4d7e-9f00-000000000001")
    result: dict[str, Any] = {"driver": "drakit.example.com", "pool": pool, "device": device,
                              "request": request_name}
    if share is not None:
        result["shareID"] = share
    claims.claim = {"metadata": {"namespace": "ns", "name": "hostile", "uid": ref.uid},
                    "status": {"allocation": {"devices": {"results": [result]}}}}
    answer = node.prepare_claims([ref])[ref.uid]
    if request_name == "r" and share is None and device == "ok-0":
        pytest.fail("not a hostile case")
    if answer.error:
        assert answer.error.startswith("ResourceClaim ns/hostile: "), answer.error
    else:
        # a hostile request name is only a label in the gRPC answer, never a path
        assert request_name != "r"
        assert node.unprepare_claims([ref]) == {ref.uid: ""}
    assert names_with_marker(tmp_path, max_depth=10) == []
    assert {p for p in tree(tmp_path) if not p.startswith("data")} <= {"cdi"}


def test_hostile_names_through_the_real_agent(agent: DriverHarness) -> None:
    """Prepare/unprepare with hostile claim UIDs, namespaces and names over the DRA socket
    (v1 and v1beta1) next to a legitimate claim: every hostile claim fails with an error,
    the legitimate one works, and afterwards no file or directory is new anywhere: not in
    the agent's tree (byte-for-byte the same listing) and nothing carrying the marker in
    /tmp, /, /etc, the default CDI and kubelet dirs."""
    h = agent
    roots = [Path("/tmp"), Path("/"), Path("/etc"), Path("/var/run/cdi"), Path("/etc/cdi"),
             Path("/var/lib/kubelet"), h.real_root]
    before_marker = set(names_with_marker(*roots, max_depth=2))
    before = tree(h.real_root)
    good = h.allocate("path-safety-good", [h.devices()[5]])
    g = (good["metadata"]["namespace"], good["metadata"]["name"], good["metadata"]["uid"])
    hostile: list[tuple[str, str, str]] = []
    for i, bad in enumerate(HOSTILE_NAMES):
        hostile += [(bad, "name", f"uid-ns-{i}"), ("default", bad, f"uid-name-{i}"),
                    ("default", "name", bad), ("default", g[1], bad)]
    from drakit.plugin.kubelet.dra import MAX_CLAIMS_PER_REQUEST
    from drakit.plugin.kubelet.protocol import DRA_V1, DRA_V1BETA1

    for version in (DRA_V1, DRA_V1BETA1):
        raw = RawDRA(h.app.server.paths.dra, version)
        try:
            step = MAX_CLAIMS_PER_REQUEST - 1
            for i in range(0, len(hostile), step):
                batch = [*hostile[i:i + step], g]
                response = raw.prepare(batch)
                for ns, name, uid in hostile[i:i + step]:
                    assert response.claims[uid].error, (ns, name, uid)
                assert not response.claims[g[2]].error, response.claims[g[2]].error
                raw.unprepare(batch)
                reserve_anew(h, [g])  # the next batch plays the next pod using the claim
        finally:
            raw.close()
    after = tree(h.real_root)
    # only the checkpoint may be new (the good claim's prepare created it: snapshot and log)
    ckpt = str(h.checkpoint_path.relative_to(h.root))
    assert after - before <= {ckpt, f"{ckpt}.1.log"} and before - after == set(), (after ^ before)
    assert set(names_with_marker(*roots, max_depth=2)) == before_marker
    assert h.cdi_files() == []


def test_cdi_store_writes_only_its_own_file(tmp_path: Path) -> None:
    store = SpecStore(tmp_path / "cdi", "drakit.example.com", "device", host_root=None)
    dev = CDIDevice(name="d", container_edits=ContainerEdits(env=["A=1"]))
    written = set()
    for bad in HOSTILE_NAMES:
        try:
            store.write(bad, [dev])
        except CDIError as e:
            assert str(e)
        else:  # a plain UID such as "UPPER": its own file, directly in the directory
            written.add(f"cdi/drakit.example.com-device_{bad}.json")
            store.remove(bad)
    assert store.write("good-uid", [dev])
    assert tree(tmp_path) == {"cdi", "cdi/drakit.example.com-device_good-uid.json"}
    assert all("/" not in w[4:] for w in written)
