"""The kit's module paths before the cut by job still import for one release, each with a
DeprecationWarning, and give the very objects of the new paths."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import drakit.plugin.testing as kit
from drakit.plugin.testing._moved import MOVED, new_paths

PUBLIC = ("DriverHarness", "FakeKubelet", "EmbeddedAPIServer", "RealAPIServer", "RealNode",
          "FaultProxy")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_module_path_imports_with_a_warning(old: str) -> None:
    name = f"{kit.__name__}.{old}"
    sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning, match=old):
        module = importlib.import_module(name)
    targets = [importlib.import_module(p) for p in new_paths(old)]
    exported = set(module.__all__)
    assert exported == {n for t in targets for n in getattr(t, "__all__", ())}
    for attr in exported:
        owner = next(t for t in targets if hasattr(t, attr))
        assert getattr(module, attr) is getattr(owner, attr)


def test_the_public_api_is_the_same_objects_on_both_paths() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from drakit.plugin.testing.apiserver import EmbeddedAPIServer as new_server
        from drakit.plugin.testing.apiserver_store import Store as OldStore
        from drakit.plugin.testing.fake_kubelet import FakeKubelet as OldKubelet
        from drakit.plugin.testing.realcluster import RealAPIServer as OldReal
        from drakit.plugin.testing.realnode import RealNode as OldNode
    from drakit.plugin.testing.apiserver.store import Store
    from drakit.plugin.testing.kubelet import FakeKubelet
    from drakit.plugin.testing.real import RealAPIServer, RealNode
    assert (OldStore, OldKubelet, OldReal, OldNode) == (Store, FakeKubelet, RealAPIServer, RealNode)
    assert kit.EmbeddedAPIServer is new_server
    for name in PUBLIC:
        assert name in kit.__all__ and getattr(kit, name) is not None


def test_an_unknown_old_name_is_an_attribute_error_naming_the_new_module() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import drakit.plugin.testing.realnode_layout as old
    with pytest.raises(AttributeError, match=r"real\.layout"):
        _ = old.NoSuchName


def test_a_vendor_test_on_the_old_paths_passes_with_a_warning(tmp_path: Path) -> None:
    """A vendor's test written against the old paths, run by pytest in a fresh process: it
    passes, and the warning summary names the deprecation."""
    (tmp_path / "test_vendor.py").write_text(
        "from drakit.plugin.testing.apiserver import EmbeddedAPIServer\n"
        "from drakit.plugin.testing.fake_kubelet import FakeKubelet\n"
        "from drakit.plugin.testing.apiserver_errors import ApiError\n"
        "def test_server(short_tmp_path):\n"
        "    with EmbeddedAPIServer() as server:\n"
        "        server.create_node('n1')\n"
        "        assert server.get_object('nodes', 'n1')['metadata']['name'] == 'n1'\n"
        "    with FakeKubelet(short_tmp_path / 'reg') as kubelet:\n"
        "        assert kubelet.registered_plugins() == []\n"
        "    assert issubclass(ApiError, Exception)\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "default::DeprecationWarning", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert "drakit.plugin.testing.fake_kubelet is deprecated" in proc.stdout
