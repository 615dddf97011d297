#!/usr/bin/env bash
# `make test`, after its build: every test of the workspace, the emulator's on PostgreSQL too, ccm-upstream's Go
# checks, schemathesis, the AWS clients and the console's browser tests — with the end-to-end cases on the local
# backend running beside them all, not after.
#
# Why beside: an end-to-end case mostly waits on its control plane's periods (48 cases, 20-odd minutes), and
# everything else together takes about as long, so one after the other doubled `make test`'s time (in a cold
# CI run, `make test` and lint ended last, 105 minutes in). Each case still runs alone (e2e/src/env.rs), and each
# local backend picks free ports, so the two sides share nothing but the CPU.
#
# The other steps run at a lower priority (nice 10): they only need the CPU's throughput, while a case's control
# plane keeps periods and leases that must not starve. In CI it also leaves the CPU first to the kind half beside
# `make test`, which takes longer: un-niced, a cold run's CoreDNS build there took 502 s instead of 274 s.
#
# The end-to-end cases' lines are prefixed with [e2e] and kept whole in target/e2e-local.log. Every step runs
# whatever failed before it; the exit status is 1 if any failed, and the last lines say which.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
cargo=${CARGO:-cargo}
read -ra cargo_flags <<<"${CARGO_FLAGS:---locked}"

log() { printf '==> %s\n' "$*"; }

# The tests' build, once: both sides run what it made.
log "building the workspace's tests"
executables=$("$cargo" test "${cargo_flags[@]}" --workspace --no-run --message-format=json-render-diagnostics |
	python3 scripts/test-executables.py fakecloud-e2e) || exit 1

mkdir -p target
e2e_log=target/e2e-local.log
log "the end-to-end cases on the local backend, beside the other tests (lines [e2e], whole in $e2e_log)"
(
	(
		# As cargo test runs a package's tests: from its directory, every binary whatever the one before did.
		cd e2e || exit 1
		rc=0
		while read -r executable; do
			"$executable" || rc=1
		done <<<"$executables"
		exit "$rc"
	) 2>&1 | tee "$e2e_log" | sed -u 's/^/[e2e] /'
	exit "${PIPESTATUS[0]}"
) &
e2e_pid=$!

failed=()
step() {
	log "$*"
	nice -n 10 "$@" || failed+=("$*")
}
# The same features as the build above (--exclude keeps the workspace's resolution), so nothing is compiled again.
step "$cargo" test "${cargo_flags[@]}" --workspace --exclude fakecloud-e2e --no-fail-fast
step bash scripts/test-postgres.sh
step bash scripts/test-upstream-ccm.sh
step bash scripts/schemathesis.sh
step bash scripts/test-aws-face.sh
step bash scripts/console-tests.sh

log "waiting for the end-to-end cases"
wait "$e2e_pid" || failed+=("the end-to-end cases on the local backend (their log: $e2e_log)")

if ((${#failed[@]})); then
	printf 'make test: failed: %s\n' "${failed[@]}"
	exit 1
fi
log "make test: everything passed"
