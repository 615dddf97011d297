#!/usr/bin/env bash
# Stops everything scripts/up.sh started from .run/ (or FAKECLOUD_RUN_DIR) and removes it.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_root=${FAKECLOUD_RUN_DIR:-$repo_root/.run}
cp_dir="$run_root/controlplane"
cargo=${CARGO:-cargo}

log() { printf '[down] %s\n' "$*" >&2; }

# Stop a process from its pid file, only if that PID is still the program we started.
stop_pidfile() {
	local file=$1 name=$2 pid
	[[ -f "$file" ]] || return 0
	pid=$(cat "$file")
	if [[ -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$name"; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		log "stopped $name (pid $pid)"
	fi
	rm -f "$file"
}
stop_pidfile "$run_root/kubelets.pid" "fakecloud-controlplane kubelets"
stop_pidfile "$run_root/emulator.pid" "fakecloud serve"

if [[ ! -d "$cp_dir" ]]; then
	log "nothing else to stop in $run_root"
	exit 0
fi
launcher="$repo_root/target/debug/fakecloud-controlplane"
if [[ ! -x "$launcher" ]]; then
	(cd "$repo_root" && "$cargo" build --locked --quiet -p fakecloud-controlplane --bin fakecloud-controlplane)
fi
# 'down' signals only the PIDs recorded in the run dir whose start time still matches.
"$launcher" down --run-dir "$cp_dir"
rm -f "$run_root"/controlplane-launcher.log "$run_root"/emulator.log "$run_root"/kubelets.log \
	"$run_root"/fakecloud.db* "$run_root"/fakecloud.credentials
rmdir "$run_root" 2>/dev/null || true
log "stopped"
