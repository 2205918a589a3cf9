"""``drakit cdi list`` and ``drakit cdi validate`` through cdi_main."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from cdi_helpers import env_device

from drakit.cdi.cli import cdi_main
from drakit.cdi.spec import ContainerEdits, Device, DeviceNode
from drakit.cdi.store import SpecStore

UID = "3f2a9c1e-0b7d-4c52-9a8e-1d2c3b4a5f60"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cdi_main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_list_shows_specs_devices_conflicts_and_errors(tmp_path: Path) -> None:
    run_dir, etc_dir = tmp_path / "run", tmp_path / "etc"
    store = SpecStore(run_dir, "example.com", "gpu")
    store.write(UID, [env_device("gpu0"), env_device("gpu1")])
    # a hand-made conflicting file and a broken one
    conflict = {
        "cdiVersion": "0.3.0",
        "kind": "example.com/gpu",
        "devices": [{"name": "gpu1", "containerEdits": {"env": ["A=1"]}}],
    }
    (run_dir / "manual.json").write_text(json.dumps(conflict))
    (run_dir / "broken.yaml").write_text(
        "cdiVersion: '0.3.0'\nkind: example.com/gpu\ndevices: []\n"
    )
    code, out, _ = run("list", "--cdi-root", str(etc_dir), "--cdi-root", str(run_dir))
    assert code == 0
    assert run("list", "--cdi-root", str(etc_dir), str(run_dir)) == (0, out, "")
    assert f"{etc_dir}: (missing)" in out
    assert f"{run_dir}: 3 spec file(s)" in out
    assert "example.com/gpu=gpu0\n" in out
    assert f"example.com/gpu=gpu1  CONFLICT: also in {store.path_for(UID).name}" in out
    assert "error: devices: a spec needs at least one device" in out

    code, out, _ = run("list", "--cdi-root", str(run_dir), "--json")
    report = json.loads(out)
    assert report[0]["conflicts"] == {
        "example.com/gpu=gpu1": sorted([store.path_for(UID).name, "manual.json"])
    }
    specs = {Path(s["file"]).name: s for s in report[0]["specs"]}
    assert specs[store.path_for(UID).name]["devices"] == [
        "example.com/gpu=gpu0",
        "example.com/gpu=gpu1",
    ]
    assert specs[store.path_for(UID).name]["errors"] == []


def test_validate_ok_and_errors(tmp_path: Path, schema_dir: Path) -> None:
    store = SpecStore(tmp_path / "cdi", "example.com", "gpu")
    store.write(
        UID,
        [
            Device(
                name="0",
                container_edits=ContainerEdits(
                    device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")]
                ),
            )
        ],
    )
    good = store.path_for(UID)
    yaml_good = tmp_path / "good.yaml"
    yaml_good.write_text(
        "cdiVersion: 0.3.0\nkind: example.com/gpu\ndevices:\n- name: a\n  containerEdits:\n"
        "    env: [A=1]\n"
    )
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "cdiVersion": "0.3.0",
                "kind": "example.com/gpu",
                "devices": [
                    {"name": "a", "containerEdits": {"env": ["A=1"]}},
                    {
                        "name": "b",
                        "containerEdits": {"deviceNodes": [{"path": "dev/x", "bogus": 1}]},
                    },
                ],
            }
        )
    )
    yml = tmp_path / "x.yml"
    shutil.copy(yaml_good, yml)
    schema_example = schema_dir / "testdata" / "good" / "spec-example.json"

    code, out, err = run("validate", str(good), str(yaml_good), str(schema_example))
    assert (code, err) == (0, "")
    assert f"{good}: OK (cdiVersion 0.5.0, kind example.com/gpu, 1 device(s))" in out
    assert f"{yaml_good}: OK" in out

    code, out, err = run("validate", str(good), str(bad), str(yml), str(tmp_path / "missing.json"))
    assert code == 1
    assert f"{good}: OK" in out
    assert f"{bad}: devices[1].containerEdits.deviceNodes[0].bogus: unknown field" in err
    assert f"{yml}: file name must end in .json or .yaml" in err
    assert f"{tmp_path / 'missing.json'}: cannot read" in err

    bad.write_text(bad.read_text().replace(', "bogus": 1', ""))
    code, _, err = run("validate", str(bad))
    assert code == 1
    assert f"{bad}: devices[1].containerEdits.deviceNodes[0].path: deviceNode path 'dev/x'" in err

    code, _, err = run("validate", "--max-version", "0.4.0", str(good))
    assert code == 1 and "above the maximum 0.4.0" in err


def test_usage_errors_exit_2() -> None:
    assert run()[0] == 2
    assert run("validate")[0] == 2
    assert run("frobnicate")[0] == 2
    assert run("validate", "--max-version", "v0.5.0", "x.json")[0] == 2
