# shellcheck shell=bash
# Sourced by the scripts that test a throwaway emulator (schemathesis.sh, test-aws-face.sh).
# serve_throwaway WORK FAKECLOUD [SERVE FLAGS...]: `FAKECLOUD serve` on a free loopback port and WORK/fc.db, its
# log in WORK/serve.log, stopped and WORK removed when the script exits; sets `pid` and `url`, or exits 1 with
# the log if it does not start within 20 s. Tokens come from the environment, or are generated.
serve_throwaway() {
	local dir=$1 fakecloud=$2
	shift 2
	# Made before the emulator starts, so reading it cannot race the background job's redirection.
	: >"$dir/serve.log"
	RUST_LOG=warn "$fakecloud" serve --listen 127.0.0.1:0 --db "$dir/fc.db" "$@" 2>>"$dir/serve.log" &
	pid=$!
	# Stop the emulator whatever happens; a signal exits through the EXIT trap too.
	trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "'"$dir"'"' EXIT
	trap 'exit 130' INT TERM HUP
	url=
	for _ in $(seq 200); do
		url=$(sed -n 's/^fakecloud: serving \([^ ;]*\).*/\1/p' "$dir/serve.log" | head -1)
		[[ -n $url ]] && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "the emulator did not start:" >&2
	cat "$dir/serve.log" >&2
	exit 1
}
