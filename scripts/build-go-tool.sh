#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok), the simulator that keeps fake Nodes' Leases and status and runs their pods, at
# the release pinned in controlplane/kwok/go.mod (its `tool` line; go.sum checks every module), into a cache
# outside the clone:
#   ${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/kwok/<version>/kwok
# beside the pod stages it runs with, kwok's own defaults from the same module (a kwok binary alone has none):
#   .../kwok/<version>/pod-stages/   pod-ready, pod-complete, pod-delete
# (No node stage: the simulated kubelets report the Node status themselves; controlplane/src/kubelets says why.)
# What is already in the cache is not rebuilt, so a second run takes a moment.
#
# Prints the binary's path on the last line of stdout; progress goes to stderr.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module_dir="$repo_root/controlplane/kwok"

log() { printf '[build-kwok] %s\n' "$*" >&2; }
die() { printf '[build-kwok] error: %s\n' "$*" >&2; exit 1; }

[[ -f "$module_dir/go.mod" ]] || die "$module_dir/go.mod not found; run this script from a fakecloud clone"
version=$(awk '$1 == "sigs.k8s.io/kwok" { print $2; exit }' "$module_dir/go.mod")
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "could not read a sigs.k8s.io/kwok release from $module_dir/go.mod (got '$version')"

cache_dir="${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/kwok/$version"
binary="$cache_dir/kwok"
stages=(pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete)
if [[ -x "$binary" && -f "$cache_dir/pod-stages/pod-delete.yaml" ]]; then
	log "kwok $version already built: $binary"
	printf '%s\n' "$binary"
	exit 0
fi

# shellcheck source=scripts/go-toolchain.sh
source "$repo_root/scripts/go-toolchain.sh"
require_go "$module_dir" "kwok $version"

mkdir -p "$cache_dir"
# Built into a private temporary directory and moved at the end: a failed or interrupted build never leaves a
# half-written binary that looks finished.
tmp_dir=$(mktemp -d "$cache_dir/.build.XXXXXX")
trap 'rm -rf "$tmp_dir"' EXIT
cd "$module_dir"
log "building kwok $version with $(go version | awk '{print $3}') (about 2 minutes cold on 2 cores)"
start=$SECONDS
CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$tmp_dir/kwok" sigs.k8s.io/kwok/cmd/kwok ||
	die "go build failed (see the compiler output above); nothing was installed into $cache_dir"
source_dir="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$version/kustomize/stage"
mkdir -p "$tmp_dir/pod-stages"
for stage in "${stages[@]}"; do
	cp "$source_dir/$stage.yaml" "$tmp_dir/pod-stages/" || die "kwok's stage $stage.yaml is not in $source_dir"
done
chmod -R u+w "$tmp_dir/pod-stages"
# An earlier layout kept node stages too, which this project no longer runs.
rm -rf "$cache_dir/stages" "$cache_dir/pod-stages"
mv "$tmp_dir/pod-stages" "$cache_dir/pod-stages"
mv -f "$tmp_dir/kwok" "$binary"
log "built in $((SECONDS - start))s: $binary, stages in $cache_dir/pod-stages"
printf '%s\n' "$binary"
