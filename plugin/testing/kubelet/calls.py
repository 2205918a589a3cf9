"""The fake kubelet's DRA client (:mod:`drakit.plugin.testing.kubelet.fake`): NodePrepareResources
and NodeUnprepareResources with the registered node-API version and the kubelet's 45 s
deadline, the answer checked like the kubelet does (an entry for every requested claim, none
for an unknown UID), and the health stream.

Errors (defined here): :class:`KubeletCallError` for a gRPC error,
:class:`KubeletCheckError` for a broken answer or an unregistered driver.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from drakit.plugin.kubelet.protocol import DRA_MODULES, DRA_V1, HEALTH_V1, HEALTH_V1ALPHA1
from drakit.plugin.testing.kubelet.health import HealthWatch
from drakit.plugin.testing.kubelet.model import (
    CALL_TIMEOUT,
    ClaimLike,
    ClaimPrepareResult,
    PreparedDeviceResult,
    claim_tuple,
)
from drakit.plugin.testing.kubelet.plugins import PluginInstance, PluginTable

__all__ = ["KubeletCallError", "KubeletCheckError", "KubeletDRAClient"]


class KubeletCheckError(Exception):
    """The plugin's answer broke a rule the kubelet checks (missing or unknown claim UID)."""


class KubeletCallError(Exception):
    """The RPC itself failed (gRPC status other than OK); ``code`` holds the status code."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class KubeletDRAClient:
    """DRA calls to the most recently registered instance of a driver in ``plugins``."""

    def __init__(self, plugins: PluginTable) -> None:
        self._plugins = plugins

    def node_prepare_resources(
        self, driver_name: str, claims: Iterable[ClaimLike], timeout: float = CALL_TIMEOUT
    ) -> dict[str, ClaimPrepareResult]:
        """Call NodePrepareResources on the driver's current instance with the chosen version.

        ``claims`` are ClaimRefs or ``(namespace, name, uid)`` tuples, sent as given
        (duplicates included). Returns claim UID → :class:`ClaimPrepareResult`. Raises
        :class:`KubeletCallError` for a gRPC error, :class:`KubeletCheckError` when the
        answer misses a requested claim or names an unknown one.
        """
        inst = self._require(driver_name)
        pb2, grpc_mod = DRA_MODULES[inst.plugin.dra_version]
        request = pb2.NodePrepareResourcesRequest(claims=self._claims(pb2, claims))
        stub = grpc_mod.DRAPluginStub(inst.channel)
        response = self._call("NodePrepareResources", stub.NodePrepareResources, request, timeout)
        self._check("NodePrepareResources", request, response)
        with_share = inst.plugin.dra_version == DRA_V1
        out: dict[str, ClaimPrepareResult] = {}
        for uid, entry in response.claims.items():
            devices = tuple(
                PreparedDeviceResult(
                    request_names=tuple(d.request_names),
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=tuple(d.cdi_device_ids),
                    share_id=d.share_id if with_share and d.HasField("share_id") else None,
                )
                for d in entry.devices
            )
            out[uid] = ClaimPrepareResult(devices=() if entry.error else devices,
                                          error=entry.error)
        return out

    def node_unprepare_resources(
        self, driver_name: str, claims: Iterable[ClaimLike], timeout: float = CALL_TIMEOUT
    ) -> dict[str, str]:
        """Call NodeUnprepareResources; returns claim UID → error ("" on success). Raises
        like :meth:`node_prepare_resources`."""
        inst = self._require(driver_name)
        pb2, grpc_mod = DRA_MODULES[inst.plugin.dra_version]
        request = pb2.NodeUnprepareResourcesRequest(claims=self._claims(pb2, claims))
        stub = grpc_mod.DRAPluginStub(inst.channel)
        response = self._call(
            "NodeUnprepareResources", stub.NodeUnprepareResources, request, timeout
        )
        self._check("NodeUnprepareResources", request, response)
        return {uid: entry.error for uid, entry in response.claims.items()}

    def watch_health(self, driver_name: str, version: str | None = None) -> HealthWatch:
        """Open the health stream of the driver's current instance.

        ``version`` (``v1.DRAResourceHealth`` / ``v1alpha1.DRAResourceHealth``) defaults to
        v1 when advertised, else v1alpha1; raises :class:`KubeletCheckError` when the plugin
        advertised no health service. The watch is cancelled when the instance deregisters.
        """
        inst = self._require(driver_name)
        advertised = inst.plugin.health_versions
        if version is None:
            for candidate in (HEALTH_V1, HEALTH_V1ALPHA1):
                if candidate in advertised:
                    version = candidate
                    break
            else:
                raise KubeletCheckError(f"driver {driver_name} advertises no health service")
        watch = HealthWatch(inst.channel, version, driver_name)
        with self._plugins.cond:
            inst.watches.append(watch)
        return watch

    def _require(self, driver_name: str) -> PluginInstance:
        inst = self._plugins.current(driver_name)
        if inst is None:
            raise KubeletCheckError(f"DRA driver {driver_name} is not registered")
        return inst

    @staticmethod
    def _claims(pb2: Any, claims: Iterable[ClaimLike]) -> list[Any]:
        out = []
        for c in claims:
            namespace, name, uid = claim_tuple(c)
            out.append(pb2.Claim(namespace=namespace, name=name, uid=uid))
        return out

    @staticmethod
    def _call(method: str, fn: Any, request: Any, timeout: float) -> Any:
        try:
            return fn(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise KubeletCallError(f"{method}: {exc.code()}: {exc.details()}", exc.code()) from exc

    @staticmethod
    def _check(method: str, request: Any, response: Any) -> None:
        requested = {c.uid for c in request.claims}
        for uid in response.claims:
            if uid not in requested:
                raise KubeletCheckError(f"{method} returned result for unknown claim UID {uid}")
        missing = requested - set(response.claims)
        if missing:
            raise KubeletCheckError(f"{method} skipped {len(missing)} ResourceClaims")
