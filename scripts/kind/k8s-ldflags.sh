# shellcheck shell=bash
# Sourced (not run) by scripts/build-control-plane.sh, scripts/build-upstream-ccm.sh, scripts/kind/build-e2e-test.sh
# and `fakecloud-kind node-binaries` (kind/src/node_binaries.rs runs it through bash): the -ldflags that stamp a
# Kubernetes binary with its release, the variables upstream's hack/lib/version.sh sets. Without
# them every binary reports v0.0.0-master: kube clients and our tests read the version, kubeadm derives the
# control-plane version and its preflight checks from its own, and it compares `kubelet --version` against it.
# One definition, so the control plane and the kind node binaries can never be stamped differently.

# k8s_version_ldflags v1.37.2 prints "-s -w -X ...gitVersion=v1.37.2 ..." for component-base and client-go.
k8s_version_ldflags() {
	local version=$1 minor pkg flags build_date
	if [[ ! "$version" =~ ^v1\.([0-9]+)\.[0-9]+$ ]]; then
		printf 'k8s_version_ldflags: %s is not a Kubernetes release (v1.N.M)\n' "$version" >&2
		return 1
	fi
	minor=${BASH_REMATCH[1]}
	build_date=$(date -u +'%Y-%m-%dT%H:%M:%SZ')
	flags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
		flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
	done
	printf '%s\n' "$flags"
}
