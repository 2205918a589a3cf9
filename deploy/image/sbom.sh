#!/bin/sh
# Write the CycloneDX SBOM (JSON, CycloneDX 1.6) of the image's Python environment:
#
#   sbom.sh WHEEL_DIR PYPROJECT OUT [PYTHON]
#
# PYTHON (default /opt/drakit/bin/python) is the environment described: every installed
# distribution with its version, licence and package URL; PYPROJECT (drakit's
# pyproject.toml) makes drakit the SBOM's main component. The generator, cyclonedx-bom
# (cyclonedx-py) pinned in sbom-requirements.txt, is installed from WHEEL_DIR (no index)
# into a throw-away virtual environment that is removed afterwards, so none of it stays in
# the image. $CYCLONEDX_PY names an installed cyclonedx-py instead (tests). With
# SOURCE_DATE_EPOCH set, the SBOM's timestamp is that time (reproducible output).
set -eu
wheels=$1 pyproject=$2 out=$3 python=${4:-/opt/drakit/bin/python}
here=$(cd "$(dirname "$0")" && pwd)
tool=${CYCLONEDX_PY:-}
tmp=""
if [ -z "$tool" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m venv --without-pip "$tmp/venv"
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    "$tmp/venv/bin/python" "$(ls "$wheels"/pip-*.whl | head -n1)/pip" install --quiet \
    --no-index --find-links "$wheels" -r "$here/sbom-requirements.txt"
  tool=$tmp/venv/bin/cyclonedx-py
fi
mkdir -p "$(dirname "$out")"
"$tool" environment --pyproject "$pyproject" --mc-type application --output-reproducible \
  --sv 1.6 --of JSON -o "$out.tmp" "$python"
mv "$out.tmp" "$out"
