"""The chaos run's workload: drakit's inventory on the node, the claim templates and the
named claim pods use, and the pods themselves, created and deleted continuously.

Inventory (the ``example`` discoverer, inline): plain devices ``gpu-0`` … ``gpu-9``
(``gpu-9`` is the named claim's), a consumable ``shared-gpu-0`` (40Gi of memory, each share
4Gi) and a partitionable ``mig-gpu-0`` (counter set memory 40Gi / compute 98; four
``1g-10gb`` partitions fill its memory exactly). Every device maps a device node of its own
kind into the container (``/dev/chaos-gpu<N>``, ``/dev/chaos-shared0``, ``/dev/chaos-mig0``;
``/dev/null`` on the host).

Each pod holds one to three claims of the kinds ``gpu`` (template, up to two), ``slice``
(template, a 1g-10gb partition), ``share`` (template, 4Gi of the shared device) and
``named`` (the one ResourceClaim ``chaos-named`` several pods share). At most
:data:`MAX_LIVE` pods exist at once (their claims included), so the devices always suffice:
a pod that waits, waits for the node, never for capacity. The container checks at start
that every device of its claims is there (the ``DRAKIT_DEVICE_<NAME>`` env var of the CDI
spec and the device's node), prints ``CHAOS-OK`` and sleeps; otherwise it prints
``CHAOS-MISSING`` with what is missing and exits 1 (the message lands in the pod's status).
(``CHAOS_DEV_ROOT``, unset in the pods, puts the device nodes under another root for a test
of the script.)
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from realnode.node_helpers import attr, claim, claim_template, device_class, request

from drakit.discovery.plugin import env_name
from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.real.node import BUSYBOX_IMAGE, RealNode

NAMESPACE = "chaos"
PLAIN_DEVICES = 10
NAMED_INDEX = PLAIN_DEVICES - 1
NAMED_CLAIM = "chaos-named"
TEMPLATES = {"gpu": "chaos-gpu", "slice": "chaos-slice", "share": "chaos-share"}
MAX_LIVE = 4
"""Pods (with the claims made for them) that exist at once: 4 pods x 2 gpu claims fit the 9
template GPUs, 4 slices fill mig-gpu-0's counters exactly."""
SHARE_MEMORY = "4Gi"
OK_MARK = "CHAOS-OK"
MISSING_MARK = "CHAOS-MISSING"
#: Counters of mig-gpu-0 and what each of its devices consumes (``whole``: the device itself).
COUNTER_SET = "mig-gpu-0-counters"
COUNTERS = {"memory": 40 << 30, "compute": 98}
PROFILE_COUNTERS = {"whole": COUNTERS,
                    "1g-10gb": {"memory": 10 << 30, "compute": 14},
                    "2g-20gb": {"memory": 20 << 30, "compute": 28}}
SHARED_DEVICE = "shared-gpu-0"
SHARED_MEMORY = 40 << 30


def inventory() -> dict[str, Any]:
    """The ``example`` discoverer's options for the chaos node."""
    def node(path: str) -> list[dict[str, str]]:
        return [{"path": path, "hostPath": "/dev/null"}]

    devices: list[dict[str, Any]] = [
        {"name": f"gpu-{i}", "attributes": {"index": i, "kind": "plain"},
         "deviceNodes": node(f"/dev/chaos-gpu{i}")} for i in range(PLAIN_DEVICES)]
    devices.append({
        "name": SHARED_DEVICE, "allowMultipleAllocations": True,
        "attributes": {"kind": "shared"},
        "capacity": {"memory": {"value": "40Gi", "requestPolicy": {
            "default": "1Gi", "validRange": {"min": "1Gi", "max": "40Gi", "step": "1Gi"}}}},
        "deviceNodes": node("/dev/chaos-shared0")})
    partitionable = [{
        "name": "mig-gpu-0", "attributes": {"kind": "partitionable"},
        "counters": {"memory": "40Gi", "compute": "98"}, "whole": True,
        "deviceNodes": node("/dev/chaos-mig0"),
        "partitions": [{"profile": "1g-10gb", "count": 4,
                        "counters": {"memory": "10Gi", "compute": "14"}},
                       {"profile": "2g-20gb", "count": 2,
                        "counters": {"memory": "20Gi", "compute": "28"}}]}]
    return {"devices": devices, "partitionable": partitionable}


def device_node(device: str) -> str:
    """The container path of ``device``'s node (see :func:`inventory`)."""
    if device.startswith("gpu-"):
        return f"/dev/chaos-gpu{device.removeprefix('gpu-')}"
    if device == SHARED_DEVICE:
        return "/dev/chaos-shared0"
    if device.startswith("mig-gpu-0"):
        return "/dev/chaos-mig0"
    raise ValueError(f"device {device!r} is not in the chaos inventory")


def device_env(pool: str, device: str) -> str:
    """The env entry drakit's CDI spec gives a container for ``device``."""
    return f"DRAKIT_DEVICE_{env_name(device)}={pool}/{device}"


def profile_of(device: str) -> str | None:
    """``whole``, the partition profile of a mig-gpu-0 device, or None (not a partition)."""
    if device == "mig-gpu-0":
        return "whole"
    for profile in PROFILE_COUNTERS:
        if device.startswith(f"mig-gpu-0-{profile}-"):
            return profile
    return None


def setup_objects(node: RealNode) -> None:
    """The namespace, drakit's DeviceClass, the three templates and the named claim."""
    node.ensure_namespace(NAMESPACE)
    plain = f'{attr("kind")} == "plain"'
    node.cp.apply_manifests([
        device_class(),
        claim_template(NAMESPACE, TEMPLATES["gpu"],
                       request("gpu", f'{plain} && {attr("index")} < {NAMED_INDEX}')),
        claim_template(NAMESPACE, TEMPLATES["slice"],
                       request("slice", f'{attr("profile")} == "1g-10gb"')),
        claim_template(NAMESPACE, TEMPLATES["share"],
                       request("share", f'{attr("kind")} == "shared"',
                               capacity={"memory": SHARE_MEMORY})),
        claim(NAMESPACE, NAMED_CLAIM,
              request("gpu", f'{plain} && {attr("index")} == {NAMED_INDEX}')),
    ])


CHECK_SCRIPT = f"""
fail=""
for kv in `env | grep '^DRAKIT_DEVICE_'`; do
  dev=${{kv#*=}}; dev=${{dev#*/}}
  case "$dev" in
    gpu-*) n=$CHAOS_DEV_ROOT/dev/chaos-gpu${{dev#gpu-}} ;;
    {SHARED_DEVICE}) n=$CHAOS_DEV_ROOT/dev/chaos-shared0 ;;
    mig-gpu-0*) n=$CHAOS_DEV_ROOT/dev/chaos-mig0 ;;
    *) n=/nonexistent ;;
  esac
  [ -c "$n" ] || fail="$fail node:$n:$dev"
done
g=`env | grep -c '^DRAKIT_DEVICE_GPU_'`
s=`env | grep -c '^DRAKIT_DEVICE_MIG_GPU_0_'`
h=`env | grep -c '^DRAKIT_DEVICE_SHARED_GPU_0='`
[ "$g" = "$WANT_GPU" ] || fail="$fail gpu:$g/$WANT_GPU"
[ "$s" = "$WANT_SLICE" ] || fail="$fail slice:$s/$WANT_SLICE"
[ "$h" = "$WANT_SHARE" ] || fail="$fail share:$h/$WANT_SHARE"
if [ -n "$fail" ]; then echo "{MISSING_MARK}$fail"; exit 1; fi
echo {OK_MARK}
exec /bin/busybox sleep 1000000
"""


def pod_manifest(name: str, node_name: str, kinds: list[str]) -> dict[str, Any]:
    """A pod on ``node_name`` with one pod claim per entry of ``kinds``."""
    claims = [{"name": f"c{i}-{kind}",
               **({"resourceClaimName": NAMED_CLAIM} if kind == "named"
                  else {"resourceClaimTemplateName": TEMPLATES[kind]})}
              for i, kind in enumerate(kinds)]
    want = {"WANT_GPU": kinds.count("gpu") + kinds.count("named"),
            "WANT_SLICE": kinds.count("slice"), "WANT_SHARE": kinds.count("share")}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "chaos"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "hostNetwork": True, "automountServiceAccountToken": False,
            "enableServiceLinks": False, "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/busybox", "sh", "-c", CHECK_SCRIPT],
                "env": [{"name": k, "value": str(v)} for k, v in want.items()],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "resources": {"claims": [{"name": c["name"]} for c in claims]}}],
            "resourceClaims": claims,
        },
    }


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pod_claim_names(pod: dict[str, Any]) -> list[str]:
    """The ResourceClaim names a pod uses (named ones, and those made from its templates as
    far as ``status.resourceClaimStatuses`` lists them)."""
    made = {s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = []
    for c in pod["spec"].get("resourceClaims") or []:
        name = c.get("resourceClaimName") or made.get(c["name"])
        if name:
            out.append(name)
    return out


@dataclass
class PodRecord:
    """One pod of the workload, times on the run's clock (seconds since its start)."""

    name: str
    kinds: list[str]
    lifetime: float
    created: float
    uid: str = ""
    scheduled: float | None = None
    ready: float | None = None
    deleted: float | None = None
    forced: bool = False
    gone: float | None = None
    last: dict[str, Any] = field(default_factory=dict)


class Workload:
    """Creates and deletes pods (seeded ``rng``) on ``node`` while :attr:`running`; one
    :meth:`tick` a second from :meth:`run`. Every API error is counted and the tick retried
    (the API server may be down: that is the nemesis' doing)."""

    def __init__(self, node: RealNode, rng: random.Random, clock: Callable[[], float],
                 log: Callable[[str], None], create_every: tuple[float, float] = (1.0, 4.0),
                 lifetime: tuple[float, float] = (8.0, 40.0)) -> None:
        self.node = node
        self.rng = rng
        self.clock = clock
        self.log = log
        self.create_every = create_every
        self.lifetime = lifetime
        self.pods: dict[str, PodRecord] = {}
        self.creating = True
        self.deleting = True
        self.api_errors = 0
        self.ticks = 0
        self._serial = 0
        self._next_create = 0.0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ observing

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The pods and ResourceClaims of the namespace (raises ApiError / OSError)."""
        cp = self.node.cp
        return cp.list_objects("pods", NAMESPACE), cp.list_objects("resourceclaims", NAMESPACE)

    def _observe(self, pods: list[dict[str, Any]], now: float) -> None:
        seen = set()
        for p in pods:
            rec = self.pods.get(p["metadata"]["name"])
            if rec is None:
                continue
            if rec.uid and rec.uid != p["metadata"]["uid"]:
                continue
            seen.add(rec.name)
            rec.uid = p["metadata"]["uid"]
            rec.last = p
            if rec.scheduled is None and p["spec"].get("nodeName"):
                rec.scheduled = now
            if rec.ready is None and pod_ready(p):
                rec.ready = now
        for rec in self.pods.values():
            if rec.gone is None and rec.uid and rec.name not in seen:
                rec.gone = now

    # ------------------------------------------------------------------ acting

    def _live(self, pods: list[dict[str, Any]], claims: list[dict[str, Any]]) -> int:
        """Pods that exist, plus pods gone whose template claims still exist."""
        uids = {p["metadata"]["uid"] for p in pods}
        orphans = {ref["uid"] for c in claims
                   for ref in c["metadata"].get("ownerReferences") or []
                   if ref.get("kind") == "Pod" and ref["uid"] not in uids}
        return len(uids) + len(orphans)

    def _kinds(self) -> list[str]:
        n = self.rng.choice((1, 2, 2, 3, 3))
        pool = ["gpu", "gpu", "slice", "share", "named"]
        self.rng.shuffle(pool)
        return sorted(pool[:n])

    def _create(self, now: float) -> None:
        self._serial += 1
        name = f"p{self._serial:04d}"
        kinds = self._kinds()
        rec = PodRecord(name, kinds, self.rng.uniform(*self.lifetime), now)
        self.node.cp.create_object("pods", pod_manifest(name, self.node.node_name, kinds))
        self.pods[name] = rec
        self.log(f"workload: created pod {name} claims {kinds}")

    def _delete(self, rec: PodRecord, now: float) -> None:
        force = self.rng.random() < 0.1
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{rec.name}"
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": rec.uid}} if force else {
                "kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": rec.uid}}
        try:
            self.node.cp.request("DELETE", path, body)
        except ApiError as e:
            if e.code not in (404, 409):
                raise
        rec.deleted, rec.forced = now, force
        self.log(f"workload: deleted pod {rec.name}{' (forced)' if force else ''}")

    def tick(self) -> None:
        now = self.clock()
        self.ticks += 1
        try:
            pods, claims = self.snapshot()
        except (ApiError, OSError) as e:
            self.api_errors += 1
            if self.api_errors % 10 == 1:
                self.log(f"workload: API unavailable ({str(e)[:120]})")
            return
        with self._lock:
            self._observe(pods, now)
            try:
                if self.deleting:
                    for rec in list(self.pods.values()):
                        if (rec.deleted is None and rec.ready is not None and rec.uid
                                and now - rec.ready >= rec.lifetime):
                            self._delete(rec, now)
                live = self._live(pods, claims)
                if self.creating and live < MAX_LIVE and now >= self._next_create:
                    self._create(now)
                    self._next_create = now + self.rng.uniform(*self.create_every)
            except (ApiError, OSError) as e:
                self.api_errors += 1
                self.log(f"workload: API call failed ({str(e)[:120]})")

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.tick()
            stop.wait(1.0)

    def records(self) -> list[PodRecord]:
        with self._lock:
            return list(self.pods.values())

