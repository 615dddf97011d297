#!/usr/bin/env bash
# Builds the upstream control plane (kube-apiserver, kube-controller-manager, etcd) and a kubectl of the
# same version from the official Go modules pinned in controlplane/upstream/go.mod, into a cache outside
# the clone:
#   ${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/k8s/<version>/bin
# Binaries already in the cache are not rebuilt, so a second run takes a second.
#
# etcd: Debian's etcd-server is 3.4.23, older than the oldest etcd Kubernetes 1.37 supports
# (kubeadm's MinExternalEtcdVersion is 3.5.24; 1.37 ships with 3.7.0), and 3.4 lacks
# RequestWatchProgress, which the apiserver's watch cache relies on. So etcd is built here too,
# at the exact version k8s.io/kubernetes itself requires (go.etcd.io/etcd/server/v3 in go.mod),
# which also means its sources are already in the module graph we download anyway.
#
# kubectl: not in the registries we reach either, and a kubectl found on a machine may be many minor
# versions away from the cluster (kubectl supports one minor of skew); `make up` and the CCM tests use it.
#
# Prints the bin directory on the last line of stdout; progress goes to stderr.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module_dir="$repo_root/controlplane/upstream"

log() { printf '[build-control-plane] %s\n' "$*" >&2; }
die() { printf '[build-control-plane] error: %s\n' "$*" >&2; exit 1; }

# Reads "<module> <version>" from go.mod so the version has one source of truth.
module_version() {
	awk -v m="$1" '($1 == m) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' "$module_dir/go.mod"
}

[[ -f "$module_dir/go.mod" ]] || die "$module_dir/go.mod not found; run this script from a fakecloud clone"

k8s_version=$(module_version k8s.io/kubernetes)
etcd_version=$(module_version go.etcd.io/etcd/server/v3)
[[ "$k8s_version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "could not read a k8s.io/kubernetes release from $module_dir/go.mod (got '$k8s_version')"
[[ -n "$etcd_version" ]] || die "could not read go.etcd.io/etcd/server/v3 from $module_dir/go.mod"

cache_root=${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}
bin_dir="$cache_root/k8s/$k8s_version/bin"

missing=()
for name in kube-apiserver kube-controller-manager etcd kubectl; do
	[[ -x "$bin_dir/$name" ]] || missing+=("$name")
done
if ((${#missing[@]} == 0)); then
	log "Kubernetes $k8s_version (with kubectl) and etcd $etcd_version already built in $bin_dir"
	printf '%s\n' "$bin_dir"
	exit 0
fi

# shellcheck source=scripts/go-toolchain.sh
source "$repo_root/scripts/go-toolchain.sh"
require_go "$module_dir" "${missing[*]} (Kubernetes $k8s_version)"
log "using $(go version)"

mkdir -p "$bin_dir"
# Build into a private temporary directory next to the cache and mv at the end, so an
# interrupted or failed build never leaves a half-written binary that looks finished.
tmp_dir=$(mktemp -d "$bin_dir/.build.XXXXXX")
trap 'rm -rf "$tmp_dir"' EXIT

# Without these the binaries report v0.0.0-master; kube clients and our tests read the version. The same
# stamp as the kind node binaries (`fakecloud-kind node-binaries`), from one definition.
# shellcheck source=scripts/kind/k8s-ldflags.sh
source "$repo_root/scripts/kind/k8s-ldflags.sh"
ldflags="$(k8s_version_ldflags "$k8s_version") -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version"

packages=()
for name in "${missing[@]}"; do packages+=("./cmd/$name"); done

cd "$module_dir"
log "downloading Go modules for Kubernetes $k8s_version (cached in $(go env GOMODCACHE))"
start=$SECONDS
go mod download
log "modules ready in $((SECONDS - start))s"

log "building ${missing[*]} (a cold build takes several minutes on 2 cores and ~1.6 GiB per link)"
start=$SECONDS
# One go build for all missing binaries shares the compiled package graph between them.
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$tmp_dir/" "${packages[@]}" ||
	die "go build failed (see the compiler output above); nothing was installed into $bin_dir"
log "built in $((SECONDS - start))s"

for name in "${missing[@]}"; do
	mv -f "$tmp_dir/$name" "$bin_dir/$name"
	log "installed $bin_dir/$name"
done
log "Kubernetes $k8s_version and etcd $etcd_version ready in $bin_dir"
printf '%s\n' "$bin_dir"
