#!/usr/bin/env bash
# Shared by the kind-path scripts (sourced, not run): the settings `fakecloud-kind env` prints (kind/src/
# settings.rs: where things are cached, one cluster's names, the CCM, the engine to use), and progress lines.
# fakecloud-kind itself (kind/) is built here when needed: a second when it is current. With
# FAKECLOUD_IMAGE_PREBUILT the caller has built the workspace's binaries (CI, before its tests' build starts
# beside the kind path; cargo would wait for that build's lock only to find nothing to do).
# shellcheck disable=SC2034 # the variables are for the scripts that source this file

kind_repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kind_tool=${CARGO_TARGET_DIR:-target}/debug/fakecloud-kind
[[ "$kind_tool" == /* ]] || kind_tool="$kind_repo_root/$kind_tool"
if [[ -z "${FAKECLOUD_IMAGE_PREBUILT:-}" || ! -x "$kind_tool" ]]; then
	(cd "$kind_repo_root" && cargo build --locked --quiet --bin fakecloud-kind) || exit 1
fi

# What `fakecloud-kind env` sets (declared for shellcheck, which does not see through eval): Settings::
# shell_assignments in kind/src/settings.rs.
cache_root='' k8s_module_dir='' k8s_version='' kind_bin_dir='' engine_root='' engine_run_dir='' engine_socket=''
kind_image_repository='' kind_node_image='' image_target_dir='' image_profile='' kind_ccm='' kind_ccm_image=''
kind_ccm_deployment='' kind_cluster='' kind_upstream_cluster='' kind_network='' kind_emulator='' kind_run_root=''
kind_ccm_file=''

# The settings of the cluster named by the environment now (KIND_CLUSTER_NAME, FAKECLOUD_KIND_CCM, ...), and
# DOCKER_HOST when the private engine is the one to use: again after anything that may have started it.
kind_env() {
	local out
	out=$("$kind_tool" env) || exit 1
	eval "$out"
}
kind_env

# Whether kind cluster NAME (default $kind_cluster) runs on the engine that answers.
kind_cluster_exists() {
	command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1 &&
		PATH="$kind_bin_dir:$PATH" kind get clusters 2>/dev/null | grep -qx "${1:-$kind_cluster}"
}

# Runs kind-up when $kind_cluster is not there yet (what make e2e-kind and e2e-kind-lb do first).
kind_cluster_ensure() {
	kind_cluster_exists "$kind_cluster" && return
	log "no kind cluster $kind_cluster yet: making it (make kind-up)"
	"$kind_tool" up || exit 1
	kind_env
}

# Whether NAME in $kind_bin_dir is built from exactly VERSION: the stamp beside it (fakecloud-kind
# node-binaries, build-e2e-test.sh).
kind_bin_stamp() { printf '%s/.%s.version' "$kind_bin_dir" "$1"; }
kind_bin_built() { [[ -x "$kind_bin_dir/$1" && -f "$(kind_bin_stamp "$1")" && "$(cat "$(kind_bin_stamp "$1")")" == "$2" ]]; }

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
