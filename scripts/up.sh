#!/usr/bin/env bash
# Brings up the local fakecloud stack in .run/ (override with FAKECLOUD_RUN_DIR):
# builds what is missing, starts the Kubernetes control plane in the background and prints
# how to use and stop it. (The emulator, simulated kubelets and CCM join here as they land.)
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_root=${FAKECLOUD_RUN_DIR:-$repo_root/.run}
cp_dir="$run_root/controlplane"
launcher_log="$run_root/controlplane-launcher.log"
cargo=${CARGO:-cargo}

log() { printf '[up] %s\n' "$*" >&2; }
die() { printf '[up] error: %s\n' "$*" >&2; exit 1; }

pid_file="$cp_dir/fakecloud-controlplane.pid"
if [[ -f "$pid_file" ]] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
	die "a control plane is already running from $cp_dir (pid $(cat "$pid_file")); run 'make down' (or scripts/down.sh) first"
fi

log "checking the Kubernetes binaries"
bin_dir=$(bash "$repo_root/scripts/build-control-plane.sh" | tail -n 1)

log "building the launcher"
(cd "$repo_root" && "$cargo" build --locked --quiet -p fakecloud-controlplane --bin fakecloud-controlplane)
launcher="$repo_root/target/debug/fakecloud-controlplane"

mkdir -p "$run_root"
log "starting the control plane in $cp_dir (launcher log: $launcher_log)"
# setsid: the launcher outlives this script and a Ctrl-C in this terminal; 'make down' stops it.
setsid "$launcher" up --run-dir "$cp_dir" --bin-dir "$bin_dir" >"$launcher_log" 2>&1 </dev/null &
launcher_pid=$!

# The launcher prints the export line once /readyz passes and the controller manager leads.
for _ in $(seq 1 600); do
	if grep -q '^export KUBECONFIG=' "$launcher_log" 2>/dev/null; then
		break
	fi
	if ! kill -0 "$launcher_pid" 2>/dev/null; then
		tail -n 40 "$launcher_log" >&2 || true
		die "the control plane failed to start (full log: $launcher_log)"
	fi
	sleep 0.2
done
grep -q '^export KUBECONFIG=' "$launcher_log" || die "the control plane was not ready after 120 s (log: $launcher_log); run 'make down' to clean up"

kubeconfig_line=$(grep -m1 '^export KUBECONFIG=' "$launcher_log")
cat <<MSG

fakecloud control plane is up (Kubernetes $(basename "$(dirname "$bin_dir")")).

  $kubeconfig_line

Logs: $cp_dir/logs   Stop: make down (or scripts/down.sh)
MSG
