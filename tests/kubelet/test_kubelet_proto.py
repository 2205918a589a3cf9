"""The proto sources match the kubelet's wire contract, and the committed stubs are fresh."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from drakit.plugin._proto.dra.v1 import api_pb2 as dra_v1
from drakit.plugin._proto.dra.v1beta1 import api_pb2 as dra_v1beta1
from drakit.plugin._proto.dra_health.v1 import api_pb2 as health_v1
from drakit.plugin._proto.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from drakit.plugin._proto.pluginregistration.v1 import api_pb2 as reg_v1

REPO = Path(__file__).resolve().parents[2]


def _load_gen_proto() -> ModuleType:
    spec = importlib.util.spec_from_file_location("drakit_gen_proto", REPO / "scripts/gen_proto.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_are_not_stale() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts/gen_proto.py"), "--check"],
        # the first run on a machine creates the pinned grpcio-tools venv (pip, ≤ 600 s)
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr


def test_stale_check_detects_a_changed_proto(tmp_path: Path) -> None:
    gen = _load_gen_proto()
    src = tmp_path / "proto"
    shutil.copytree(REPO / "proto", src)
    path = src / "dra/v1/api.proto"
    path.write_text(path.read_text().replace("string pool_name = 2;", "string pool = 2;"))
    fresh = gen.generate(tmp_path / "out", src)
    problems = gen.diff_trees(fresh, REPO / "plugin/_proto")
    assert any("dra/v1/api_pb2.py" in p for p in problems), problems


def _fields(module: ModuleType, message: str) -> dict[str, tuple[int, int]]:
    desc = module.DESCRIPTOR.message_types_by_name[message]
    return {f.name: (f.number, f.type) for f in desc.fields}


def test_registration_service_identity() -> None:
    service = reg_v1.DESCRIPTOR.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    assert {m.name for m in service.methods} == {"GetInfo", "NotifyRegistrationStatus"}
    fields = _fields(reg_v1, "PluginInfo")
    assert {k: v[0] for k, v in fields.items()} == {
        "type": 1, "name": 2, "endpoint": 3, "supported_versions": 4,
    }
    assert {k: v[0] for k, v in _fields(reg_v1, "RegistrationStatus").items()} == {
        "plugin_registered": 1, "error": 2,
    }


@pytest.mark.parametrize(("module", "package"), [
    (dra_v1, "k8s.io.kubelet.pkg.apis.dra.v1"),
    (dra_v1beta1, "k8s.io.kubelet.pkg.apis.dra.v1beta1"),
])
def test_dra_service_identity(module: ModuleType, package: str) -> None:
    assert module.DESCRIPTOR.package == package
    service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == f"{package}.DRAPlugin"
    assert {m.name for m in service.methods} == {"NodePrepareResources", "NodeUnprepareResources"}
    claim = {k: v[0] for k, v in _fields(module, "Claim").items()}
    assert claim == {"namespace": 1, "uid": 2, "name": 3}
    assert {k: v[0] for k, v in _fields(module, "NodePrepareResourceResponse").items()} == {
        "devices": 1, "error": 2,
    }
    assert {k: v[0] for k, v in _fields(module, "NodeUnprepareResourceResponse").items()} == {
        "error": 1,
    }


def test_share_id_only_in_v1_with_presence() -> None:
    v1 = dra_v1.DESCRIPTOR.message_types_by_name["Device"]
    assert {f.name: f.number for f in v1.fields} == {
        "request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4, "share_id": 5,
    }
    assert v1.fields_by_name["share_id"].has_presence
    beta = dra_v1beta1.DESCRIPTOR.message_types_by_name["Device"]
    assert "share_id" not in beta.fields_by_name
    assert 5 not in beta.fields_by_number


@pytest.mark.parametrize(("module", "package"), [(health_v1, "v1"), (health_v1alpha1, "v1alpha1")])
def test_health_service_identity(module: ModuleType, package: str) -> None:
    assert module.DESCRIPTOR.package == package
    service = module.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert service.full_name == f"{package}.DRAResourceHealth"
    method = service.methods_by_name["NodeWatchResources"]
    assert method.server_streaming and not method.client_streaming
    assert {k: v[0] for k, v in _fields(module, "DeviceHealth").items()} == {
        "device": 1, "health": 2, "last_updated_time": 3,
        "health_check_timeout_seconds": 4, "message": 5,
    }
    assert {k: v[0] for k, v in _fields(module, "DeviceIdentifier").items()} == {
        "pool_name": 1, "device_name": 2,
    }
    enum = module.DESCRIPTOR.enum_types_by_name["HealthStatus"]
    assert {v.name: v.number for v in enum.values} == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def _floor(requirement: str) -> str:
    """The ``>=`` version of ``name>=X,...`` among pyproject's dependencies."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        name, _, spec = dep.partition(">=")
        if name.strip() == requirement:
            return spec.split(",")[0].strip()
    raise AssertionError(f"{requirement} has no >= floor in pyproject.toml")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def test_dependency_floors_are_the_gencode_versions() -> None:
    """Stubs refuse a runtime older than their generator, so the floors in pyproject.toml
    are exactly the generator's gencode versions (and the pinned grpcio-tools emits them)."""
    pb2 = sorted((REPO / "plugin/_proto").rglob("*_pb2.py"))
    grpc_files = sorted((REPO / "plugin/_proto").rglob("*_pb2_grpc.py"))
    assert len(pb2) == len(grpc_files) == 5
    pb_versions = {re.search(r"# Protobuf Python Version: (\S+)", p.read_text())[1]  # type: ignore[index]
                   for p in pb2}
    grpc_versions = {re.search(r"GRPC_GENERATED_VERSION = '(\S+)'", p.read_text())[1]  # type: ignore[index]
                     for p in grpc_files}
    assert pb_versions == {_floor("protobuf")}
    assert grpc_versions == {_floor("grpcio")} == {_load_gen_proto().GRPCIO_TOOLS_VERSION}
    assert _floor("grpcio-health-checking") == _floor("grpcio")
    # the floor the issue asks for: late-2024 runtimes (protobuf 5.29, grpcio 1.66) qualify
    assert _version_tuple(_floor("protobuf")) <= (5, 29, 0)
    assert _version_tuple(_floor("grpcio")) <= (1, 66, 0)


def test_stubs_load_on_this_runtime_without_a_version_error() -> None:
    """A fresh interpreter imports every stub module (the runtime's version guard runs at
    import) and builds a message: the floor venv and the newest venv both run this."""
    code = (
        "import importlib, pathlib, warnings\n"
        "warnings.simplefilter('error')\n"
        # protobuf 6.x accepts 5.x gencode with this notice (inside its rolling window)
        "warnings.filterwarnings('default', message='.*one major version older')\n"
        "import drakit.plugin._proto.dra.v1.api_pb2 as m\n"
        "for p in sorted(pathlib.Path('plugin/_proto').rglob('api_pb2*.py')):\n"
        "    importlib.import_module('drakit.' + '.'.join(p.with_suffix('').parts))\n"
        "c = m.Claim(namespace='ns', uid='u', name='n')\n"
        "assert m.Claim.FromString(c.SerializeToString()) == c\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
