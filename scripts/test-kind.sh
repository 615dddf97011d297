#!/usr/bin/env bash
# `make test-kind`: the kind path's tests, as CI runs them beside `make test` (.ci/run):
#  1. the conformance suite (every case must run) and upstream's [sig-network] LoadBalancers e2e specs
#     (make e2e-kind-lb) against fakecloud-ccm and against upstream's CCM, in four lanes at once, each on a kind
#     cluster of its own made here (one engine, the images made once first):
#       fakecloud, fakecloud-upstream       the suite but for its second part (below)
#       fakecloud-2, fakecloud-upstream-2   the suite's second part, then upstream's LoadBalancers specs
#     A case or a spec mostly waits on its cluster's periods, grace periods and rolling updates, so four lanes
#     share 2 cores; one after the other on two clusters they took 45 min of CI, the specs' two rolling
#     updates (~10.5 min each) alone a quarter of it (BENCHMARKS.md). The two parts are complementary
#     filtersets, so every case runs on each CCM exactly once;
#  2. kind-up refuses a node image of another Kubernetes version up front, creating nothing;
#  3. the testcontainers modules (Rust and Go) against the emulator's image on that engine: kind-up built it, so
#     their tests may not skip. No registry serves testcontainers-go's reaper image, so the Go test runs without
#     it; -count=1, as a cached pass would not have started a container;
#  4. make kind-down: every cluster (the private engine stops with the last one);
#  5. the private engine's own tests (scripts/kind/test-engine.sh: the egress guard, nothing left after stop),
#     which stop and restart it, so they come last, with no cluster on it.
# Every step runs even when an earlier one failed; the exit status is non-zero if any did.
set -uo pipefail
kind_script=test-kind
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"
cd "$kind_repo_root" || exit 1
cargo=${CARGO:-cargo}

failed=()
run() {
	local what=$1 start=$SECONDS rc=0
	shift
	log "$what ..."
	"$@" || rc=$?
	if ((rc == 0)); then
		log "$what: passed in $((SECONDS - start))s"
	else
		log "$what: FAILED (exit $rc) after $((SECONDS - start))s"
		failed+=("$what")
	fi
}
testcontainers_rust() {
	eval "$(bash scripts/kind/engine.sh env)" && FAKECLOUD_TESTCONTAINERS=1 "$cargo" test --locked -p fakecloud-testcontainers
}
testcontainers_go() (
	eval "$(bash scripts/kind/engine.sh env)" && cd ccm-upstream &&
		FAKECLOUD_TESTCONTAINERS=1 TESTCONTAINERS_RYUK_DISABLED=true go test -count=1 ./testcontainers/...
)

# The suite's second part, the throttling presets: ~250 of its ~1,470 s on either CCM. Its lane starts later (see
# lane) and runs upstream's specs after it (~740 s, three at a time), so it ends with the first part's.
second_part='test(/^conformance_presets::/)'
# Three specs at once per cluster: the two rolling-update specs (~10.5 min each) and source ranges (~8 min)
# set the length of a run; more processes only add load on 2 cores.
lb_procs=${FAKECLOUD_E2E_LB_PROCS:-3}
# CLUSTER CCM PORT PART: one lane, its lines prefixed with its cluster. Part 1 is the suite without the second
# part; part 2 is the second part, then upstream's specs. Each lane has its own report directories.
lane() {
	local cluster=$1 ccm=$2 port=$3 part=$4
	export KIND_CLUSTER_NAME=$cluster FAKECLOUD_KIND_CCM=$ccm FAKECLOUD_PORT=$port
	(
		rc=0
		if ((part == 1)); then
			FAKECLOUD_E2E_PROFILE=kind-$ccm bash scripts/e2e-kind.sh -E "not ($second_part)" || rc=$?
		else
			# Its kind-up after the first lanes' have loaded their images: four kind-ups at once, loading images
			# into twelve nodes together, took 6 min where two take one (in a try short of inotify instances too).
			local first
			for first in "$kind_repo_root/.run/kind.ccm" "$kind_repo_root/.run/$kind_upstream_cluster/kind.ccm"; do
				for _ in $(seq 900); do
					[[ -f "$first" ]] && break
					sleep 1
				done
			done
			FAKECLOUD_E2E_PROFILE=kind-$ccm-2 bash scripts/e2e-kind.sh -E "$second_part" || rc=$?
			E2E_LB_PROCS=$lb_procs bash scripts/e2e-kind-lb.sh || rc=$?
		fi
		exit "$rc"
	) 2>&1 | sed -u "s/^/[$cluster] /"
	return "${PIPESTATUS[0]}"
}
# Four kind clusters hold more inotify instances than the kernel lets one user have by default (128; two take
# ~115): kubelets and containerd then fail with "too many open files" and nodes never turn Ready (kind's known
# issue, whose values these are). Raised for the run where this may (root), and put back when it ends.
inotify_before=()
raise_inotify() {
	local key_want key want current
	for key_want in fs.inotify.max_user_instances=512 fs.inotify.max_user_watches=524288; do
		key=${key_want%=*} want=${key_want#*=}
		current=$(sysctl -n "$key") || continue
		((current >= want)) && continue
		if sysctl -qw "$key=$want" 2>/dev/null; then
			inotify_before+=("$key=$current")
			log "raised $key from $current to $want for four kind clusters (put back at the end)"
		else
			log "warning: $key is $current; four kind clusters need $want (kind's known issue 'too many open files'): sudo sysctl -w $key=$want"
		fi
	done
}
put_back_inotify() {
	local kv
	for kv in "${inotify_before[@]}"; do sysctl -qw "$kv" || log "warning: could not put $kv back"; done
}
trap put_back_inotify EXIT
lanes() {
	raise_inotify
	# The engine, the images and e2e.test once (cached), so the lanes' kind-ups run side by side, each finding
	# everything built.
	KIND_CLUSTER_NAME=fakecloud bash scripts/kind-up.sh --prepare 2>&1 | sed -u 's/^/[fakecloud] /'
	((PIPESTATUS[0] == 0)) || return 1
	bash scripts/kind/build-e2e-test.sh >/dev/null || return 1
	local pids=() pid rc=0
	lane fakecloud fakecloud 8787 1 &
	pids+=($!)
	lane "$kind_upstream_cluster" upstream 8788 1 &
	pids+=($!)
	lane fakecloud-2 fakecloud 8790 2 &
	pids+=($!)
	lane "$kind_upstream_cluster-2" upstream 8791 2 &
	pids+=($!)
	for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
	for report in target/nextest/kind-{fakecloud,fakecloud-2,upstream,upstream-2}/summary.md \
		target/e2e-kind-lb/{fakecloud-2,"$kind_upstream_cluster"-2}/summary.md; do
		[[ -f "$report" ]] && printf '\n== %s ==\n%s\n' "$report" "$(<"$report")"
	done
	return "$rc"
}
run "the conformance suite and upstream's LoadBalancers specs against both CCMs, four kind clusters" lanes
# A copy of the node image that says it is another Kubernetes version (built offline from the image itself).
refuses_other_version() (
	local image=fakecloud/kind-node:other-version out
	eval "$(bash scripts/kind/engine.sh env)"
	printf 'FROM %s\nRUN printf v1.0.0 >/kind/version\n' "$kind_node_image" |
		docker build --quiet --network none -t "$image" - >/dev/null || return 1
	out=$(KIND_CLUSTER_NAME=fakecloud-refused KIND_NODE_IMAGE=$image FAKECLOUD_PORT=8789 bash scripts/kind-up.sh 2>&1)
	local rc=$?
	docker image rm "$image" >/dev/null 2>&1
	rmdir .run/fakecloud-refused 2>/dev/null
	((rc != 0)) && grep -q "is Kubernetes v1.0.0, and this checkout's is $k8s_version" <<<"$out" &&
		! PATH="$kind_bin_dir:$PATH" kind get clusters 2>/dev/null | grep -qx fakecloud-refused
)

run "kind-up refuses a node image of another Kubernetes version" refuses_other_version
run "the Rust testcontainers module's tests" testcontainers_rust
run "the Go testcontainers module's tests" testcontainers_go
run "deleting the kind clusters" bash scripts/kind-down.sh
run "the private engine's tests" bash scripts/kind/test-engine.sh

if ((${#failed[@]})); then
	log "FAILED: $(printf '%s; ' "${failed[@]}")"
	exit 1
fi
log "the kind path's tests passed"
