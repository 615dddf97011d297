#!/usr/bin/env bash
# `make test` runs this after the cargo tests: schemathesis against the OpenAPI document the emulator serves,
# every operation (the fault API too, with the admin token), every phase including stateful, every check, a
# fixed seed. Installs schemathesis (pinned) into a venv under the cache once. Writes a JUnit report to
# target/schemathesis/junit.xml, ends with "N passed, N failed" (test cases), and exits non-zero on any failure.
# Extra arguments go to `schemathesis run`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

version=4.32.5
venv=${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/schemathesis/$version
# Test cases per operation and phase: about 30 operations, several phases, well over 5,000 cases in all.
max_examples=${FAKECLOUD_SCHEMATHESIS_EXAMPLES:-200}
seed=42

# A venv cannot be moved once made, so it is made in place; the marker says the install finished.
if [[ ! -f $venv/.installed ]]; then
	echo "==> installing schemathesis $version into $venv (once)"
	rm -rf "$venv"
	python3 -m venv "$venv"
	nice -n 10 "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
	touch "$venv/.installed"
fi

echo "==> building the emulator"
# Not `-p fakecloud-cli`: cargo would unify features over that package alone and rebuild the workspace's crates
# that `make test` has just built with the workspace's.
nice -n 10 "$cargo" build --locked --bin fakecloud

root=$PWD
work=$(mktemp -d)
report=${CARGO_TARGET_DIR:-target}/schemathesis
mkdir -p "$report"
rm -f "$report"/junit*.xml
# Throwaway tokens for a throwaway database; given by environment, not by flags that `ps` shows.
user_token="schemathesis-user-$RANDOM$RANDOM$RANDOM"
admin_token="schemathesis-admin-$RANDOM$RANDOM$RANDOM"
# Every transition immediate: schemathesis reads right after a change, and a load balancer still `deleting`
# for --lb-delete-delay after its DELETE would be a 200 where use_after_free rightly expects a 404.
# shellcheck source=scripts/serve-throwaway.sh
source scripts/serve-throwaway.sh
FAKECLOUD_USER_TOKEN=$user_token FAKECLOUD_ADMIN_TOKEN=$admin_token serve_throwaway "$work" \
	"${CARGO_TARGET_DIR:-target}/debug/fakecloud" --boot-delay 0s --stop-delay 0s --terminate-delay 0s --lb-provision-delay 0s --lb-delete-delay 0s
echo "==> schemathesis $version against $url/openapi.json (seed $seed, $max_examples examples per operation)"

# Fault rules, rate limits and outages make user calls fail on purpose (an injected 500, an outage's 503, a
# 429), which the checks would report. So two passes on one emulator: every other operation first, then the
# fault API, whose operations are admin-only and so never faulted themselves.
run_pass() {
	local name=$1
	shift
	# The admin token reaches every operation; schemathesis hides the Authorization header in what it prints.
	# Every check is on (scripts/schemathesis.toml: there, not as --checks all, which would override the
	# file's one per-operation exception). It runs in the report directory because it keeps its state (the
	# failures `st replay` repeats) in .schemathesis/ of its working directory. One worker: with the seed, every
	# run sends the same cases (6,451 at 200 examples).
	(
		cd "$report"
		"$venv/bin/schemathesis" --config-file "$root/scripts/schemathesis.toml" run "$url/openapi.json" \
			--header "Authorization: Bearer $admin_token" \
			--phases examples,coverage,fuzzing,stateful \
			--seed "$seed" \
			--max-examples "$max_examples" \
			--generation-database none \
			--workers 1 \
			--request-timeout 30 \
			--no-color \
			--report junit \
			--report-junit-path "junit-$name.xml" \
			"$@"
	) 2>&1 | tee "$work/$name.out"
	return "${PIPESTATUS[0]}"
}

started=$SECONDS
rc=0
# The emulator must outlive each pass: gone means it crashed (or the run was interrupted).
still_serving() {
	kill -0 "$pid" 2>/dev/null && return 0
	echo "the emulator is no longer running:" >&2
	tail -20 "$work/serve.log" >&2
	exit 1
}
# StreamAudit (the audit log's live tail) answers a stream that stays open up to its max_seconds, an hour at
# most: longer than the request timeout, so it is left out; emulator/tests/it/console.rs tests it.
run_pass resources --exclude-tag faults --exclude-operation-id StreamAudit "$@" || rc=$?
still_serving
run_pass faults --include-tag faults "$@" || rc=$?
still_serving
elapsed=$((SECONDS - started))

if grep -q 'panicked' "$work/serve.log"; then
	echo "the emulator panicked during the run:" >&2
	grep 'panicked' "$work/serve.log" >&2
	rc=1
fi
python3 scripts/schemathesis-report.py "$report" "$elapsed" "$work/resources.out" "$work/faults.out" || rc=1
exit "$rc"
