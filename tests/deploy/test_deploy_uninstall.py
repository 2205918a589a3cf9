"""The uninstall step the README documents: ``drakit cleanup --driver-name D --node-name N
--kubeconfig FILE`` deletes that driver's ResourceSlices of that node, and nothing else
(run here against the embedded API server through a real kubeconfig)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import DRIVER_NAME


def _slice(node: str, driver: str, pool: str) -> dict[str, Any]:
    return {"metadata": {"generateName": f"{node}-"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "dev-0"}]}}


def test_cleanup_deletes_only_the_drivers_slices_of_the_node(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli = pytest.importorskip("drakit.plugin.cli", reason="drakit.plugin.cli is not importable yet")
    from drakit.plugin.testing.apiserver import EmbeddedAPIServer

    with EmbeddedAPIServer() as api:
        for node in ("node-a", "node-b"):
            api.create_node(node)
            api.create_object("resourceslices", _slice(node, DRIVER_NAME, node))
            api.create_object("resourceslices", _slice(node, "gpu.other.example", node))
        api.create_object("resourceslices", _slice("node-a", DRIVER_NAME, "second-pool"))
        kubeconfig = api.write_kubeconfig(tmp_path / "admin.conf")
        rc = cli.main(["cleanup", "--driver-name", DRIVER_NAME, "--node-name", "node-a",
                       "--kubeconfig", str(kubeconfig)])
        left = {(s["spec"]["nodeName"], s["spec"]["driver"])
                for s in api.list_objects("resourceslices")}
    assert rc == 0
    assert "deleted 2 ResourceSlice(s)" in capsys.readouterr().out
    assert left == {("node-a", "gpu.other.example"), ("node-b", DRIVER_NAME),
                    ("node-b", "gpu.other.example")}
