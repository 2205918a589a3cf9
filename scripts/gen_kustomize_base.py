"""Generate deploy/kustomize/base from the Helm chart (one source of truth: the chart).

    python scripts/gen_kustomize_base.py           # rewrite the base's resource files
    python scripts/gen_kustomize_base.py --check   # exit 1 when they differ from the chart

The base is ``helm template drakit deploy/helm/drakit --namespace drakit`` with
deploy/helm/kustomize-base.values.yaml, split into one file per chart template (the file
names deploy/kustomize/base/kustomization.yaml lists). The chart's comments carry over.
helm is looked up as $HELM, in $DRAKIT_K8S_BIN, on PATH, then in scripts/build-k8s.sh's
cache.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "drakit"
VALUES = REPO / "deploy" / "helm" / "kustomize-base.values.yaml"
BASE = REPO / "deploy" / "kustomize" / "base"
RELEASE = NAMESPACE = "drakit"
KUBE_VERSION = "1.37.0"
HEADER = ("# Generated from deploy/helm/drakit/templates/{name} by scripts/gen_kustomize_base.py"
          "\n# (values: deploy/helm/kustomize-base.values.yaml). Edit the chart, then rerun it.\n")
_SOURCE = re.compile(r"^---\n# Source: [^/\n]+/templates/([^\n]+)\n", re.M)


def find_helm() -> str | None:
    """The helm binary: $HELM, $DRAKIT_K8S_BIN/helm, PATH, or
    ~/.cache/drakit/k8s-v*/bin/helm (newest)."""
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    k8s_bin = os.environ.get("DRAKIT_K8S_BIN")
    if k8s_bin and (Path(k8s_bin) / "helm").is_file():
        return str(Path(k8s_bin) / "helm")
    found = shutil.which("helm")
    if found:
        return found
    cache = Path(os.environ.get("DRAKIT_CACHE", Path.home() / ".cache" / "drakit"))
    candidates = sorted(cache.glob("k8s-v*/bin/helm"))
    return str(candidates[-1]) if candidates else None


def render(helm: str, values: list[Path] | None = None, namespace: str = NAMESPACE,
           release: str = RELEASE, set_values: tuple[str, ...] = ()) -> str:
    """``helm template`` output; CalledProcessError (with helm's stderr) on failure."""
    # the chart requires Kubernetes 1.34+ (kubeVersion); offline, helm assumes v1.20
    argv = [helm, "template", release, str(CHART), "--namespace", namespace,
            "--kube-version", KUBE_VERSION]
    for v in values or []:
        argv += ["-f", str(v)]
    for s in set_values:
        argv += ["--set", s]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if r.returncode:
        raise subprocess.CalledProcessError(r.returncode, argv, r.stdout, r.stderr)
    return r.stdout


def split_by_template(text: str) -> dict[str, str]:
    """Rendered documents grouped by the template they come from, in order, each group's
    documents joined with ``---``."""
    parts = _SOURCE.split("\n" + text if not text.startswith("\n") else text)
    files: dict[str, list[str]] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        body = body.strip("\n")
        if body and any(yaml.safe_load_all(body)):
            files.setdefault(name, []).append(body + "\n")
    return {name: "---\n".join(docs) for name, docs in files.items()}


def base_files(helm: str) -> dict[str, str]:
    """File name → content of the generated base."""
    groups = split_by_template(render(helm, [VALUES]))
    return {name: HEADER.format(name=name) + body for name, body in groups.items()}


def listed_resources() -> list[str]:
    doc = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    return list(doc["resources"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    args = p.parse_args(argv)
    helm = find_helm()
    if helm is None:
        print("helm not found: set HELM, or build it with scripts/build-k8s.sh helm",
              file=sys.stderr)
        return 2
    files = base_files(helm)
    listed = listed_resources()
    if sorted(files) != sorted(listed):
        print(f"kustomization.yaml lists {sorted(listed)}, the chart renders {sorted(files)}",
              file=sys.stderr)
        return 1
    stale = [n for n, text in files.items()
             if not (BASE / n).exists() or (BASE / n).read_text() != text]
    if args.check:
        for n in stale:
            print(f"deploy/kustomize/base/{n} differs from the chart's rendering",
                  file=sys.stderr)
        return 1 if stale else 0
    for n in stale:
        tmp = BASE / f".{n}.tmp"
        tmp.write_text(files[n])
        os.replace(tmp, BASE / n)
        print(f"wrote deploy/kustomize/base/{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
