#!/usr/bin/env bash
# `make down`: stops everything scripts/up.sh started from .run/ (or FAKECLOUD_RUN_DIR) and removes it.
# Only processes recorded there are signalled, each only if its pid still runs the program that was started.
# With --keep-logs (used by up.sh after a failed start) the logs and the control plane's run directory stay.
# Exits non-zero if a process of this run directory is still alive afterwards.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_root=${FAKECLOUD_RUN_DIR:-$repo_root/.run}
cp_dir="$run_root/controlplane"
cargo=${CARGO:-cargo}
keep_logs=0
case "${1:-}" in
"") ;;
--keep-logs) keep_logs=1 ;;
*)
	echo "usage: $0 [--keep-logs]" >&2
	exit 2
	;;
esac

log() { printf '[down] %s\n' "$*" >&2; }

# Stop the process in a pid file if its command line still contains PATTERN: SIGTERM, then SIGKILL after 5 s.
stop_pidfile() {
	local file=$1 pattern=$2 pid
	[[ -f "$file" ]] || return 0
	pid=$(<"$file")
	if [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$pattern"; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "$pattern (pid $pid) ignored SIGTERM for 5 s; killing it"
			kill -9 "$pid" 2>/dev/null || true
		fi
		log "stopped $pattern (pid $pid)"
	fi
	rm -f "$file"
}

if [[ ! -d "$run_root" ]]; then
	log "nothing to stop: $run_root does not exist"
	exit 0
fi

# Kubelets first, so no heartbeat races the control plane's shutdown.
stop_pidfile "$run_root/kubelets.pid" "fakecloud-controlplane kubelets"
stop_pidfile "$run_root/ccm.pid" "fakecloud-ccm"
stop_pidfile "$run_root/emulator.pid" "fakecloud serve"

if [[ -d "$cp_dir" ]]; then
	launcher="$repo_root/target/debug/fakecloud-controlplane"
	if [[ ! -x "$launcher" ]]; then
		log "building the launcher to stop the control plane"
		(cd "$repo_root" && "$cargo" build --locked --quiet -p fakecloud-controlplane --bin fakecloud-controlplane)
	fi
	# 'down' signals only the pids recorded in the run directory whose start times still match, waits for them,
	# and removes the directory unless asked to keep it.
	if ((keep_logs)); then
		"$launcher" down --run-dir "$cp_dir" --keep
	else
		"$launcher" down --run-dir "$cp_dir"
	fi
fi

# Anything of ours still alive? Our programs started for this run directory name it on their command line.
left=()
for proc in /proc/[0-9]*; do
	[[ -r "$proc/cmdline" ]] || continue
	cmd=$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null) || continue
	case "$cmd" in
	*"$run_root"*) ;;
	*) continue ;;
	esac
	exe=$(basename "$(readlink "$proc/exe" 2>/dev/null || true)")
	case "$exe" in
	etcd | kube-apiserver | kube-controller-manager | fakecloud | fakecloud-ccm | fakecloud-controlplane)
		left+=("${proc#/proc/} ($exe)")
		;;
	esac
done
if ((${#left[@]})); then
	log "error: still running for $run_root: ${left[*]}; stop them with kill <pid>"
	exit 1
fi

if ((keep_logs)); then
	rm -f "$run_root"/*.pid
	log "stopped; logs kept in $run_root"
else
	rm -f "$run_root"/controlplane-launcher.log "$run_root"/emulator.log "$run_root"/kubelets.log \
		"$run_root"/ccm.log "$run_root"/ccm-token "$run_root"/cloud-config.yaml \
		"$run_root"/fakecloud.db "$run_root"/fakecloud.db-wal "$run_root"/fakecloud.db-shm \
		"$run_root"/fakecloud.credentials "$run_root"/*.pid
	rmdir "$run_root" 2>/dev/null || log "left $run_root in place: it holds files make up did not create"
	log "stopped"
fi
