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
    cli = pytest.importorskip("drakit.plugin.ops.cli",
                              reason="drakit.plugin.ops.cli is not importable yet")
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


def test_cleanup_of_all_nodes_with_a_dry_run_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--all-nodes --dry-run`` lists every node's slices of the driver and deletes none;
    ``--all-nodes`` then deletes exactly those; other drivers' slices stay."""
    from drakit.plugin.ops import cli
    from drakit.plugin.testing.apiserver import EmbeddedAPIServer

    with EmbeddedAPIServer() as api:
        for node in ("node-a", "node-b", "node-c"):
            api.create_node(node)
            api.create_object("resourceslices", _slice(node, DRIVER_NAME, node))
            api.create_object("resourceslices", _slice(node, "gpu.other.example", node))
        api.create_object("resourceslices", _slice("node-b", DRIVER_NAME, "second-pool"))
        kubeconfig = api.write_kubeconfig(tmp_path / "admin.conf")
        before = api.list_objects("resourceslices")
        ours = sorted(s["metadata"]["name"] for s in before if s["spec"]["driver"] == DRIVER_NAME)
        base = ["cleanup", "--driver-name", DRIVER_NAME, "--all-nodes",
                "--kubeconfig", str(kubeconfig)]
        assert cli.main([*base, "--dry-run"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert len(api.list_objects("resourceslices")) == len(before)  # nothing deleted
        assert sorted(line.split()[3] for line in out[:-1]) == ours
        assert "node node-b, pool second-pool" in "\n".join(out)
        assert out[-1] == (f"dry run: 4 ResourceSlice(s) of driver {DRIVER_NAME} on 3 node(s) "
                           "(every node); nothing deleted")
        assert cli.main(base) == 0
        assert capsys.readouterr().out.strip() == (
            f"deleted 4 ResourceSlice(s) of driver {DRIVER_NAME} on every node")
        left = {s["spec"]["driver"] for s in api.list_objects("resourceslices")}
        assert left == {"gpu.other.example"}
        # the one-node dry run lists that node's only
        assert cli.main(["cleanup", "--driver-name", "gpu.other.example", "--node-name",
                         "node-a", "--dry-run", "--kubeconfig", str(kubeconfig)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert len(out) == 2 and "node node-a" in out[0]


def test_cleanup_needs_a_node_or_all_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    from drakit.plugin.ops import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["cleanup", "--driver-name", DRIVER_NAME])
    assert e.value.code == 2
    assert "--all-nodes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["cleanup", "--driver-name", DRIVER_NAME, "--node-name", "n", "--all-nodes"])
    assert "not allowed with" in capsys.readouterr().err
