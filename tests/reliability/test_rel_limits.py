"""Size limits: the kubelet receives at most 4 MiB per response (grpc-go default).

drakit's bound: at most MAX_CLAIMS_PER_REQUEST distinct claims per NodePrepareResources
(more are refused, every claim with a short error, nothing prepared), at most 32 devices per
claim (AllocationResultsMaxSize), names within the API's limits, error strings cut to
MAX_ERROR_BYTES. The largest answer these allow is built here with the longest legal names
and received by a client with the default 4 MiB limit.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from reliability_helpers import RawDRA

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.kubelet.dra import MAX_CLAIMS_PER_REQUEST, MAX_ERROR_BYTES
from drakit.plugin.kubelet.protocol import DRA_MODULES, DRA_V1, DRA_V1BETA1
from drakit.plugin.kubelet.server import PluginServer
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.types import PreparedDeviceRef, PrepareResult

KUBELET_MAX_RECEIVE = 4 * 1024 * 1024
MAX_RESULTS_PER_CLAIM = 32  # AllocationResultsMaxSize (resource.k8s.io)
DRIVER = "d" * 59 + ".com"  # 63 bytes: the longest driver name
CLASS = "c" * 63


class WorstCaseNode:
    """Answers every claim with 32 devices carrying the longest legal names, or (for claims
    named ``err-*``) a megabyte-long error."""

    def prepare_claims(self, claims: list[ClaimRef],
                       deadline: float | None = None) -> dict[str, PrepareResult]:
        out = {}
        for c in claims:
            if c.name.startswith("err"):
                out[c.uid] = PrepareResult(error="e" * (1024 * 1024))
                continue
            devices = []
            for i in range(MAX_RESULTS_PER_CLAIM):
                device = f"{i:02d}" + "x" * 61  # DNS label, 63 bytes
                share = "s" * 128
                cdi_name = f"{c.uid}-{device}-{share}"
                devices.append(PreparedDeviceRef(
                    request_names=("r" * 63,),
                    pool_name=("p" * 63 + ".") * 3 + "p" * 61,  # 253 bytes
                    device_name=device,
                    cdi_device_ids=(f"{DRIVER}/{CLASS}={cdi_name}",),
                    share_id=share,
                ))
            out[c.uid] = PrepareResult(devices=devices)
        return out

    def unprepare_claims(self, claims: list[ClaimRef],
                         deadline: float | None = None) -> dict[str, str]:
        return {c.uid: "" for c in claims}


@pytest.fixture
def worst_server() -> Iterator[PluginServer]:
    with tempfile.TemporaryDirectory(prefix="drk-lim-") as tmp:
        server = PluginServer(DRIVER, WorstCaseNode(), None, Path(tmp) / "reg",
                              Path(tmp) / "plugins", stop_grace=0.5)
        server.start()
        try:
            yield server
        finally:
            server.stop(grace=0.5)


def _claims(n: int, prefix: str = "c") -> list[tuple[str, str, str]]:
    ns = "n" * 63
    return [(ns, f"{prefix}-{i}-" + "m" * 240, f"{i:04d}" + "u" * 124) for i in range(n)]


@pytest.mark.parametrize("version", [DRA_V1, DRA_V1BETA1])
def test_largest_allowed_answer_fits_in_4_mib(worst_server: PluginServer, version: str) -> None:
    pb2, grpc_mod = DRA_MODULES[version]
    # a client with grpc's default receive limit, like the kubelet
    channel = grpc.insecure_channel(f"unix:{worst_server.paths.dra}")
    try:
        stub = grpc_mod.DRAPluginStub(channel)
        claims = _claims(MAX_CLAIMS_PER_REQUEST)
        request = pb2.NodePrepareResourcesRequest(
            claims=[pb2.Claim(namespace=a, name=b, uid=c) for a, b, c in claims])
        response = stub.NodePrepareResources(request, timeout=60)
    finally:
        channel.close()
    size = response.ByteSize()
    print(f"\n{version}: largest allowed answer {MAX_CLAIMS_PER_REQUEST} claims x "
          f"{MAX_RESULTS_PER_CLAIM} devices = {size} bytes "
          f"({100 * size / KUBELET_MAX_RECEIVE:.0f} % of 4 MiB)")
    assert len(response.claims) == MAX_CLAIMS_PER_REQUEST
    assert all(len(e.devices) == MAX_RESULTS_PER_CLAIM for e in response.claims.values())
    assert size < KUBELET_MAX_RECEIVE


def test_errors_are_cut(worst_server: PluginServer) -> None:
    raw = RawDRA(worst_server.paths.dra)
    try:
        response = raw.prepare(_claims(MAX_CLAIMS_PER_REQUEST, "err"))
    finally:
        raw.close()
    assert all(0 < len(e.error.encode()) <= MAX_ERROR_BYTES for e in response.claims.values())
    assert response.ByteSize() < KUBELET_MAX_RECEIVE


def test_too_many_claims_are_refused(agent: DriverHarness) -> None:
    """One claim over the bound: every claim gets the same short error and the API is not
    asked; at the bound: every claim is answered on its own."""
    h = agent
    raw = RawDRA(h.app.server.paths.dra)
    try:
        good = h.allocate("limits-good", [h.devices()[6]])
        g = (good["metadata"]["namespace"], good["metadata"]["name"], good["metadata"]["uid"])
        over = [*[("default", f"none-{i}", f"none-{i}") for i in range(MAX_CLAIMS_PER_REQUEST)],
                g]
        h.apiserver.clear_requests()
        response = raw.prepare(over)
        assert set(response.claims) == {c[2] for c in over}
        errors = {e.error for e in response.claims.values()}
        assert len(errors) == 1 and "too many claims" in errors.pop()
        assert h.apiserver.requests(resource="resourceclaims") == []
        assert h.app.checkpoint.get(g[2]) is None
        at_bound = over[-MAX_CLAIMS_PER_REQUEST:]
        response = raw.prepare(at_bound)
        assert not response.claims[g[2]].error
        assert all("not found" in response.claims[c[2]].error for c in at_bound[:-1])
        assert raw.unprepare(at_bound).claims[g[2]].error == ""
    finally:
        raw.close()
