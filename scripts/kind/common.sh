#!/usr/bin/env bash
# Shared by the kind-path scripts (sourced, not run): where things are cached and kept, and how they talk.
#
#   $cache_root/engine/<docker version>/bin   dockerd, docker-proxy, runc built from the Go module proxy
#   $cache_root/engine/data                   the private engine's data-root (images survive between runs)
#   $cache_root/engine/run                    its socket, pid file, exec-root and log (one engine per machine)
#   $cache_root/kind/<k8s version>/bin        kind, kubelet, kubeadm, kube-proxy, kube-scheduler, crictl, coredns
#   $cache_root/k8s/<k8s version>/bin         kube-apiserver, kube-controller-manager, etcd, kubectl (control plane)
# shellcheck disable=SC2034 # the variables are for the scripts that source this file

kind_repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache_root=${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}
k8s_module_dir="$kind_repo_root/controlplane/upstream"
# The Kubernetes version of the kind nodes is the local control plane's: one source of truth, its go.mod.
k8s_version=$(awk '($1 == "k8s.io/kubernetes") { print $2; exit } ($1 == "require" && $2 == "k8s.io/kubernetes") { print $3; exit }' "$k8s_module_dir/go.mod")
kind_bin_dir="$cache_root/kind/$k8s_version/bin"
engine_root="$cache_root/engine"
engine_run_dir="$engine_root/run"
engine_socket="$engine_run_dir/docker.sock"
# The repository under which the kubeadm images are preloaded into the offline node image (no registry behind it).
kind_image_repository=fakecloud.local
kind_node_image="fakecloud/kind-node:$k8s_version"

# Where cargo builds: CARGO_TARGET_DIR (CI keeps it outside the clone) or the clone's target/.
cargo_target_dir=${CARGO_TARGET_DIR:-$kind_repo_root/target}
[[ "$cargo_target_dir" == /* ]] || cargo_target_dir="$kind_repo_root/$cargo_target_dir"
# The cargo profile of the binaries in the project's images (images.sh) and of the CLI kind-up runs, and where
# cargo puts them: release, or FAKECLOUD_IMAGE_PROFILE=dev for a quicker debug build.
image_profile=${FAKECLOUD_IMAGE_PROFILE:-release}
case "$image_profile" in
release) image_target_dir="$cargo_target_dir/release" ;;
dev) image_target_dir="$cargo_target_dir/debug" ;;
*)
	printf 'error: FAKECLOUD_IMAGE_PROFILE must be release or dev, not %s\n' "'$image_profile'" >&2
	exit 1
	;;
esac

# The CCM the kind path deploys (FAKECLOUD_KIND_CCM): fakecloud-ccm (ccm/deploy/), or upstream's
# cloud-controller-manager with fakecloud's Go provider (ccm-upstream/deploy/, an overlay of the same Deployment).
# Both run as the same ServiceAccount (ccm/deploy/rbac.yaml), with the same cloud-config Secret and Lease.
# kind-up records its choice in $run_root/kind.ccm (kind_ccm_file), so the suite judges the CCM that runs.
kind_ccm_select() {
	kind_ccm=$1
	case "$kind_ccm" in
	fakecloud) kind_ccm_image=fakecloud/ccm kind_ccm_deployment=fakecloud-ccm ;;
	upstream) kind_ccm_image=fakecloud/upstream-ccm kind_ccm_deployment=fakecloud-upstream-ccm ;;
	*)
		printf 'error: FAKECLOUD_KIND_CCM must be fakecloud or upstream, not %s\n' "'$kind_ccm'" >&2
		exit 1
		;;
	esac
}
kind_ccm_select "${FAKECLOUD_KIND_CCM:-fakecloud}"

# One cluster's names (KIND_CLUSTER_NAME): the default cluster `fakecloud` keeps the plain ones; any other gets
# its own kind network, emulator container and run directory, so two clusters (one per CCM: make e2e-kind-both)
# run side by side on one engine, each with its own cloud.
kind_cluster=${KIND_CLUSTER_NAME:-fakecloud}
kind_upstream_cluster=fakecloud-upstream # make e2e-kind-both's second cluster, for upstream's CCM
if [[ "$kind_cluster" == fakecloud ]]; then
	kind_network=${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind}
	kind_emulator=fakecloud-emulator
	kind_run_root=${FAKECLOUD_RUN_DIR:-$kind_repo_root/.run}
else
	kind_network=${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind-$kind_cluster}
	kind_emulator=$kind_cluster-emulator
	kind_run_root=${FAKECLOUD_RUN_DIR:-$kind_repo_root/.run/$kind_cluster}
fi
# kind itself reads another network's name from here (and warns that it does).
if [[ "$kind_network" != kind ]]; then export KIND_EXPERIMENTAL_DOCKER_NETWORK=$kind_network; fi
kind_ccm_file="$kind_run_root/kind.ccm"

# Whether kind cluster NAME (default $kind_cluster) runs on the engine that answers (the caller has its
# DOCKER_HOST).
kind_cluster_exists() {
	command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1 &&
		PATH="$kind_bin_dir:$PATH" kind get clusters 2>/dev/null | grep -qx "${1:-$kind_cluster}"
}

# A binary built into $kind_bin_dir keeps what it was built from in a stamp beside it: NAME's stamp file, and
# whether NAME is built from exactly VERSION (build-node-binaries.sh, build-e2e-test.sh).
kind_bin_stamp() { printf '%s/.%s.version' "$kind_bin_dir" "$1"; }
kind_bin_built() { [[ -x "$kind_bin_dir/$1" && -f "$(kind_bin_stamp "$1")" && "$(cat "$(kind_bin_stamp "$1")")" == "$2" ]]; }

# Runs kind-up when $kind_cluster is not there yet (what make e2e-kind and e2e-kind-lb do first), then takes the
# engine's settings again: kind-up may have started the private engine.
kind_cluster_ensure() {
	kind_cluster_exists "$kind_cluster" && return
	log "no kind cluster $kind_cluster yet: making it (make kind-up)"
	bash "$kind_repo_root/scripts/kind-up.sh"
	eval "$(bash "$kind_repo_root/scripts/kind/engine.sh" env)"
}

# The CCM's Deployment, as kind-up applies it (before its --cluster-cidr is set); kubectl on PATH.
kind_ccm_manifest() {
	case "$kind_ccm" in
	fakecloud) cat "$kind_repo_root/ccm/deploy/deployment.yaml" ;;
	upstream) kubectl kustomize --load-restrictor=LoadRestrictionsNone "$kind_repo_root/ccm-upstream/deploy" ;;
	esac
}

# Our machines ship Go in /usr/local/go, which a non-login shell may not have on PATH.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	PATH="/usr/local/go/bin:$PATH"
fi

kind_t0=${kind_t0:-$SECONDS}
# Progress lines name the script and the seconds since it started.
log() { printf '[%s %4ss] %s\n' "${kind_script:-kind}" "$((SECONDS - kind_t0))" "$*" >&2; }
die() {
	printf '[%s] error: %s\n' "${kind_script:-kind}" "$*" >&2
	exit 1
}

# Runs a named step and logs how long it took.
step() {
	local what=$1 start=$SECONDS
	shift
	log "$what ..."
	"$@"
	log "$what: done in $((SECONDS - start))s"
}
