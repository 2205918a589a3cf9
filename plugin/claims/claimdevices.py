"""The side effects of one claim on this node: the discovery plugins' prepare and unprepare
hooks of its devices and its CDI spec (one spec file per claim).

No checkpoint access here: the caller records what was done. A prepare that fails half-way
is undone (every device whose hook was started gets its unprepare hook, which must be
idempotent, and the spec is removed). A hook that returns no container edits gets
``DRAKIT_DEVICE_<NAME>=<pool>/<device>`` so the container still sees the device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from drakit.cdi.spec import ContainerEdits
from drakit.cdi.spec import Device as CDIDevice
from drakit.discovery.plugin import ClaimRef, PreparedDevice, UnprepareRequest, env_name
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.claimplan import Plan
from drakit.plugin.claims.hookrun import HookProgress
from drakit.plugin.slices.inventory import Inventory
from drakit.plugin.types import PreparedDeviceRef, PrepareResult

log = logging.getLogger("drakit.plugin.claims.node")

#: The points inside prepare where a crash hook is called (crash tests): right after a
#: driver hook returned, after the CDI spec was written, after the completed record was
#: written.
CRASH_POINTS = ("after-driver-hook", "after-cdi-write", "after-checkpoint-write")
CrashHook = Callable[[str], None]


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


def without_prepare_hook(plan: Plan) -> bool:
    """True when every device's plugin declares ``prepare_changes_node = False`` (its
    prepare changes nothing on the node; :class:`drakit.discovery.plugin.DiscoveryPlugin`)."""
    return not any(type(it.plugin).changes_node_on_prepare() for it in plan.items)


class HookExit(Exception):
    """A discovery plugin's hook raised what is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``, another ``BaseException``): its claim's error, never the agent's
    exit or a kubelet call that never answers."""


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


def log_context(ref: ClaimRef) -> dict[str, str]:
    return {"claim_uid": ref.uid, "claim": f"{ref.namespace}/{ref.name}"}


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
        ``prepare`` changes nothing on the node (:func:`without_prepare_hook`): run before
        admission, outside the checkpoint's file lock, so a slow vendor hook never holds
        it. Raises what a hook raised."""
        out = []
        for it in plan.items:
            if progress is not None:
                progress.now(it.plugin.name, "prepare", f"{it.alloc.pool}/{it.alloc.device}")
            out.append(run_hook(it.plugin.prepare, it.request))
            if progress is not None:
                progress.clear()  # what fails from here on is not the hook's
        return out

    def prepare(self, plan: Plan, started: ClaimRecord, now: float,
                outputs: Sequence[PreparedDevice] | None = None,
                progress: HookProgress | None = None) -> ClaimRecord:
        """Run every device's prepare hook (or take ``outputs``, from :meth:`compute`),
        write the claim's CDI spec; return the ``PrepareCompleted`` record (from
        ``started``, stamped ``now``). On any error the claim is undone (see the module
        docstring) and the error raised."""
        devices: list[PreparedDeviceRecord] = []
        cdi: list[CDIDevice] = []
        try:
            for i, it in enumerate(plan.items):
                # Listed before the hook runs: a hook that fails half-way is undone too.
                devices.append(it.record)
                if outputs is not None:
                    out = outputs[i]
                else:
                    if progress is not None:
                        progress.now(it.plugin.name, "prepare",
                                     f"{it.alloc.pool}/{it.alloc.device}")
                    out = run_hook(it.plugin.prepare, it.request)
                    if progress is not None:
                        progress.clear()  # what fails from here on is not the hook's
                self.crash("after-driver-hook")
                edits = out.edits
                if edits.is_empty():
                    edits = ContainerEdits(env=[
                        f"DRAKIT_DEVICE_{env_name(it.alloc.device)}={it.alloc.pool}/{it.alloc.device}"
                    ])
                devices[-1] = it.record.model_copy(update={
                    "edits": edits.to_json_dict(), "state": out.state,
                    "status": out.status.model_dump(mode="json") if out.status else None,
                })
                cdi.append(CDIDevice(name=it.record.cdi_name, container_edits=edits))
            # Not made durable (no directory fsync; its content is): the checkpoint record
            # written after it is, and after a power loss the start-up recovery re-writes the
            # spec of every completed record that lacks one (drakit.plugin.claims.recovery).
            ids = self.specs.write(plan.ref.uid, cdi, durable=False)
            self.crash("after-cdi-write")
        except Exception:
            self.rollback(plan.ref, devices)
            raise
        by_name = {i.rsplit("=", 1)[-1]: i for i in ids}
        done = [d.model_copy(update={"cdi_device_ids": [
            by_name.get(d.cdi_name, self.specs.qualified_name(d.cdi_name))]}) for d in devices]
        return started.model_copy(update={
            "phase": "PrepareCompleted", "devices": done, "prepared_at": now})

    def rewrite_spec(self, rec: ClaimRecord) -> tuple[PrepareResult, bool]:
        """The answer for a completed claim, re-writing its CDI spec first when it went
        missing (e.g. /var/run/cdi is a tmpfs after a reboot). Returns (answer, whether
        the spec was re-written); the answer holds the error when the write failed."""
        try:
            if self.specs.exists(rec.uid):
                return answer(rec), False
            self.specs.write(rec.uid, [
                CDIDevice(name=d.cdi_name, container_edits=ContainerEdits.model_validate(d.edits))
                for d in rec.devices])
        except Exception as e:
            return PrepareResult(error=f"re-writing CDI spec of claim {rec.uid}: {e}"), False
        log.info("re-wrote missing CDI spec", extra={"claim_uid": rec.uid})
        return answer(rec), True

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
                log.exception("unprepare hook during rollback failed", extra=log_context(ref))
        try:
            self.specs.remove(ref.uid)
        except Exception:
            log.exception("removing CDI spec during rollback failed", extra=log_context(ref))

    def _unprepare_device(self, ref: ClaimRef, d: PreparedDeviceRecord) -> None:
        plugin = self.inventory.plugin_named(d.plugin)
        if plugin is None:
            log.warning("plugin %s of device %s/%s is not loaded; skipping its unprepare hook",
                        d.plugin, d.pool, d.device, extra=log_context(ref))
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
