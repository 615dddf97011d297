#!/usr/bin/env bash
# Brings up the local fakecloud stack in .run/ (override with FAKECLOUD_RUN_DIR): builds what is missing,
# starts the Kubernetes control plane, the emulator (state in .run/fakecloud.db) and the simulated kubelets in
# the background, creates three instances over three zones, waits for their Nodes, and prints how to use and
# stop it all. (The CCM joins here when it lands.)
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

port=${FAKECLOUD_PORT:-8787}
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
	die "port $port is taken (another fakecloud?); stop it, or choose another port with FAKECLOUD_PORT=..."
fi

log "building fakecloud and the launcher (cargo build --locked)"
(cd "$repo_root" && "$cargo" build --locked --quiet --bin fakecloud --bin fakecloud-controlplane)
launcher="$repo_root/target/debug/fakecloud-controlplane"
fakecloud="$repo_root/target/debug/fakecloud"

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
kubeconfig=${kubeconfig_line#export KUBECONFIG=}

log "starting the emulator on 127.0.0.1:$port (state: $run_root/fakecloud.db, log: $run_root/emulator.log)"
setsid "$fakecloud" serve --listen "127.0.0.1:$port" --db "$run_root/fakecloud.db" >"$run_root/emulator.log" 2>&1 </dev/null &
echo $! >"$run_root/emulator.pid"
for _ in $(seq 1 100); do
	grep -q 'fakecloud: serving' "$run_root/emulator.log" 2>/dev/null && break
	kill -0 "$(cat "$run_root/emulator.pid")" 2>/dev/null || { tail -n 20 "$run_root/emulator.log" >&2; die "the emulator failed to start; run 'make down' to clean up"; }
	sleep 0.1
done
endpoint="http://127.0.0.1:$port"
credentials="$run_root/fakecloud.credentials"

log "starting the simulated kubelets (log: $run_root/kubelets.log)"
setsid "$launcher" kubelets --kubeconfig "$kubeconfig" --emulator "$endpoint" --credentials "$credentials" \
	>"$run_root/kubelets.log" 2>&1 </dev/null &
echo $! >"$run_root/kubelets.pid"

log "creating instances node-a, node-b, node-c in local-1a, local-1b, local-1c"
for z in a b c; do
	FAKECLOUD_ENDPOINT=$endpoint FAKECLOUD_CREDENTIALS=$credentials \
		"$fakecloud" instance create "node-$z" --zone "local-1$z" --idempotency-key "make-up-node-$z" >/dev/null
done

log "waiting for the 3 Nodes to register"
for _ in $(seq 1 150); do
	n=$(KUBECONFIG=$kubeconfig kubectl get nodes --no-headers 2>/dev/null | grep -c ' Ready ' || true)
	[[ "$n" -ge 3 ]] && break
	sleep 0.2
done
[[ "${n:-0}" -ge 3 ]] || die "the nodes did not become Ready (see $run_root/kubelets.log); run 'make down' to clean up"

cat <<MSG

fakecloud is up: Kubernetes $(basename "$(dirname "$bin_dir")") on loopback, the emulator, and 3 simulated nodes.

  $kubeconfig_line
  kubectl get nodes            # 3 nodes, tainted node.cloudprovider.kubernetes.io/uninitialized until a CCM runs

  export FAKECLOUD_ENDPOINT=$endpoint
  source $credentials    # the emulator's user and admin tokens
  fakecloud instance list

Logs: $run_root/{emulator,kubelets}.log, $cp_dir/logs   Stop: make down
MSG
