#!/usr/bin/env bash
# Build the drakit node agent image on a machine without a container registry.
#
#   deploy/image/build.sh            # prints the image reference on the last line
#
# 1. A minimal Debian root filesystem (debootstrap --variant=minbase, the packages of
#    packages.txt included) from the Debian mirror apt on this machine uses (or
#    $DEBIAN_MIRROR), slimmed the way debian:bookworm-slim is (no docs, man pages, locales,
#    apt lists), imported into podman as localhost/drakit-debian:<hash>. It stands in for
#    the docker.io/library/debian:bookworm-slim base a registry-connected build pulls.
# 2. `podman build --pull=never` of deploy/Containerfile on that base: the same build a
#    registry-connected machine runs (one definition of the image: Containerfile,
#    packages.txt, requirements.txt, install.sh); Python packages come from PyPI.
#
# Caching: the root filesystem is kept in $DRAKIT_IMAGE_CACHE (~/.cache/drakit/image) under
# the hash of what goes into it (suite, mirror, packages.txt, this script); the image is
# tagged localhost/drakit:<version>-<hash of every input> and not rebuilt when that tag
# exists. Needs root (debootstrap, chroot) and podman.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=deploy/image
suite=${DEBIAN_SUITE:-bookworm}
cache=${DRAKIT_IMAGE_CACHE:-${HOME:-/root}/.cache/drakit/image}
started=$(date +%s)

say() { echo "[build-image $(date -u +%H:%M:%S)] $*" >&2; }

# The first deb URI of an apt source that carries $suite (deb822 .sources, then one-line
# sources.list files).
apt_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$suite" '
      function flush() { if (deb && uri != "" && (" " suites " ") ~ (" " suite " ")) { print uri; exit } }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); uri = ""; suites = ""; deb = 0; next }
      tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { suites = ""; for (i = 2; i <= NF; i++) suites = suites " " $i }
      END { flush() }' "$f"
  done | head -n1 | grep . && return 0
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk -v suite="$suite" '$1 == "deb" { sub(/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?/, "");
                                          if ($2 == suite) { print $1; exit } }' | grep .
}

packages() { grep -v '^[[:space:]]*#' "$here/packages.txt" | tr -s ' \n' '\n' | grep . ; }

mirror=${DEBIAN_MIRROR:-$(apt_mirror || true)}
if [ -z "$mirror" ]; then
  echo "build-image: no apt source for $suite found; set DEBIAN_MIRROR" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
fi
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool not found (apt-get install $tool)" >&2; exit 1; }
done

base_recipe=1  # bump when the debootstrap step below changes what the base contains
base_key=$( { echo "$suite $mirror $base_recipe"; cat "$here/packages.txt"; } | sha256sum | cut -c1-16)
base_ref=localhost/drakit-debian:$suite-$base_key
image_key=$( { echo "$base_key"; cat deploy/Containerfile "$here"/packages.txt \
  "$here"/requirements.txt "$here"/install.sh "$here"/sbom.sh "$here"/sbom-requirements.txt \
  pyproject.toml README.md;
  find cdi discovery plugin allocator src -type f -not -path '*/__pycache__/*' -not -name '*.pyc' \
    | LC_ALL=C sort | xargs sha256sum; } | sha256sum | cut -c1-16)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image_ref=localhost/drakit:$version-$image_key

if podman image exists "$image_ref"; then
  say "$image_ref is up to date"
  echo "$image_ref"
  exit 0
fi

# -- 1. the Debian root filesystem ------------------------------------------------------
tarball=$cache/debian-$suite-$base_key.tar
if [ ! -f "$tarball" ]; then
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  say "debootstrap $suite from $mirror with: $(packages | paste -sd' ')"
  debootstrap --variant=minbase --include="$(packages | paste -sd,)" \
    "$suite" "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 \
    || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
  # what debian:bookworm-slim leaves out; the same dpkg excludes apply to later installs
  # (install.sh writes them too, for bases that lack them)
  r=$work/rootfs
  rm -rf "$r"/usr/share/doc/* "$r"/usr/share/man/* "$r"/usr/share/info/* \
    "$r"/usr/share/locale/* "$r"/usr/share/lintian "$r"/usr/share/linda \
    "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/* "$r"/var/cache/debconf/*-old \
    "$r"/var/log/* "$r"/debootstrap
  : > "$r/etc/resolv.conf"
  tar --numeric-owner --xattrs -C "$r" -cf "$work/rootfs.tar" .
  mv "$work/rootfs.tar" "$tarball"
  rm -rf "$work"
  trap - EXIT
  say "root filesystem cached: $tarball ($(du -h "$tarball" | cut -f1))"
fi
if ! podman image exists "$base_ref"; then
  podman import --quiet "$tarball" "$base_ref" >/dev/null
  say "imported $base_ref"
fi

# -- 2. the image, from the Containerfile -----------------------------------------------
say "podman build $image_ref (FROM $base_ref)"
# PyPI behind a TLS-intercepting proxy: hand the host's CA bundle (pip's setting here) to
# the stage that downloads wheels; nothing of it reaches the image
ca=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
ca_args=()
if [ -n "$ca" ] && [ -f "$ca" ]; then
  ca_args=(-v "$(readlink -f "$ca"):/run/drakit-build-ca.crt:ro"
           --build-arg PIP_CA_FILE=/run/drakit-build-ca.crt)
fi
# OCI labels: the commit (with -dirty for uncommitted changes), the source repository
# (DRAKIT_SOURCE_URL, else git's origin), the build time
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git status --porcelain -- cdi discovery plugin allocator src deploy pyproject.toml 2>/dev/null)" ]; then
  revision=$revision-dirty
fi
source_url=${DRAKIT_SOURCE_URL:-$(git remote get-url origin 2>/dev/null || echo unknown)}
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
podman build --pull=never --network=host --quiet "${ca_args[@]}" \
  --build-arg DEBIAN_IMAGE="$base_ref" \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  --build-arg SOURCE="$source_url" --build-arg CREATED="$created" \
  --build-arg SOURCE_DATE_EPOCH="$(date -u +%s)" \
  -f deploy/Containerfile -t "$image_ref" . >&2
podman tag "$image_ref" "localhost/drakit:$version"
# the SBOM beside the image: $DRAKIT_IMAGE_OUT (default: the cache), named like the image
out=${DRAKIT_IMAGE_OUT:-$cache}/drakit-$version-$image_key.cdx.json
mkdir -p "$(dirname "$out")"
cid=$(podman create "$image_ref")
podman cp "$cid:/opt/drakit/sbom.cdx.json" "$out" && podman rm "$cid" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$image_ref")
say "built $image_ref: $((size / 1000000)) MB, $(( $(date +%s) - started )) s; SBOM: $out"
echo "$image_ref"
