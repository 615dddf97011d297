#!/usr/bin/env bash
# Stops everything scripts/up.sh started from .run/ (or FAKECLOUD_RUN_DIR) and removes it.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_root=${FAKECLOUD_RUN_DIR:-$repo_root/.run}
cp_dir="$run_root/controlplane"
cargo=${CARGO:-cargo}

log() { printf '[down] %s\n' "$*" >&2; }

if [[ ! -d "$cp_dir" ]]; then
	log "nothing to stop in $run_root"
	exit 0
fi
launcher="$repo_root/target/debug/fakecloud-controlplane"
if [[ ! -x "$launcher" ]]; then
	(cd "$repo_root" && "$cargo" build --locked --quiet -p fakecloud-controlplane --bin fakecloud-controlplane)
fi
# 'down' signals only the PIDs recorded in the run dir whose start time still matches.
"$launcher" down --run-dir "$cp_dir"
rm -f "$run_root/controlplane-launcher.log"
rmdir "$run_root" 2>/dev/null || true
log "stopped"
