"""Registration lifecycle end to end: rejection, kubelet restart, non-default kubelet roots."""

from __future__ import annotations

import stat
from collections.abc import Callable

import pytest
from contract_helpers import DRIVER, NODE, uid_of

from drakit.plugin.testing.harness import DriverHarness


def test_rejection_not_ready_then_accepted(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory()
    h.wait_for(lambda: h.app.readiness() == (True, []), 10, "ready")
    before = h.kubelet.registration_count(DRIVER)
    h.kubelet.set_reject_reason("driver blocked by node policy")
    h.kubelet.simulate_restart()  # forget the plugin; it registers again and is refused
    h.kubelet.wait_rejected(timeout=15)
    h.wait_for(lambda: any("driver blocked by node policy" in r for r in h.app.readiness()[1]),
               10, "readiness to name the kubelet's reason")
    ready, reasons = h.app.readiness()
    assert not ready
    assert any(r.startswith("not registered with the kubelet") for r in reasons)
    # The fake kubelet re-dials a socket only when its file is new: a second rejection
    # proves the plugin re-created its registration socket after the first.
    h.kubelet.wait_rejected(timeout=15, min_count=2)
    h.kubelet.set_reject_reason(None)
    h.kubelet.wait_registered(DRIVER, timeout=20, min_count=before + 1)
    h.wait_for(lambda: h.app.readiness()[0], 10, "ready again")
    claim = h.allocate("after-reject", [h.devices()[0]])
    assert h.prepare(claim)[uid_of(claim)].error == ""


@pytest.mark.both_apiservers
def test_kubelet_restart_reregisters_and_republishes(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    h = harness_factory()
    published = sorted(h.devices())
    claim = h.allocate("kept", [h.devices()[0]])
    assert h.prepare(claim)[uid_of(claim)].error == ""
    before = h.kubelet.registration_count(DRIVER)

    h.kubelet.simulate_restart()
    for s in h.slices():  # like the real kubelet at start
        h.apiserver.delete_object("resourceslices", s["metadata"]["name"])
    assert h.slices() == []

    h.kubelet.wait_registered(DRIVER, timeout=20, min_count=before + 1)
    h.wait_for(lambda: sorted(h.devices()) == published, 20, "ResourceSlices republished")
    assert h.app.server.reregistrations >= 1
    # The prepared claim survived and is answered again (idempotent).
    again = h.prepare(claim)[uid_of(claim)]
    assert again.error == ""
    assert h.unprepare(claim) == {uid_of(claim): ""}


def test_non_default_kubelet_root_through_two_flags(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    """A k3s-like root: only --kubelet-registrar-directory-path and
    --kubelet-plugins-directory-path point at it (the harness passes exactly these)."""
    h = harness_factory(subprocess=True)
    reg = h.kubelet.registered_plugins(DRIVER)[-1]
    assert reg.endpoint == str(h.plugins_dir / DRIVER / "dra.sock")
    assert reg.registration_socket == str(h.registrar_dir / f"{DRIVER}-reg.sock")
    for path in (reg.endpoint, reg.registration_socket):
        assert stat.S_ISSOCK((h.root / path).lstat().st_mode)
    claim = h.allocate("k3s", [h.devices()[0]])
    assert h.prepare(claim)[uid_of(claim)].error == ""
    assert (h.plugins_dir / DRIVER / "checkpoint.json").is_file()
    assert h.slices()[0]["spec"]["nodeName"] == NODE
