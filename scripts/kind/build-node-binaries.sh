#!/usr/bin/env bash
# Builds what a kind node needs beyond the local control plane, from the Go module proxy, into
#   $cache_root/kind/<k8s version>/bin   (kind_bin_dir in common.sh)
#
#   kubelet kubeadm kube-proxy kube-scheduler   upstream's own mains (k8s.io/kubernetes/cmd/...) at the control
#                                               plane's release, built inside controlplane/upstream so they use
#                                               its pinned module graph and staging replaces; stamped with the
#                                               same version ldflags as build-control-plane.sh (k8s-ldflags.sh)
#   agnhost   upstream's e2e test server (k8s.io/kubernetes/test/images/agnhost) at the same release: the pods
#             the suite sends load balancer traffic to (netexec answers /hostname, /clientip)
#   crictl    sigs.k8s.io/cri-tools, the release of the same minor as Kubernetes (cri-tools follows k8s minors)
#   coredns   github.com/coredns/coredns at the version kubeadm deploys (CoreDNSVersion in kubeadm's
#             constants, read from the module cache, so the image tag and the binary agree)
#   kind      sigs.k8s.io/kind, KIND_VERSION or the newest release known to support this Kubernetes minor
#   cni/      the CNI plugins the VPC router's config uses (bridge, host-local, loopback, portmap), from
#             github.com/containernetworking/plugins at the release kind's node image ships (its base image
#             Dockerfile's CNI_PLUGINS_VERSION). kind's image has all but bridge; the router image carries
#             these and installs on each node the ones it lacks (vpc-router/deploy/vpc-router.yaml)
#
# kube-apiserver, kube-controller-manager, etcd and kubectl are not built here: scripts/build-control-plane.sh
# has them (and `make test` must not pay for the ones here).
#
# crictl, coredns and kind are separate main modules: each is built inside its own downloaded module (its own
# go.mod, go.sum and replace directives, exactly as its release was tested), not pulled into
# controlplane/upstream, where MVS would mix their dependencies with Kubernetes'.
#
# Every binary already built is skipped (a second run takes about a second); a binary whose pinned version
# changed is rebuilt. Builds go to a temporary directory and are moved into place when complete.
# Prints the bin directory on the last line of stdout; progress goes to stderr.
set -euo pipefail

kind_script=build-node-binaries
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/kind/k8s-ldflags.sh
source "$kind_repo_root/scripts/kind/k8s-ldflags.sh"

[[ -f "$k8s_module_dir/go.mod" ]] || die "$k8s_module_dir/go.mod not found; run this script from a fakecloud clone"
[[ "$k8s_version" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] ||
	die "could not read a k8s.io/kubernetes release from $k8s_module_dir/go.mod (got '$k8s_version')"
k8s_minor=${BASH_REMATCH[1]}

# kind v0.33.0 is the newest release in the module proxy, and its default node image is v1.37.0: it writes
# kubeadm configs 1.37 accepts. Raise it together with the Kubernetes version in controlplane/upstream/go.mod.
kind_tool_version=${KIND_VERSION:-v0.33.0}
crictl_version=${CRICTL_VERSION:-v1.$k8s_minor.0}

command -v go >/dev/null 2>&1 ||
	die "the Go toolchain is not on PATH, and it builds the kind node binaries. Install Go $(awk '$1 == "go" { print $2; exit }' "$k8s_module_dir/go.mod") or newer, put its bin directory on PATH, and run this script again."

mkdir -p "$kind_bin_dir"
tmp_dir=$(mktemp -d "$kind_bin_dir/.build.XXXXXX")
trap 'rm -rf "$tmp_dir"' EXIT

install_built() {
	local name=$1 version=$2
	mv -f "$tmp_dir/$name" "$kind_bin_dir/$name"
	printf '%s\n' "$version" >"$(kind_bin_stamp "$name")"
	log "installed $kind_bin_dir/$name ($version)"
}

# Downloads module@version into the module cache (verified against go.sum / the checksum database) and prints
# its directory. Run outside any module so no go.mod or go.work around us is consulted or changed.
module_dir() {
	local json dir
	json=$(cd "$tmp_dir" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "$1") ||
		die "could not download $1 from the Go module proxy ($(go env GOPROXY)).
If that version does not exist yet, pin another one (see the variables at the top of $0)."
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
	[[ -d "$dir" ]] || die "go mod download $1 reported no module directory"
	printf '%s\n' "$dir"
}

# Builds one main package inside its own module's directory in the module cache (read-only, so -mod=readonly).
build_in_module() {
	local dir=$1 pkg=$2 out=$3 ldflags=$4
	(cd "$dir" && GOWORK=off CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false \
		-ldflags "$ldflags" -o "$tmp_dir/$out" "$pkg") ||
		die "go build of $pkg in $dir failed (see the compiler output above); nothing was installed"
}

build_kubernetes() {
	local missing=("$@") packages=() name
	for name in "${missing[@]}"; do packages+=("k8s.io/kubernetes/cmd/$name"); done
	log "building ${missing[*]} (kubelet is the slow one: several minutes warm, 10-20 cold on 2 cores)"
	# One go build for all of them shares the compiled package graph (and the control plane's build cache).
	(cd "$k8s_module_dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false \
		-ldflags "$(k8s_version_ldflags "$k8s_version")" -o "$tmp_dir/" "${packages[@]}") ||
		die "go build of ${missing[*]} failed (see above). A 'missing go.sum entry' means controlplane/upstream/go.mod
lost its tool block for these commands: restore it with
  (cd $k8s_module_dir && go get -tool ${packages[*]/%/@$k8s_version})"
	for name in "${missing[@]}"; do install_built "$name" "k8s.io/kubernetes@$k8s_version"; done
}

build_agnhost() {
	(cd "$k8s_module_dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w" \
		-o "$tmp_dir/agnhost" k8s.io/kubernetes/test/images/agnhost) ||
		die "go build of agnhost failed (see above). A 'missing go.sum entry' means controlplane/upstream/go.mod lost
its tool line for it: restore it with
  (cd $k8s_module_dir && go get -tool k8s.io/kubernetes/test/images/agnhost@$k8s_version)"
	install_built agnhost "k8s.io/kubernetes@$k8s_version"
}

# CoreDNS at the version kubeadm deploys: kubeadm's constant, read from its source, never guessed.
coredns_version() {
	local dir file version
	dir=$(cd "$k8s_module_dir" && go list -m -f '{{.Dir}}' k8s.io/kubernetes 2>/dev/null) || true
	[[ -n "$dir" && -d "$dir" ]] || dir=$(module_dir "k8s.io/kubernetes@$k8s_version")
	file="$dir/cmd/kubeadm/app/constants/constants.go"
	[[ -f "$file" ]] || die "kubeadm's constants not found at $file"
	version=$(sed -n 's/^[[:space:]]*CoreDNSVersion[[:space:]]*=[[:space:]]*"\(v[0-9][^"]*\)".*/\1/p' "$file" | head -n1)
	[[ -n "$version" ]] || die "could not read CoreDNSVersion from $file (did kubeadm rename it?)"
	printf '%s\n' "$version"
}

build_crictl() {
	local dir
	dir=$(module_dir "sigs.k8s.io/cri-tools@$crictl_version")
	build_in_module "$dir" ./cmd/crictl crictl "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${crictl_version#v}"
	install_built crictl "sigs.k8s.io/cri-tools@$crictl_version"
}

build_coredns() {
	local version=$1 dir
	dir=$(module_dir "github.com/coredns/coredns@$version")
	build_in_module "$dir" . coredns "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$version"
	install_built coredns "github.com/coredns/coredns@$version"
}

build_kind() {
	local dir
	dir=$(module_dir "sigs.k8s.io/kind@$kind_tool_version")
	build_in_module "$dir" . kind "-s -w"
	install_built kind "sigs.k8s.io/kind@$kind_tool_version"
}

# The CNI plugins' release: the one kind's own node image ships, read from kind's base image Dockerfile.
cni_plugins_version() {
	local file version
	file="$(module_dir "sigs.k8s.io/kind@$kind_tool_version")/images/base/Dockerfile"
	version=$(sed -n 's/^ARG CNI_PLUGINS_VERSION="\(v[0-9][^"]*\)".*/\1/p' "$file" | head -n1)
	[[ -n "$version" ]] || die "could not read CNI_PLUGINS_VERSION from $file (did kind rename it?)"
	printf '%s\n' "$version"
}

cni_plugins=(main/bridge ipam/host-local main/loopback meta/portmap)
build_cni_plugins() {
	local version=$1 dir plugin
	dir=$(module_dir "github.com/containernetworking/plugins@$version")
	mkdir -p "$tmp_dir/cni"
	for plugin in "${cni_plugins[@]}"; do
		build_in_module "$dir" "./plugins/$plugin" "cni/${plugin#*/}" \
			"-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$version"
	done
	rm -rf "$kind_bin_dir/cni"
	install_built cni "github.com/containernetworking/plugins@$version ${cni_plugins[*]}"
}

log "using $(go version); Kubernetes $k8s_version, crictl $crictl_version, kind $kind_tool_version"

missing=()
for name in kubelet kubeadm kube-proxy kube-scheduler; do
	kind_bin_built "$name" "k8s.io/kubernetes@$k8s_version" || missing+=("$name")
done
if ((${#missing[@]} > 0)); then
	step "build ${missing[*]}" build_kubernetes "${missing[@]}"
fi

kind_bin_built agnhost "k8s.io/kubernetes@$k8s_version" || step "build agnhost (upstream's e2e test server)" build_agnhost

kind_bin_built crictl "sigs.k8s.io/cri-tools@$crictl_version" || step "build crictl $crictl_version" build_crictl

coredns=$(coredns_version)
kind_bin_built coredns "github.com/coredns/coredns@$coredns" || step "build coredns $coredns (kubeadm's CoreDNSVersion)" build_coredns "$coredns"

kind_bin_built kind "sigs.k8s.io/kind@$kind_tool_version" || step "build kind $kind_tool_version" build_kind

cni=$(cni_plugins_version)
kind_bin_built cni "github.com/containernetworking/plugins@$cni ${cni_plugins[*]}" ||
	step "build the CNI plugins ${cni_plugins[*]#*/} $cni (kind's CNI_PLUGINS_VERSION)" build_cni_plugins "$cni"

log "kind node binaries for Kubernetes $k8s_version ready in $kind_bin_dir"
printf '%s\n' "$kind_bin_dir"
