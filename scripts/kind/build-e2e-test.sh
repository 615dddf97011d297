#!/usr/bin/env bash
# Builds upstream's e2e suite binary, e2e.test (`go test -c k8s.io/kubernetes/test/e2e`), at the kind
# cluster's Kubernetes release, and the ginkgo CLI of the ginkgo version it was built with, into
#   $cache_root/kind/<k8s version>/bin/{e2e.test,ginkgo}   (kind_bin_dir in common.sh, beside the node binaries)
# for scripts/e2e-kind-lb.sh, which runs its `[sig-network] LoadBalancers` specs against the kind cluster
# (one at a time by e2e.test itself, or in parallel by `ginkgo --procs=N e2e.test`, which starts N e2e.test
# processes and merges their reports: e2e.test alone has no --procs, as in upstream's hack/ginkgo-e2e.sh).
#
# Where it is built: test/e2e is not a main package, so controlplane/upstream/go.mod cannot keep its imports
# in the graph with a tool line (as it does for kubelet and agnhost), and the suite imports modules nothing
# else there does (DRA's test driver, ginkgo, gomega...), whose go.sum lines it lacks. Rather than add them to
# the control plane's go.sum (where `go mod tidy` drops them again), it is built in a copy of that module
# kept under $cache_root/kind/<k8s version>/e2e-module: same requirements and staging replaces, so the same
# versions as the control plane and the node binaries, and that copy's go.sum takes the missing lines
# (downloaded from the Go module proxy, checked against the checksum database). The repository is unchanged.
#
# A built binary is kept while its stamp (the release and a hash of controlplane/upstream's go.mod and
# go.sum) matches, so a second run takes about a second. Measured on 2 cores after `fakecloud-kind
# node-binaries`, whose compiled packages Go's build cache shares: ~6 min, ~20 s of it linking. The build goes
# to a temporary file moved into place when complete. Prints the binary's path on the last line of stdout; progress goes to stderr.
set -euo pipefail

kind_script=build-e2e-test
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/kind/k8s-ldflags.sh
source "$kind_repo_root/scripts/kind/k8s-ldflags.sh"

e2e_package=k8s.io/kubernetes/test/e2e
[[ -f "$k8s_module_dir/go.mod" && -f "$k8s_module_dir/go.sum" ]] ||
	die "$k8s_module_dir/go.mod or go.sum not found; run this script from a fakecloud clone"
[[ "$k8s_version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] ||
	die "could not read a k8s.io/kubernetes release from $k8s_module_dir/go.mod (got '$k8s_version')"
command -v go >/dev/null 2>&1 ||
	die "the Go toolchain is not on PATH, and it builds e2e.test. Install Go $(awk '$1 == "go" { print $2; exit }' "$k8s_module_dir/go.mod") or newer, put its bin directory on PATH, and run this script again."

module_copy="$cache_root/kind/$k8s_version/e2e-module"
# The control plane's module graph decides every version in the binaries: a change to it rebuilds.
graph_hash=$(cat "$k8s_module_dir/go.mod" "$k8s_module_dir/go.sum" | sha256sum | cut -c1-12)


# The module copy: go.mod renamed (a module path of its own, so nothing mistakes it for the control plane's),
# go.sum as the control plane's plus whatever the suite adds. Remade whenever the control plane's graph changed.
module_copy_ready() {
	[[ -f "$module_copy/.graph" && "$(<"$module_copy/.graph")" == "$graph_hash" ]] && return
	rm -rf "$module_copy"
	mkdir -p "$module_copy"
	sed 's|^module .*|module fakecloud.local/e2e-test-build|' "$k8s_module_dir/go.mod" >"$module_copy/go.mod"
	cp "$k8s_module_dir/go.sum" "$module_copy/go.sum"
	# The tool block names the node binaries' mains; it means nothing here and would only be loaded.
	sed -i '/^tool (/,/^)/d; /^tool /d' "$module_copy/go.mod"
	printf '%s\n' "$graph_hash" >"$module_copy/.graph"
}

# build NAME STAMP PACKAGE GO-ARGS...: runs `go GO-ARGS... -o <temporary file> PACKAGE` in the module copy, and
# moves the result into place with its stamp only when it is complete.
build() {
	local name=$1 stamp_value=$2 pkg=$3 tmp start=$SECONDS
	shift 3
	tmp=$(mktemp "$kind_bin_dir/.$name.XXXXXX")
	# shellcheck disable=SC2064 # expand now: the trap removes this very file
	trap "rm -f '$tmp'" EXIT
	# -mod=mod: the copy's go.sum takes the missing lines (checked against the checksum database); go.mod keeps
	# the control plane's versions, as every module needed is already required by k8s.io/kubernetes itself.
	# CGO_ENABLED=0 and -trimpath as the node binaries, so their compiled packages in Go's build cache are reused.
	(cd "$module_copy" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go "$@" -trimpath -buildvcs=false -o "$tmp" "$pkg") ||
		die "go $* $pkg failed (see the compiler output above); nothing was installed.
A download or checksum error means the Go module proxy (go env GOPROXY: $(go env GOPROXY)) did not answer for a
module it needs; the module copy is $module_copy (delete it to start over)."
	[[ -s "$tmp" ]] || die "go $* $pkg wrote no binary"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$kind_bin_dir/$name"
	printf '%s\n' "$stamp_value" >"$(kind_bin_stamp "$name")"
	trap - EXIT
	log "built $kind_bin_dir/$name ($(du -m "$kind_bin_dir/$name" | cut -f1) MB) in $((SECONDS - start))s"
}

mkdir -p "$kind_bin_dir"
e2e_stamp="k8s.io/kubernetes@$k8s_version graph $graph_hash"
if kind_bin_built e2e.test "$e2e_stamp"; then
	log "e2e.test of Kubernetes $k8s_version already built: $kind_bin_dir/e2e.test"
else
	log "using $(go version); building e2e.test of Kubernetes $k8s_version (the suite imports most of Kubernetes:
    ~6 min on 2 cores after the node binaries, whose compiled packages Go's build cache shares; longer without)"
	module_copy_ready
	# -vet=off: `go test -c` would vet every package of the suite first, minutes for nothing here. The ldflags
	# stamp the release, as on every other Kubernetes binary here (k8s-ldflags.sh).
	build e2e.test "$e2e_stamp" "$e2e_package" test -c -vet=off -ldflags "$(k8s_version_ldflags "$k8s_version")"
fi

# The ginkgo CLI at the version e2e.test was built with: the CLI and the suite speak one protocol per version.
module_copy_ready
ginkgo_version=$(cd "$module_copy" && GOWORK=off go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2) ||
	die "could not read github.com/onsi/ginkgo/v2's version from the module graph of $module_copy"
if kind_bin_built ginkgo "github.com/onsi/ginkgo/v2@$ginkgo_version"; then
	log "ginkgo $ginkgo_version already built: $kind_bin_dir/ginkgo"
else
	build ginkgo "github.com/onsi/ginkgo/v2@$ginkgo_version" github.com/onsi/ginkgo/v2/ginkgo build -ldflags "-s -w"
fi
printf '%s\n' "$kind_bin_dir/e2e.test"
