"""The releases of the version matrix and what each one is, read from the release itself.

A release's binaries are the ones scripts/build-k8s.sh caches under
``$DRAKIT_CACHE/k8s-v<version>/bin`` (``~/.cache/drakit`` by default). What a release has is
not written down here per version but measured:

- its feature gates (name, stage, default) from ``kube-apiserver --help`` (the
  ``--feature-gates`` list the binary prints);
- its resource.k8s.io versions from the k8s.io/api module of the release
  (``resource/<version>/`` of ``k8s.io/api@v0.<minor>.<patch>`` in the Go module cache, the
  source the binary was built from).

Which releases run: ``$DRAKIT_VERSIONS`` (comma-separated, default :data:`MATRIX`). A release
without binaries skips with the reason, and fails under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from drakit.plugin.testing.real.controlplane import RealAPIServer

#: Every release of the matrix, oldest first (the newest patch releases the Go module proxy
#: serves of each minor, and the 1.38 beta).
MATRIX = ("1.32.13", "1.33.13", "1.34.4", "1.35.4", "1.36.3", "1.37.2", "1.38.0-beta.0")
#: The binaries the control-plane matrix needs of each release.
CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-scheduler")
#: resource.k8s.io versions drakit speaks, newest first (an alpha version is never used).
DRAKIT_VERSIONS = ("v1", "v1beta2", "v1beta1")
#: Gates the matrix leaves at the release's default, and why.
LEFT_AT_DEFAULT = {
    # what the matrix measures: whether claim status exists on the release as shipped
    "DRAResourceClaimDeviceStatus": "its default is what the matrix measures",
    # needs GenericWorkload and scheduling.k8s.io's PodGroup, not DRA drivers' business
    "DRAWorkloadResourceClaims": "needs GenericWorkload and scheduling.k8s.io PodGroups",
}
REPO = Path(__file__).resolve().parents[2]
DRIVER = "drakit.example.com"

# "  kube:DRAAdminAccess=true|false (ALPHA - default=false)" (1.32+: "<component>:" prefix)
_GATE = re.compile(r"^\s+(?:[a-z-]+:)?([A-Za-z0-9]+)=true\|false \((ALPHA|BETA|GA|DEPRECATED) - "
                   r"default=(true|false)\)", re.M)


@dataclass(frozen=True)
class Gate:
    """One feature gate as the binary lists it."""

    name: str
    stage: str
    default: bool


@dataclass
class Release:
    """A Kubernetes release of the matrix with its binaries."""

    version: str
    bin_dir: Path
    gates: dict[str, Gate] = field(default_factory=dict)
    resource_versions: tuple[str, ...] = ()
    has_alpha_resource_api: bool = False
    """k8s.io/api of the release has resource/v1alpha3 (DeviceTaintRule in 1.33-1.35)."""

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def matrix_gates(self) -> dict[str, bool]:
        """DynamicResourceAllocation and every DRA gate the release knows switched on, but
        :data:`LEFT_AT_DEFAULT` and deprecated ones."""
        return {g.name: True for g in self.gates.values()
                if (g.name == "DynamicResourceAllocation" or g.name.startswith("DRA"))
                and g.name not in LEFT_AT_DEFAULT and g.stage != "DEPRECATED"}


def cache_root() -> Path:
    return Path(os.environ.get("DRAKIT_CACHE") or Path.home() / ".cache" / "drakit")


def bin_dir(version: str) -> Path:
    return cache_root() / f"k8s-v{version}" / "bin"


def wanted_versions() -> tuple[str, ...]:
    """The releases to run: ``$DRAKIT_VERSIONS`` or the whole :data:`MATRIX`."""
    raw = os.environ.get("DRAKIT_VERSIONS", "").strip()
    if not raw:
        return MATRIX
    versions = tuple(v.strip().removeprefix("v") for v in raw.split(",") if v.strip())
    unknown = [v for v in versions if v not in MATRIX]
    if unknown:
        raise ValueError(f"DRAKIT_VERSIONS names {unknown}, not in the matrix {list(MATRIX)}")
    return versions


def missing_binaries(version: str, needed: tuple[str, ...] = CONTROL_PLANE) -> list[str]:
    d = bin_dir(version)
    return [n for n in needed if not os.access(d / n, os.X_OK)]


def read_gates(apiserver: Path) -> dict[str, Gate]:
    """The feature gates ``kube-apiserver --help`` lists."""
    out = subprocess.run([str(apiserver), "--help"], capture_output=True, text=True,
                         timeout=60).stdout
    return {m[1]: Gate(m[1], m[2], m[3] == "true") for m in _GATE.finditer(out)}


def _gomodcache() -> Path:
    if shutil.which("go"):
        out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
        if out:
            return Path(out)
    return Path.home() / "go" / "pkg" / "mod"


def api_module_dir(version: str) -> Path | None:
    """k8s.io/api of the release in the Go module cache (downloaded when missing and go is
    there: a few MB)."""
    staging = "v0." + version.split(".", 1)[1]
    d = _gomodcache() / "k8s.io" / f"api@{staging}"
    if d.is_dir():
        return d
    if shutil.which("go") is None:
        return None
    r = subprocess.run(["go", "mod", "download", "-json", f"k8s.io/api@{staging}"],
                       capture_output=True, text=True, timeout=300, cwd=cache_root())
    try:
        got = json.loads(r.stdout).get("Dir")
    except ValueError:
        return None
    return Path(got) if got else None


def resource_versions(version: str) -> tuple[str, ...]:
    """The resource.k8s.io versions drakit speaks that the release has, newest first."""
    d = api_module_dir(version)
    if d is None:
        raise RuntimeError(f"k8s.io/api of Kubernetes {version} is not in the Go module cache "
                           "and cannot be downloaded (no go)")
    have = {p.name for p in (d / "resource").iterdir() if p.is_dir()}
    return tuple(v for v in DRAKIT_VERSIONS if v in have)


@cache
def load_release(version: str) -> Release:
    """The release with its gates and resource versions (binaries must exist)."""
    d = bin_dir(version)
    api = api_module_dir(version)
    return Release(version, d, read_gates(d / "kube-apiserver"), resource_versions(version),
                   has_alpha_resource_api=api is not None
                   and (api / "resource" / "v1alpha3").is_dir())


def matrix_dir() -> Path:
    """Where the matrix run writes what it measured, one JSON file per release
    (``$DRAKIT_MATRIX_DIR``, default ``.matrix/`` in the repository):
    scripts/gen_compatibility.py makes docs/compatibility.md from it."""
    return Path(os.environ.get("DRAKIT_MATRIX_DIR") or REPO / ".matrix")


def write_facts(version: str, facts: dict[str, Any]) -> Path:
    """Merge ``facts`` into the release's JSON file (written atomically)."""
    directory = matrix_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{version}.json"
    old: dict[str, Any] = {}
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError:
            old = {}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**old, **facts}, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


class ReleaseServer(RealAPIServer):
    """A :class:`RealAPIServer` of one release: only the resource.k8s.io versions the
    release has go into ``--runtime-config`` (an older server refuses unknown ones), and
    the feature gates are the release's own (:meth:`Release.matrix_gates`), not 1.37's."""

    def __init__(self, workdir: Path, release: Release,
                 gates: dict[str, bool] | None = None) -> None:
        runtime = {f"resource.k8s.io/{v}": True for v in release.resource_versions}
        if release.has_alpha_resource_api:
            # DeviceTaintRule (DRADeviceTaints, alpha in 1.33-1.35) is only in v1alpha3
            # there: a kube-scheduler with the gate on waits for its informer, and without
            # the version served it never syncs and schedules nothing
            runtime["resource.k8s.io/v1alpha3"] = True
        super().__init__(workdir, release.bin_dir, runtime_config=runtime,
                         authorization_mode="Node,RBAC")
        self.feature_gates = dict(release.matrix_gates() if gates is None else gates)
        self.release = release

    @property
    def served_versions(self) -> tuple[str, ...]:
        return self.release.resource_versions

    def start(self) -> ReleaseServer:
        super().start()
        self.rest.helper_version = self.release.resource_versions[0]
        return self
