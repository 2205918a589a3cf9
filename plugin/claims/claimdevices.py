"""The side effects of one claim on this node: the discovery plugins' prepare and unprepare
hooks of its devices, each claim's hooks on a worker of their own, and its CDI spec (one spec
file per claim).

No checkpoint access here: the caller records what was done. A prepare that fails half-way
is undone (every device whose hook was started gets its unprepare hook, which must be
idempotent, and the spec is removed). A hook that returns no container edits gets
``DRAKIT_DEVICE_<NAME>=<pool>/<device>`` so the container still sees the device.

Hooks bounded per claim (:class:`HookWorkers`): a call of several claims waits for each
claim's hooks only until the call's deadline; a hook that never returns fails its own claim
(the error names the plugin, the hook and the device, and says it is still running), never
the other claims of the call. The call returns the claim's unfinished run
(:class:`HookRun`, plain data); the claim stays in single flight, holding it, until the hook
ends, so a retry gets the same answer; then what the hook did is recorded or rolled back
(:meth:`drakit.plugin.claims.prepare.Prepare.settle_late`). Workers are daemon threads kept
for reuse: a hook stuck forever holds its worker, never the process's exit (``drakit run``
ends within the gRPC grace and says which hooks were still running).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from drakit.cdi.spec import ContainerEdits
from drakit.cdi.spec import Device as CDIDevice
from drakit.discovery.plugin import ClaimRef, PreparedDevice, UnprepareRequest, env_name
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.resourceclaim import Plan
from drakit.plugin.klog import keys_of
from drakit.plugin.slices.inventory import Inventory
from drakit.plugin.types import PreparedDeviceRef, PrepareResult

log = logging.getLogger("drakit.plugin.claims.node")

#: The points inside prepare where a crash hook is called (crash tests): right after a
#: driver hook returned, after the CDI spec was written, after the completed record was
#: written.
CRASH_POINTS = ("after-driver-hook", "after-cdi-write", "after-checkpoint-write")
CrashHook = Callable[[str], None]


# -- each claim's hooks on a worker of its own -------------------------------------------

#: Idle workers kept for the next claims (a busy node runs few claims at a time).
IDLE_WORKERS = 8


class HookProgress:
    """Which hook of a claim is running: ``plugin``, ``hook`` and ``device``, set by the
    code that calls the hooks just before each call."""

    __slots__ = ("device", "hook", "plugin", "since")

    def __init__(self) -> None:
        self.plugin = ""
        self.hook = ""
        self.device = ""
        self.since = time.monotonic()

    def now(self, plugin: str, hook: str, device: str) -> None:
        self.plugin, self.hook, self.device = plugin, hook, device
        self.since = time.monotonic()

    def clear(self) -> None:
        """No hook is running any more (the work goes on with its own steps)."""
        self.plugin = self.hook = self.device = ""

    def failed(self, claim: str, error: BaseException) -> str | None:
        """The claim's error when ``error`` came out of the running hook; None when no hook
        was running (the error is the claim's own)."""
        if not self.hook:
            return None
        return (f"{claim}: the {self.hook} hook of plugin {self.plugin} for device "
                f"{self.device} failed: {type(error).__name__}: {error}")

    def still_running(self, claim: str) -> str:
        """The claim's error while the hook runs past a call's deadline."""
        return f"{claim}: {self.describe()} is still running; retry"

    def describe(self) -> str:
        """``the <hook> hook of plugin <plugin> for device <pool>/<device> (<n>s)``; once
        the hooks are done, ``its prepare past the vendor hooks``."""
        if not self.hook:
            return "its prepare past the vendor hooks"
        return (f"the {self.hook} hook of plugin {self.plugin} for device {self.device} "
                f"({time.monotonic() - self.since:.0f}s)")


class HookRun:
    """One claim's work on a worker (:class:`HookWorkers`): its :attr:`progress` while it
    runs, then its :attr:`result` or :attr:`error`. Plain data: whoever holds the run waits
    for it (:meth:`wait`); nothing is called when it ends."""

    def __init__(self, work: Callable[[HookProgress], Any], claim: str = "") -> None:
        self.work = work
        self.claim = claim  # ``ResourceClaim <namespace>/<name>``, for messages
        self.progress = HookProgress()
        self.result: Any = None
        self.error: BaseException | None = None
        self._done = threading.Event()

    def run(self) -> None:
        """The work, on the worker: its result or error kept; never raises."""
        try:
            self.result = self.work(self.progress)
        except BaseException as e:
            self.error = e
        finally:
            self._done.set()

    def wait(self, deadline: float | None) -> bool:
        """True once the work finished; False when ``deadline`` (monotonic seconds; None:
        wait for as long as the work takes) came first."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._done.wait(timeout)


class HookWorkers:
    """Daemon worker threads for :class:`HookRun`: an idle one takes a run, else a new one
    starts; at most :data:`IDLE_WORKERS` wait for work. :attr:`busy` counts runs in
    progress; :meth:`running` says which (hooks still running at shutdown)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[HookRun] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._busy = 0
        self._started = 0
        self._runs: set[HookRun] = set()

    @property
    def busy(self) -> int:
        with self._lock:
            return self._busy

    def running(self) -> list[str]:
        """Each run in progress: ``<claim>: the <hook> hook of plugin <p> for device
        <pool>/<device> (<n>s)``, longest-running first."""
        with self._lock:
            runs = sorted(self._runs, key=lambda r: r.progress.since)
        return [f"{r.claim}: {r.progress.describe()}" for r in runs]

    def submit(self, work: Callable[[HookProgress], Any], claim: str = "") -> HookRun:
        run = HookRun(work, claim)
        with self._lock:
            self._busy += 1
            self._runs.add(run)
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
            else:
                self._started += 1
                name = f"claim-hooks-{self._started}"
        self._queue.put(run)
        if spawn:
            threading.Thread(target=self._worker, name=name, daemon=True).start()
        return run

    def _worker(self) -> None:
        while True:
            run = self._queue.get()
            run.run()  # never raises: the work's error is kept on the run
            with self._lock:
                self._busy -= 1
                self._runs.discard(run)
                if self._idle >= IDLE_WORKERS:
                    return
                self._idle += 1


# -- the hooks and the CDI spec of one claim ----------------------------------------------


class SpecWriter(Protocol):
    @property
    def root_dir(self) -> Path: ...
    @property
    def file_prefix(self) -> str: ...

    def write(self, claim_uid: str, devices: list[CDIDevice], *,
              durable: bool = True) -> list[str]: ...
    def remove(self, claim_uid: str, *, durable: bool = True) -> bool: ...
    def exists(self, claim_uid: str) -> bool: ...
    def qualified_name(self, device_name: str) -> str: ...
    def list_specs(self) -> list[str]: ...


def prepare_changes_nothing(plan: Plan) -> bool:
    """True when every device's plugin declares ``prepare_changes_node = False`` (its
    prepare changes nothing on the node; :class:`drakit.discovery.plugin.DiscoveryPlugin`)."""
    return not any(type(it.plugin).changes_node_on_prepare() for it in plan.items)


class HookExit(Exception):
    """A discovery plugin's hook raised what is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``, another ``BaseException``): its claim's error, never the agent's
    exit or a kubelet call that never answers."""


class SpecRewriteError(Exception):
    """The CDI spec of a ``PrepareCompleted`` claim cannot be re-written from its record."""


class HookFailed(Exception):
    """A discovery plugin's unprepare hook raised (the cause): the message names the hook,
    the plugin and the device."""


R = TypeVar("R")


def run_hook(hook: Callable[[Any], R], request: Any) -> R:
    """``hook(request)``; a ``BaseException`` that is not an ``Exception`` becomes
    :class:`HookExit` (with the original as its cause)."""
    try:
        return hook(request)
    except Exception:
        raise
    except BaseException as e:  # a vendor's SystemExit must not end the call
        raise HookExit(f"{type(e).__name__} raised: {e}") from e


def no_crash(point: str) -> None:
    """The crash hook of production: nothing."""


def claim_ref(rec: ClaimRecord) -> ClaimRef:
    return ClaimRef(namespace=rec.namespace, name=rec.name, uid=rec.uid)


def answer(rec: ClaimRecord) -> PrepareResult:
    """The kubelet's answer for a prepared claim: per device its base request name, pool,
    device and CDI device IDs."""
    return PrepareResult(devices=[
        PreparedDeviceRef(
            request_names=(d.request.split("/", 1)[0],), pool_name=d.pool, device_name=d.device,
            cdi_device_ids=tuple(d.cdi_device_ids), share_id=d.share_id,
        )
        for d in rec.devices
    ])


class ClaimDevices:
    """Runs the hooks of a claim's devices and writes or removes its CDI spec."""

    def __init__(self, inventory: Inventory, specs: SpecWriter,
                 crash: CrashHook = no_crash) -> None:
        self.inventory = inventory
        self.specs = specs
        self.crash = crash

    def compute(self, plan: Plan, progress: HookProgress | None = None) -> list[PreparedDevice]:
        """Every device's prepare hook output, for a claim whose plugins declare that their
        ``prepare`` changes nothing on the node (:func:`prepare_changes_nothing`): run before
        admission, outside the checkpoint's file lock, so a slow vendor hook never holds
        it. Raises what a hook raised."""
        out = []
        for it in plan.items:
            if progress is not None:
                progress.now(it.plugin.name, "prepare", f"{it.alloc.pool}/{it.alloc.device}")
            out.append(run_hook(it.plugin.prepare, it.request))
            if progress is not None:
                progress.clear()  # what fails from here on is not the hook's
            self.crash("after-driver-hook")
        return out

    def completed(self, plan: Plan, started: ClaimRecord, now: float,
                  outputs: Sequence[PreparedDevice],
                  owe_status: bool = False) -> tuple[ClaimRecord, list[CDIDevice]]:
        """The claim's ``PrepareCompleted`` record (from ``started``, stamped ``now``) and
        its CDI devices, from the prepare hooks' ``outputs`` (one per device of ``plan``, in
        order). With ``owe_status`` (status writes on) a record with devices owes the claim
        its AllocatedDeviceStatus entries (``status_owed``,
        :mod:`drakit.plugin.claims.owedstatus`). Writes nothing: the caller records the
        claim and writes the spec (:meth:`write_spec`). A hook that returned no container edits gets
        ``DRAKIT_DEVICE_<NAME>=<pool>/<device>``."""
        devices: list[PreparedDeviceRecord] = []
        cdi: list[CDIDevice] = []
        for it, out in zip(plan.items, outputs, strict=True):
            edits = out.edits
            if edits.is_empty():
                edits = ContainerEdits(env=[
                    f"DRAKIT_DEVICE_{env_name(it.alloc.device)}={it.alloc.pool}/{it.alloc.device}"
                ])
            devices.append(it.record.model_copy(update={
                "edits": edits.to_json_dict(), "state": out.state,
                "status": out.status.model_dump(mode="json") if out.status else None,
                "cdi_device_ids": [self.specs.qualified_name(it.record.cdi_name)],
            }))
            cdi.append(CDIDevice(name=it.record.cdi_name, container_edits=edits))
        rec = started.model_copy(update={
            "phase": "PrepareCompleted", "devices": devices, "prepared_at": now,
            "status_owed": owe_status and bool(devices)})
        return rec, cdi

    def write_spec(self, claim_uid: str, cdi: list[CDIDevice]) -> None:
        """Write the claim's CDI spec (one file per claim). Not made durable (no directory
        fsync; its content is): the checkpoint record is, and after a power loss the
        start-up recovery re-writes the spec of every completed record that lacks one
        (:mod:`drakit.plugin.claims.recovery`). Raises what the CDI store raised."""
        self.specs.write(claim_uid, cdi, durable=False)
        self.crash("after-cdi-write")

    def prepare(self, plan: Plan, started: ClaimRecord, now: float,
                progress: HookProgress | None = None,
                owe_status: bool = False) -> ClaimRecord:
        """Run every device's prepare hook, write the claim's CDI spec; return the
        ``PrepareCompleted`` record (from ``started``, stamped ``now``; ``owe_status`` as for
        :meth:`completed`). On any error the claim is undone (see the module docstring) and
        the error raised."""
        outputs: list[PreparedDevice] = []
        begun = 0  # devices whose hook was started: a hook that fails half-way is undone too
        try:
            for it in plan.items:
                if progress is not None:
                    progress.now(it.plugin.name, "prepare", f"{it.alloc.pool}/{it.alloc.device}")
                begun += 1
                outputs.append(run_hook(it.plugin.prepare, it.request))
                if progress is not None:
                    progress.clear()  # what fails from here on is not the hook's
                self.crash("after-driver-hook")
            rec, cdi = self.completed(plan, started, now, outputs, owe_status)
            self.write_spec(plan.ref.uid, cdi)
        except Exception:
            # each device's unprepare hook gets the state its prepare hook returned
            undo = [it.record.model_copy(update={"state": out.state})
                    for it, out in zip(plan.items, outputs, strict=False)]
            self.rollback(plan.ref, undo + [it.record for it in plan.items[len(undo):begun]])
            raise
        return rec

    def ensure_spec(self, rec: ClaimRecord) -> bool:
        """Re-write the CDI spec of a ``PrepareCompleted`` claim from its record when it went
        missing (e.g. /var/run/cdi is a tmpfs after a reboot). Returns whether it was
        re-written. Raises SpecRewriteError naming the claim when it cannot be."""
        try:
            if self.specs.exists(rec.uid):
                return False
            self.specs.write(rec.uid, [
                CDIDevice(name=d.cdi_name, container_edits=ContainerEdits.model_validate(d.edits))
                for d in rec.devices])
        except Exception as e:
            raise SpecRewriteError(f"re-writing CDI spec of claim {rec.uid}: {e}") from e
        log.info("re-wrote missing CDI spec", extra={"claim_uid": rec.uid})
        return True

    def answer_from_record(self, rec: ClaimRecord) -> PrepareResult:
        """The kubelet's answer for a ``PrepareCompleted`` claim (``reused``), its CDI spec
        re-written first when missing (:meth:`ensure_spec`); the error when it cannot be."""
        try:
            self.ensure_spec(rec)
        except SpecRewriteError as e:
            return PrepareResult(error=str(e))
        result = answer(rec)
        result.reused = True
        return result

    def unprepare(self, rec: ClaimRecord) -> None:
        """Every device's unprepare hook; raises what the first failing hook raised."""
        ref = claim_ref(rec)
        for d in rec.devices:
            self._unprepare_device(ref, d)

    def rollback(self, ref: ClaimRef, devices: list[PreparedDeviceRecord]) -> None:
        """Undo a claim locally: unprepare hooks of ``devices`` and its CDI spec. Errors are
        logged, not raised."""
        for d in devices:
            try:
                self._unprepare_device(ref, d)
            except Exception:
                log.exception("unprepare hook during rollback failed", extra=keys_of(ref))
        try:
            self.specs.remove(ref.uid)
        except Exception:
            log.exception("removing CDI spec during rollback failed", extra=keys_of(ref))

    def _unprepare_device(self, ref: ClaimRef, d: PreparedDeviceRecord) -> None:
        plugin = self.inventory.plugin_named(d.plugin)
        if plugin is None:
            log.warning("plugin %s of device %s/%s is not loaded; skipping its unprepare hook",
                        d.plugin, d.pool, d.device, extra=keys_of(ref))
            return
        try:
            run_hook(plugin.unprepare, UnprepareRequest(
                claim=ref, request=d.request, pool=d.pool, device=d.device,
                share_id=d.share_id, state=d.state,
            ))
        except Exception as e:
            raise HookFailed(
                f"the unprepare hook of plugin {d.plugin} for device {d.pool}/{d.device} "
                f"failed: {type(e).__name__}: {e}") from e
