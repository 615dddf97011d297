#!/usr/bin/env bash
# Builds fakecloud-upstream-ccm — upstream's cloud-controller-manager command (k8s.io/cloud-provider/app) with
# fakecloud's provider, from ccm-upstream/ and the Go modules its go.mod pins — into a cache outside the clone:
#   ${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/upstream-ccm/<hash>/fakecloud-upstream-ccm
# <hash> covers the module's sources, go.mod, go.sum and the Go version, so an unchanged tree is not rebuilt
# and a rerun takes a second; any change builds a binary of its own beside the old ones.
#
# The e2e suite runs it with FAKECLOUD_E2E_CCM=upstream FAKECLOUD_E2E_UPSTREAM_CCM=<the path printed here>.
# Prints the binary's path on the last line of stdout; progress goes to stderr.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module_dir="$repo_root/ccm-upstream"

log() { printf '[build-upstream-ccm] %s\n' "$*" >&2; }
die() { printf '[build-upstream-ccm] error: %s\n' "$*" >&2; exit 1; }

[[ -f "$module_dir/go.mod" ]] || die "$module_dir/go.mod not found; run this script from a fakecloud clone"

# shellcheck source=scripts/go-toolchain.sh
source "$repo_root/scripts/go-toolchain.sh"
require_go "$module_dir" "upstream's CCM with fakecloud's provider"

# The Kubernetes release the binary reports: v1.N.M for the k8s.io/cloud-provider v0.N.M it is built from.
provider_version=$(awk '$1 == "k8s.io/cloud-provider" { print $2; exit }' "$module_dir/go.mod")
[[ "$provider_version" =~ ^v0\.([0-9]+\.[0-9]+)$ ]] || die "could not read k8s.io/cloud-provider from $module_dir/go.mod (got '$provider_version')"
k8s_version="v1.${BASH_REMATCH[1]}"

hash=$(
	cd "$module_dir"
	{
		go version
		# deploy/ holds manifests, not sources: editing them builds no new binary.
		find . -path ./deploy -prune -o -type f \( -name '*.go' -o -name go.mod -o -name go.sum -o -name '*.yaml' \) -print0 |
			sort -z | xargs -0 sha256sum
	} | sha256sum | cut -c1-16
)
cache_root=${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}
out_dir="$cache_root/upstream-ccm/$hash"
bin="$out_dir/fakecloud-upstream-ccm"

if [[ -x "$bin" ]]; then
	log "already built for these sources: $bin"
	printf '%s\n' "$bin"
	exit 0
fi

mkdir -p "$out_dir"
# Build into a private temporary directory and mv at the end, so an interrupted build never leaves a
# half-written binary that looks finished.
tmp_dir=$(mktemp -d "$out_dir/.build.XXXXXX")
trap 'rm -rf "$tmp_dir"' EXIT

# shellcheck source=scripts/kind/k8s-ldflags.sh
source "$repo_root/scripts/kind/k8s-ldflags.sh"
ldflags=$(k8s_version_ldflags "$k8s_version")

cd "$module_dir"
log "using $(go version); downloading Go modules (cached in $(go env GOMODCACHE))"
go mod download
log "building fakecloud-upstream-ccm ($k8s_version; a cold build takes minutes on 2 cores)"
start=$SECONDS
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$tmp_dir/fakecloud-upstream-ccm" ./cmd/fakecloud-upstream-ccm ||
	die "go build failed (see the compiler output above); nothing was installed into $out_dir"
mv -f "$tmp_dir/fakecloud-upstream-ccm" "$bin"
log "built in $((SECONDS - start))s: $bin"
printf '%s\n' "$bin"
