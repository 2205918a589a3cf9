#!/bin/sh
# Turn a Debian bookworm root (debian:bookworm-slim, or build.sh's debootstrap root) into
# the drakit image's root filesystem. Run as root inside that root:
#
#   install.sh WHEEL_DIR
#
# WHEEL_DIR holds drakit's wheel, the wheels of requirements.txt and a pip wheel (the
# installer runs from that wheel, so no pip stays in the image). Steps: the Debian packages
# of packages.txt that are missing (none after build.sh's debootstrap), a virtual
# environment /opt/drakit with drakit and its pinned dependencies (no index: only
# WHEEL_DIR), byte-compiled, then everything an image does not need is removed: apt lists
# and caches, documentation, man pages, locales, logs, kubernetes' unused asyncio client.
# Ends by loading the agent and its native dependencies (grpcio, libudev through pyudev)
# and by evaluating a selector with `drakit explain`'s CEL runtime (cel-expr-python).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
wheels=$1

# what debian:bookworm-slim excludes, for every package installed from now on
mkdir -p /etc/dpkg/dpkg.cfg.d
cat > /etc/dpkg/dpkg.cfg.d/drakit-slim <<'EOF'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF

missing=""
for p in $(grep -v '^[[:space:]]*#' "$here/packages.txt"); do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q ' installed$' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing
fi

python3 -m venv --without-pip /opt/drakit
pip() {
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    /opt/drakit/bin/python "$(ls "$wheels"/pip-*.whl | head -n1)/pip" "$@"
}
# every dependency is pinned in requirements.txt (--no-deps); `pip check` then stops the
# build when one is missing or conflicts
pip install --quiet --no-index --find-links "$wheels" --no-deps -r "$here/requirements.txt"
pip install --quiet --no-index --no-deps "$wheels"/drakit-*.whl
pip check
# kubernetes ships a second, asyncio copy of its client (kubernetes/aio, ~68 MB); drakit
# never imports kubernetes.aio, so the image leaves it out
rm -rf /opt/drakit/lib/python3*/site-packages/kubernetes/aio
# byte-code compiled once here: the root filesystem is read-only at run time, and
# compiling kubernetes.client's models at every start costs about a second
/opt/drakit/bin/python -m compileall -q -j 0 /opt/drakit/lib >/dev/null

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/* \
  /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/* \
  /usr/share/lintian /root/.cache

/opt/drakit/bin/drakit --help >/dev/null
/opt/drakit/bin/drakit explain --help >/dev/null
/opt/drakit/bin/python -c "import grpc, pyudev, kubernetes, prometheus_client; pyudev.Context()"
# drakit explain's CEL runtime (cel-expr-python, a native extension): one DRA selector
# compiled and evaluated in drakit.allocator's environment
/opt/drakit/bin/python - <<'EOF'
from drakit.allocator.celenv import default_environment
env = default_environment()
sel = env.compile('device.capacity["example.com"].memory.isGreaterThan(quantity("1Gi"))')
dev = env.device_value("example.com", {"name": "d", "capacity": {"memory": {"value": "2Gi"}}})
outcome = env.evaluate(sel, dev)
assert outcome.value is True, outcome
EOF
