#!/usr/bin/env bash
# `make up`: a local fakecloud stack in .run/ (or FAKECLOUD_RUN_DIR). Builds what is missing, then starts in
# the background the Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager on 127.0.0.1),
# the emulator (state in .run/fakecloud.db, port FAKECLOUD_PORT or 8787), fakecloud-ccm (HTTPS /healthz and
# /metrics on FAKECLOUD_CCM_PORT or 10258) and the simulated kubelets; creates instances node-a, node-b, node-c
# over three zones; waits until their Nodes are Ready and initialized by the CCM; and says how to use and stop
# it all (`make down`). If any step fails, what was started is stopped again and the logs are kept.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_root=${FAKECLOUD_RUN_DIR:-$repo_root/.run}
cp_dir="$run_root/controlplane"
port=${FAKECLOUD_PORT:-8787}
ccm_port=${FAKECLOUD_CCM_PORT:-10258}
cargo=${CARGO:-cargo}
nodes=(node-a node-b node-c)
t0=$SECONDS

log() { printf '[up %3ss] %s\n' "$((SECONDS - t0))" "$*" >&2; }
die() {
	printf '[up] error: %s\n' "$*" >&2
	exit 1
}

# The pid in FILE, if that process is alive and its command line contains PATTERN (a reused pid is not ours).
live_pid() {
	local file=$1 pattern=$2 pid
	[[ -f "$file" ]] || return 1
	pid=$(<"$file")
	[[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$pattern" || return 1
	printf '%s' "$pid"
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Wait until COMMAND succeeds, up to SECONDS, saying every 10 s what is awaited. PID: give up if it dies.
wait_for() {
	local what=$1 seconds=$2 pid=$3 waited=0
	shift 3
	until "$@"; do
		if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
			return 2
		fi
		((waited < seconds * 5)) || return 1
		((waited % 50 == 49)) && log "still waiting for $what ($(((waited + 1) / 5)) s)"
		sleep 0.2
		waited=$((waited + 1))
	done
}

# --- refuse, or clean up after an earlier run --------------------------------------------------------------
running=()
if pid=$(live_pid "$cp_dir/fakecloud-controlplane.pid" "fakecloud-controlplane up"); then running+=("the control plane (pid $pid)"); fi
if pid=$(live_pid "$run_root/emulator.pid" "fakecloud serve"); then running+=("the emulator (pid $pid)"); fi
if pid=$(live_pid "$run_root/kubelets.pid" "fakecloud-controlplane kubelets"); then running+=("the simulated kubelets (pid $pid)"); fi
if pid=$(live_pid "$run_root/ccm.pid" "fakecloud-ccm"); then running+=("the CCM (pid $pid)"); fi
if ((${#running[@]})); then
	die "fakecloud is already up from $run_root: ${running[*]}.
  Use it as the last 'make up' said (KUBECONFIG=$cp_dir/kubeconfigs/admin.kubeconfig), or stop it with 'make down' first."
fi
if [[ -e "$run_root" ]]; then
	log "removing $run_root, left by an earlier run that is no longer running"
	bash "$repo_root/scripts/down.sh" >/dev/null 2>&1 || die "could not clean up $run_root; run 'make down' and look at what it says"
fi
if port_taken "$port"; then
	die "port $port on 127.0.0.1 is taken (another emulator?); stop what uses it, or pick another port: FAKECLOUD_PORT=8788 make up"
fi
if port_taken "$ccm_port"; then
	die "port $ccm_port on 127.0.0.1 is taken (another CCM?); stop what uses it, or pick another port: FAKECLOUD_CCM_PORT=10259 make up"
fi

# --- build what is missing ----------------------------------------------------------------------------------
log "checking the Kubernetes binaries (built once per version; a first build takes about 8 minutes)"
bin_dir=$(bash "$repo_root/scripts/build-control-plane.sh" | tail -n 1)
kubectl="$bin_dir/kubectl"
log "building fakecloud, fakecloud-ccm and fakecloud-controlplane (cargo build --locked; a first build takes a few minutes)"
(cd "$repo_root" && "$cargo" build --locked --bin fakecloud --bin fakecloud-ccm --bin fakecloud-controlplane)
launcher="$repo_root/target/debug/fakecloud-controlplane"
fakecloud="$repo_root/target/debug/fakecloud"
ccm="$repo_root/target/debug/fakecloud-ccm"
# The build may have taken minutes: check the port again before starting anything.
if port_taken "$port"; then
	die "port $port on 127.0.0.1 was taken during the build; pick another one: FAKECLOUD_PORT=8788 make up"
fi

# --- from here on, a failure (or Ctrl-C) stops whatever was started ------------------------------------------
mkdir -p "$run_root"
up_ok=0
launcher_pid=""
on_exit() {
	if ((up_ok == 0)); then
		printf '[up] did not finish; stopping what was started (logs kept in %s)\n' "$run_root" >&2
		# A launcher still starting has written no pid file yet; on SIGTERM it stops what it started itself.
		if [[ -n "$launcher_pid" ]] && kill -0 "$launcher_pid" 2>/dev/null; then
			kill "$launcher_pid" 2>/dev/null || true
			for _ in $(seq 1 100); do
				kill -0 "$launcher_pid" 2>/dev/null || break
				sleep 0.1
			done
		fi
		bash "$repo_root/scripts/down.sh" --keep-logs >&2 || true
	fi
}
trap on_exit EXIT

launcher_log="$run_root/controlplane-launcher.log"
log "starting the control plane in $cp_dir"
# setsid: the processes outlive this script and a Ctrl-C in its terminal; 'make down' stops them.
setsid "$launcher" up --run-dir "$cp_dir" --bin-dir "$bin_dir" >"$launcher_log" 2>&1 </dev/null &
launcher_pid=$!
# The launcher prints the export line once /readyz passes and the controller manager leads.
rc=0
wait_for "the control plane" 120 "$launcher_pid" grep -q '^export KUBECONFIG=' "$launcher_log" || rc=$?
if ((rc != 0)); then
	tail -n 30 "$launcher_log" >&2 || true
	((rc == 2)) && die "the control plane failed to start (launcher log: $launcher_log; component logs: $cp_dir/logs)"
	die "the control plane was not ready after 120 s (launcher log: $launcher_log)"
fi
kubeconfig_line=$(grep -m1 '^export KUBECONFIG=' "$launcher_log")
kubeconfig=${kubeconfig_line#export KUBECONFIG=}
log "control plane ready"

endpoint="http://127.0.0.1:$port"
credentials="$run_root/fakecloud.credentials"
# Start NAME (its log and pid file are .run/NAME.{log,pid}) in the background, outliving this script (setsid),
# and wait up to SECONDS for its log to say READY; on failure show the log's tail and stop.
start_service() {
	local name=$1 what=$2 seconds=$3 ready=$4 pid rc=0
	shift 4
	setsid "$@" >"$run_root/$name.log" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$run_root/$name.pid"
	wait_for "$what" "$seconds" "$pid" grep -q "$ready" "$run_root/$name.log" || rc=$?
	if ((rc != 0)); then
		tail -n 20 "$run_root/$name.log" >&2 || true
		die "$what did not start (log: $run_root/$name.log)"
	fi
}

log "starting the emulator at $endpoint (state: $run_root/fakecloud.db)"
start_service emulator "the emulator" 30 'fakecloud: serving' \
	"$fakecloud" serve --listen "127.0.0.1:$port" --db "$run_root/fakecloud.db"

# The CCM as a customer of the cloud: the user token, in a file only it reads.
# shellcheck source=/dev/null
user_token=$(source "$credentials" && printf '%s' "$FAKECLOUD_USER_TOKEN")
(umask 077 && printf '%s\n' "$user_token" >"$run_root/ccm-token")
printf 'endpoint: %s\ntoken-file: %s\n' "$endpoint" "$run_root/ccm-token" >"$run_root/cloud-config.yaml"
log "starting fakecloud-ccm (HTTPS /healthz and /metrics on 127.0.0.1:$ccm_port)"
start_service ccm "the CCM" 60 'starting controllers' \
	"$ccm" --cloud-provider=fakecloud --cloud-config "$run_root/cloud-config.yaml" --kubeconfig "$kubeconfig" \
	--cluster-cidr 10.244.0.0/16 --bind-address 127.0.0.1 --secure-port "$ccm_port"

log "starting the simulated kubelets"
setsid "$launcher" kubelets --kubeconfig "$kubeconfig" --emulator "$endpoint" --credentials "$credentials" \
	>"$run_root/kubelets.log" 2>&1 </dev/null &
echo $! >"$run_root/kubelets.pid"

export FAKECLOUD_ENDPOINT=$endpoint FAKECLOUD_CREDENTIALS=$credentials
# The region's zones, from the ZONE table of `fakecloud instance types`.
mapfile -t zones < <("$fakecloud" instance types | awk '$1 == "ZONE" { z = 1; next } z && NF == 0 { exit } z { print $1 }')
((${#zones[@]} > 0)) || die "could not read the emulator's zones from 'fakecloud instance types'"
for i in "${!nodes[@]}"; do
	zone=${zones[i % ${#zones[@]}]}
	log "creating instance ${nodes[i]} in $zone"
	# The key makes a rerun of this step return the same instance instead of failing on the name.
	"$fakecloud" instance create "${nodes[i]}" --zone "$zone" --idempotency-key "make-up-${nodes[i]}" >/dev/null
done

log "waiting for the ${#nodes[@]} Nodes to register, turn Ready and be initialized by the CCM"
ready_nodes() {
	local n
	# Ready, and without the uninitialized taint (the CCM has set providerID, labels and addresses).
	n=$("$kubectl" --kubeconfig "$kubeconfig" get nodes --no-headers \
		-o custom-columns='R:.status.conditions[?(@.type=="Ready")].status,T:.spec.taints[*].key' 2>/dev/null |
		awk '$1 == "True" && $0 !~ /uninitialized/' | wc -l)
	((n >= ${#nodes[@]}))
}
rc=0
wait_for "the Nodes" 60 "" ready_nodes || rc=$?
if ((rc != 0)); then
	"$kubectl" --kubeconfig "$kubeconfig" get nodes >&2 || true
	tail -n 20 "$run_root/kubelets.log" >&2 || true
	tail -n 20 "$run_root/ccm.log" >&2 || true
	die "the Nodes were not Ready and initialized within 60 s (logs: $run_root/kubelets.log, $run_root/ccm.log)"
fi
up_ok=1
log "up: ${#nodes[@]} Nodes Ready and initialized"

"$kubectl" --kubeconfig "$kubeconfig" get nodes -o wide >&2
kubectl_hint="kubectl get nodes"
if ! command -v kubectl >/dev/null 2>&1 || [[ "$(command -v kubectl)" != "$kubectl" ]]; then
	kubectl_hint="$kubectl get nodes    # kubectl $(basename "$(dirname "$bin_dir")"), built with the control plane"
fi
cat <<MSG

fakecloud is up: Kubernetes $(basename "$(dirname "$bin_dir")") on loopback, the emulator, fakecloud-ccm and ${#nodes[@]} simulated nodes.

  $kubeconfig_line
  $kubectl_hint
  kubectl create service loadbalancer web --tcp=80:8080 && kubectl get svc web -w    # EXTERNAL-IP from the CCM
  curl -sk https://127.0.0.1:$ccm_port/healthz?verbose                              # the CCM's health checks

  export FAKECLOUD_ENDPOINT=$endpoint
  source $credentials    # the emulator's tokens (FAKECLOUD_USER_TOKEN, FAKECLOUD_ADMIN_TOKEN)
  $fakecloud instance list

  Console: $endpoint/console    # sign in with a token from $credentials

Logs: $run_root/{emulator,ccm,kubelets,controlplane-launcher}.log and $cp_dir/logs/
Stop everything: make down
MSG
