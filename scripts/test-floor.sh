#!/usr/bin/env bash
# `make test-floor`: drakit on the oldest runtimes it supports. Installs drakit (editable, with
# its dev extras) into its own virtualenv pinned by scripts/floor-constraints.txt (protobuf 5.29,
# grpcio 1.66, grpcio-health-checking 1.66), checks that those versions are what got installed,
# and runs the floor part of the suite: the gRPC layer (stubs, server, fake kubelet, health),
# the node logic, the integration flows (including a claim through the public CLI:
# drakit apiserver + drakit run + drakit fake-kubelet --prepare) and the README examples; then
# builds the wheel, installs it into a fresh venv with the same pins and runs the CLI claim
# test with nothing of the checkout importable.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${FLOOR_VENV:-.venv-floor}
STAMP="$VENV/.installed-$(cat pyproject.toml scripts/floor-constraints.txt | sha1sum | cut -c1-12)"
if [ ! -e "$STAMP" ]; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip "setuptools>=68" wheel  # the example vendor package builds without isolation
  "$VENV/bin/python" -m pip install -q -c scripts/floor-constraints.txt -e '.[dev]'
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version
got = {name: version(name) for name in ("protobuf", "grpcio", "grpcio-health-checking")}
print("floor runtimes:", ", ".join(f"{k} {v}" for k, v in got.items()))
want = {"protobuf": "5.29.", "grpcio": "1.66.", "grpcio-health-checking": "1.66."}
wrong = [k for k, prefix in want.items() if not got[k].startswith(prefix)]
if wrong:
    raise SystemExit(f"floor venv has the wrong versions of {wrong}: {got}")
PY
"$VENV/bin/python" -m pytest -q -ra -p no:cacheprovider \
  tests/kubelet tests/node tests/integration tests/docs "$@"

# The wheel as a vendor gets it: built from this tree, installed (not editable) into a fresh
# venv with the floor pins and nothing of the checkout on sys.path (pytest runs from a temp
# directory), then a claim through the public CLI (drakit apiserver + run + fake-kubelet).
REPO=$(pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$VENV/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" .
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q -c scripts/floor-constraints.txt \
  "$WORK"/dist/drakit-*.whl pytest
cd "$WORK"
"$WORK/venv/bin/python" - <<'PY'
import drakit, sys
from importlib.metadata import version
where = drakit.__file__
print(f"floor wheel: drakit from {where}; protobuf {version('protobuf')}, grpcio {version('grpcio')}")
if "site-packages" not in where:
    sys.exit(f"the wheel's drakit is not the one imported: {where}")
PY
"$WORK/venv/bin/python" -m pytest -q -ra -p no:cacheprovider --rootdir "$REPO" \
  "$REPO/tests/integration/test_cli_claim.py"
