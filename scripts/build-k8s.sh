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
# ETCD_VERSION and the Go toolchain default to what k8s.io/kubernetes's go.mod of K8S_VERSION pins.
ETCD_VERSION="${ETCD_VERSION:-}"
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

KUBE_GOMOD="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod"

kube_gomod() {
  # The release's own go.mod (one small download); every pin below is read from it.
  # A release that needs a newer Go than the local one still has its go.mod downloaded (the
  # error is about the module zip): read the pins from it, GOTOOLCHAIN comes from its go line.
  [ -f "$KUBE_GOMOD" ] && return 0
  local out
  out="$(cd "$ROOT" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" 2>&1 || true)"
  [ -f "$KUBE_GOMOD" ] || {
    log "the module proxy has no go.mod of k8s.io/kubernetes v$K8S_VERSION: $(printf '%s' "$out" \
      | sed -n 's/^[[:space:]]*"Error": "\(.*\)",*$/\1/p' | head -1)"
    exit 4; }
}

pins() {
  # ETCD_VERSION: the go.etcd.io/etcd/server/v3 version the release requires.
  # GOTOOLCHAIN: the release's `toolchain` (or `go`) line when it is newer than the local go.
  kube_gomod
  if [ -z "$ETCD_VERSION" ]; then
    ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" {sub(/^v/, "", $2); print $2; exit}' "$KUBE_GOMOD")"
    [ -n "$ETCD_VERSION" ] || { log "no go.etcd.io/etcd/server/v3 pin in $KUBE_GOMOD"; exit 4; }
  fi
  local want have
  want="$(awk '$1 == "go" {print $2; exit}' "$KUBE_GOMOD")"
  have="$(go env GOVERSION)"; have="${have#go}"
  if [ -z "${GOTOOLCHAIN:-}" ] && [ -n "$want" ] \
     && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | tail -1)" != "$have" ]; then
    # go.mod's go line names a minimum: its toolchain line, else the Go release of that minor
    # known to be served by the module proxy and to build it (1.27: go1.27.3, for
    # k8s.io/kubernetes v1.38.0-beta.0, whose go line says 1.27.0, a release the proxy does
    # not serve); the go command fetches it (~76 MB).
    local tc
    tc="$(awk '$1 == "toolchain" {print $2; exit}' "$KUBE_GOMOD")"
    if [ -z "$tc" ]; then
      case "$want" in 1.27|1.27.*) tc=go1.27.3 ;; esac
    fi
    export GOTOOLCHAIN="${tc:-go$want}"
    log "k8s.io/kubernetes v$K8S_VERSION needs go $want (local $have): GOTOOLCHAIN=$GOTOOLCHAIN"
  fi
}

staging_replaces() {
  # One replace line per staging module the release lists. A module the proxy does not serve at
  # v$STAGING_VERSION (k8s.io/endpointslice v0.32.13 is refused) is mapped to the newest patch of
  # the same minor that it serves; with none at all the line is left out (the components that
  # need it then fail to build and name it).
  local names=() name
  mapfile -t names < <(grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$KUBE_GOMOD" | awk '{print $1}' \
    | grep -vE '^k8s.io/sample-(cli-plugin|controller)$')
  local -A missing=()
  while read -r bad; do [ -n "$bad" ] && missing["$bad"]=1; done < <(
    go mod download -json "${names[@]/%/@v$STAGING_VERSION}" 2>/dev/null \
      | python3 -c 'import json,sys
dec=json.JSONDecoder(); s=sys.stdin.read(); i=0
while True:
    while i < len(s) and s[i].isspace(): i += 1
    if i >= len(s): break
    o, i = dec.raw_decode(s, i)
    if o.get("Error"): print(o["Path"])')
  local series="v${STAGING_VERSION%.*}."
  for name in "${names[@]}"; do
    if [ -z "${missing[$name]:-}" ]; then
      printf '\t%s => %s v%s\n' "$name" "$name" "$STAGING_VERSION"; continue
    fi
    local near
    near="$(go list -m -versions "$name" 2>/dev/null | tr ' ' '\n' | grep -F "$series" \
      | grep -vE -- '-(alpha|beta|rc)' | sort -V | tail -1 || true)"
    if [ -n "$near" ]; then
      log "staging $name v$STAGING_VERSION is not served: using $near"
      printf '\t%s => %s %s\n' "$name" "$name" "$near"
    else
      log "staging $name v$STAGING_VERSION is not served and has no ${series}x: no replace line"
    fi
  done
}

minor="${K8S_VERSION#1.}"; minor="${minor%%.*}"
LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION \
-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

k8s_module() {
  # One module that requires k8s.io/kubernetes and maps every staging module to its release.
  local mod="$SRC/kubernetes"
  pins
  [ -f "$mod/.ready" ] && return 0
  log "preparing module k8s.io/kubernetes v$K8S_VERSION with etcd v$ETCD_VERSION, go ${GOTOOLCHAIN:-$(go env GOVERSION)} (module downloads ~30 s cold)"
  mkdir -p "$mod/etcd"
  local gover replaces
  gover="$(awk '$1 == "go" {print $2; exit}' "$KUBE_GOMOD")"
  replaces="$(cd "$ROOT" && staging_replaces)"
  {
    echo "module drakit.local/k8sbuild"
    echo
    echo "go ${gover:-1.25}"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes v$K8S_VERSION"
    echo "	go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
    echo ")"
    echo
    echo "replace ("
    printf '%s\n' "$replaces"
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

iptables_wrappers_stand_in() {
  # k8s.io/kubernetes v1.38 moved the kubelet's iptables helper to sigs.k8s.io/iptables-wrappers
  # (pkg/iptables), a module whose zip the Go module proxy here refuses (403). Only the kubelet
  # imports it (pkg/kubelet/kubelet_network_linux.go: the KUBE-IPTABLES-HINT and KUBE-FIREWALL
  # chains it keeps for *other* components). Where the proxy refuses it, the module is replaced
  # by a local one that reports a host without iptables, a case that kubelet handles by itself
  # ("No iptables support on this system", as on an nftables-only host); DRA is untouched, and
  # the real-node tier runs its kubelets with makeIPTablesUtilChains off anyway.
  local mod="$SRC/kubernetes" dir="$SRC/kubernetes/iptables-wrappers-absent"
  local version
  version="$(awk '$1 == "sigs.k8s.io/iptables-wrappers" {print $2; exit}' "$KUBE_GOMOD")"
  [ -n "$version" ] || return 0
  grep -q '^replace sigs.k8s.io/iptables-wrappers ' "$mod/go.mod" && return 0
  (cd "$mod" && go mod download "sigs.k8s.io/iptables-wrappers@$version" >/dev/null 2>&1) && return 0
  log "sigs.k8s.io/iptables-wrappers $version is not served: the kubelet gets a stand-in without iptables"
  mkdir -p "$dir/pkg/iptables"
  printf 'module sigs.k8s.io/iptables-wrappers\n\ngo 1.24\n' > "$dir/go.mod"
  cat > "$dir/pkg/iptables/iptables.go" <<'GO'
// Package iptables stands in for sigs.k8s.io/iptables-wrappers/pkg/iptables where the Go
// module proxy does not serve it (drakit's scripts/build-k8s.sh). It describes a host
// without iptables: NewBestEffort returns no client, so the kubelet of Kubernetes v1.38
// skips the iptables chains it keeps for other components and says so in its log.
package iptables

import (
	"context"
	"time"
)

// Table is an iptables table name.
type Table string

// Chain is an iptables chain name.
type Chain string

// RulePosition says whether a rule is prepended or appended.
type RulePosition string

// Mode says which iptables binaries a client uses.
type Mode string

// Protocol is the IP family of a client.
type Protocol string

const (
	TableMangle      Table        = "mangle"
	TableNAT         Table        = "nat"
	TableFilter      Table        = "filter"
	ChainInput       Chain        = "INPUT"
	ChainOutput      Chain        = "OUTPUT"
	Prepend          RulePosition = "-I"
	Append           RulePosition = "-A"
	UseInstalledMode Mode         = "installed"
)

// Interface is the part of an iptables client the kubelet uses.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	IsIPv6() bool
	Protocol() Protocol
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// NewBestEffort returns the clients of the IP families the host's iptables supports: none.
func NewBestEffort(ctx context.Context, mode Mode) map[Protocol]Interface {
	return map[Protocol]Interface{}
}
GO
  printf '\nreplace sigs.k8s.io/iptables-wrappers => ./iptables-wrappers-absent\n' >> "$mod/go.mod"
  (cd "$mod" && go mod tidy -e >&2 2>&1 | tail -5 >&2 || true)
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
  # go_install NAME MODULE_PATH@VERSION [TAGS] [LDFLAGS]
  local name="$1" target="$2" tags="${3:-}" ldflags="${4:-}"
  [ -x "$BIN/$name" ] && { log "$name: cached"; return 0; }
  log "$name: building (go install $target)"
  local t0=$SECONDS
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w $ldflags" ${tags:+-tags "$tags"} "$target"
  log "$name: built in $((SECONDS - t0)) s"
}

for c in "${components[@]}"; do
  case "$c" in
    kubelet)
      [ -x "$BIN/kubelet" ] || { k8s_module; iptables_wrappers_stand_in; }
      build_k8s kubelet k8s.io/kubernetes/cmd/kubelet ;;
    kube-apiserver|kube-scheduler|kube-controller-manager|kubectl)
      build_k8s "$c" "k8s.io/kubernetes/cmd/$c" ;;
    etcd) build_k8s etcd ./etcd ;;
    helm)
      # Without these (helm's own Makefile sets them from client-go), an offline
      # `helm template` / `helm lint` assumes Kubernetes v1.20; this helm belongs to the
      # K8S_VERSION tier, so it assumes that version. `helm version` names its own version.
      k8s_major="${K8S_VERSION%%.*}" k8s_minor="${K8S_VERSION#*.}"; k8s_minor="${k8s_minor%%.*}"
      go_install helm "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" "" \
        "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION
         -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$k8s_major
         -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor
         -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$k8s_major
         -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor" ;;
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
