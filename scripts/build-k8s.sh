#!/usr/bin/env bash
# Build real Kubernetes components from Go modules, cached by version outside the repository.
#
#   scripts/build-k8s.sh [COMPONENT ...]      default: kube-apiserver etcd kubectl kube-scheduler
#   components: kube-apiserver kubectl kube-scheduler kube-controller-manager kubelet etcd
#               helm containerd (containerd, ctr, containerd-shim-runc-v2) cni (loopback bridge host-local)
#
# Binaries land in $DRAKIT_CACHE/k8s-v$K8S_VERSION/bin (DRAKIT_CACHE defaults to ~/.cache/drakit).
# A binary already there is not rebuilt. A cold build of the default set takes ~15 min on 2 cores
# (module downloads ~30 s); progress goes to stderr. Prints the bin directory on stdout.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
STAGING_VERSION="0.${K8S_VERSION#1.}"
ETCD_VERSION="${ETCD_VERSION:-3.7.0}"
HELM_VERSION="${HELM_VERSION:-3.22.0}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.4.2}"
CNI_VERSION="${CNI_VERSION:-1.10.0}"
CACHE="${DRAKIT_CACHE:-$HOME/.cache/drakit}"
ROOT="$CACHE/k8s-v$K8S_VERSION"
BIN="$ROOT/bin"
SRC="$ROOT/src"

log() { printf '[build-k8s %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

command -v go >/dev/null || { log "go is not installed"; exit 3; }
mkdir -p "$BIN" "$SRC"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}"

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(kube-apiserver etcd kubectl kube-scheduler)

minor="${K8S_VERSION#1.}"; minor="${minor%%.*}"
LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION \
-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

k8s_module() {
  # One module that requires k8s.io/kubernetes and maps every staging module to its release.
  local mod="$SRC/kubernetes"
  [ -f "$mod/.ready" ] && return 0
  log "preparing module k8s.io/kubernetes v$K8S_VERSION (module downloads ~30 s cold)"
  mkdir -p "$mod/etcd"
  (cd "$mod" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null)
  local gomod
  gomod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod"
  {
    echo "module drakit.local/k8sbuild"
    echo
    echo "go 1.25"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes v$K8S_VERSION"
    echo "	go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
    echo ")"
    echo
    echo "replace ("
    grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$gomod" | awk '{print $1}' \
      | grep -vE '^k8s.io/sample-(cli-plugin|controller)$' \
      | while read -r name; do printf '\t%s => %s v%s\n' "$name" "$name" "$STAGING_VERSION"; done
    echo ")"
  } > "$mod/go.mod"
  cat > "$mod/etcd/main.go" <<'GO'
// etcd server built from go.etcd.io/etcd/server/v3 at the version Kubernetes pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  cat > "$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  (cd "$mod" && go mod tidy -e >&2 2>&1 | tail -5 >&2 || true)
  touch "$mod/.ready"
}

build_k8s() {
  local name="$1" pkg="$2"
  [ -x "$BIN/$name" ] && { log "$name: cached"; return 0; }
  k8s_module
  log "$name: building (go build $pkg)"
  local t0=$SECONDS
  (cd "$SRC/kubernetes" && go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/$name.tmp" "$pkg")
  mv "$BIN/$name.tmp" "$BIN/$name"
  log "$name: built in $((SECONDS - t0)) s"
}

go_install() {
  # go_install NAME MODULE_PATH@VERSION [TAGS]
  local name="$1" target="$2" tags="${3:-}"
  [ -x "$BIN/$name" ] && { log "$name: cached"; return 0; }
  log "$name: building (go install $target)"
  local t0=$SECONDS
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" ${tags:+-tags "$tags"} "$target"
  log "$name: built in $((SECONDS - t0)) s"
}

for c in "${components[@]}"; do
  case "$c" in
    kube-apiserver|kube-scheduler|kube-controller-manager|kubectl|kubelet)
      build_k8s "$c" "k8s.io/kubernetes/cmd/$c" ;;
    etcd) build_k8s etcd ./etcd ;;
    helm) go_install helm "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" ;;
    containerd)
      for b in containerd ctr containerd-shim-runc-v2; do
        go_install "$b" "github.com/containerd/containerd/v2/cmd/$b@v$CONTAINERD_VERSION" \
          "no_btrfs no_devmapper no_zfs"
      done ;;
    cni)
      mkdir -p "$ROOT/cni"
      for b in loopback bridge host-local; do
        [ -x "$ROOT/cni/$b" ] && continue
        log "cni $b: building"
        GOBIN="$ROOT/cni" go install -trimpath -ldflags "-s -w" \
          "github.com/containernetworking/plugins/plugins/$( [ "$b" = host-local ] && echo ipam || echo main )/$b@v$CNI_VERSION"
      done ;;
    *) log "unknown component: $c"; exit 2 ;;
  esac
done
echo "$BIN"
