#!/usr/bin/env bash
# A container engine for the kind path.
#
#   engine.sh start    use the Docker engine that answers (DOCKER_HOST or the default socket) unchanged; where
#                      none does, build (once, cached by version) and start a private one, guarded
#   engine.sh stop     stop the private engine by its PID and put back what it changed (never touches a
#                      user's own engine)
#   engine.sh status   say which engine is used, and with the private one, show its egress guard
#   engine.sh env      print `export DOCKER_HOST=...` for the private engine (nothing for a user's own engine)
#   engine.sh guard    exit 0 only if the private engine runs with its egress guard in place
#
# Why Docker 29 (moby v2 from the Go module proxy) with runc 1.5 and Debian's containerd, and not Debian's
# docker.io 20.10: this machine's capability bounding set lacks CAP_SYS_RESOURCE, so runc 1.1 cannot start a
# privileged container (kind's nodes are privileged) without a wrapper that edits every OCI spec; Docker 29 grants
# only the capabilities it has itself, and its API is the one testcontainers (bollard) asks for.
#
# The private engine has its own socket, exec-root and pid file under $engine_run_dir and its own data-root
# (images are kept between runs), so it never meets a user's engine. Its egress guard: before dockerd starts, a
# DOCKER-USER chain that drops everything forwarded out of the host's external interface(s) (dockerd keeps an
# existing DOCKER-USER chain and jumps to it first), and a daemon `dns` on a loopback address where nothing
# listens, so containers reach each other, the host and ports published on loopback, and nothing else. A port
# published without an address binds every interface, as on a user's Docker: testcontainers run from inside a
# container (a /.dockerenv, as on CI here) reaches it through the bridge's gateway, not loopback. The
# iptables rules and the sysctls dockerd changes are saved before it starts and put back after it stops; the
# bridges it made are deleted.
set -euo pipefail
kind_script=engine
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

moby_version=v2.0.0-beta.24 # Docker Engine 29 (the 29.x line is tagged v2.0.0-beta.N in the Go module)
runc_version=v1.5.2
engine_bin_dir="$engine_root/moby-$moby_version-runc-$runc_version/bin"
data_root="$engine_root/data"
pid_file="$engine_run_dir/dockerd.pid"
daemon_json="$engine_run_dir/daemon.json"
saved_dir="$engine_run_dir/saved" # the host's state before the engine started, put back by stop
engine_log="$engine_run_dir/dockerd.log"
# Nothing listens here: a lookup of an outside name fails on this machine instead of leaving it.
no_dns=127.0.0.254
guard_comment="fakecloud egress guard"
sysctls=(net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding)

# The engine a user already has: DOCKER_HOST, or the default socket. Ours is not theirs.
# FAKECLOUD_PRIVATE_ENGINE=1 uses the private engine even where a user's answers (its tests do).
users_engine() {
	[[ "${DOCKER_HOST:-}" == "unix://$engine_socket" || "${FAKECLOUD_PRIVATE_ENGINE:-}" == 1 ]] && return 1
	command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1
}

# The pid of our dockerd, if it runs (a reused pid is not ours: its command line must name our config).
engine_pid() {
	local pid
	[[ -f "$pid_file" ]] || return 1
	pid=$(<"$pid_file")
	[[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$daemon_json" || return 1
	printf '%s' "$pid"
}

# Interfaces that lead off this machine: those of the default routes (IPv4 and IPv6).
external_interfaces() {
	{
		ip -4 route show default 2>/dev/null
		ip -6 route show default 2>/dev/null
	} | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1) }' | sort -u
}

# What the engine needs from Debian at run time (containerd, iptables, nft) and to build runc (libseccomp).
ensure_packages() {
	local need=()
	command -v containerd >/dev/null 2>&1 || need+=(containerd)
	command -v iptables >/dev/null 2>&1 || need+=(iptables)
	command -v nft >/dev/null 2>&1 || need+=(nftables)
	command -v ip >/dev/null 2>&1 || need+=(iproute2)
	dpkg -s libseccomp-dev >/dev/null 2>&1 || need+=(libseccomp-dev)
	command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
	((${#need[@]})) || return 0
	command -v apt-get >/dev/null 2>&1 || die "the private engine needs ${need[*]}; install them and run this again"
	log "installing Debian packages: ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

build_engine() {
	[[ -x "$engine_bin_dir/dockerd" && -x "$engine_bin_dir/docker-proxy" && -x "$engine_bin_dir/runc" ]] && return 0
	command -v go >/dev/null 2>&1 || die "no Docker engine answers here and there is no Go toolchain to build one with; install Go (or start Docker) and run this again"
	mkdir -p "$engine_bin_dir"
	local tmp
	tmp=$(mktemp -d "$engine_root/.build.XXXXXX")
	# shellcheck disable=SC2064 # expand now: the trap must remove this very directory
	trap "rm -rf '$tmp'" EXIT
	step "building dockerd and docker-proxy $moby_version (Docker 29; ~2-4 min on 2 cores)" \
		env CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath \
		-ldflags "-s -w -X github.com/moby/moby/v2/dockerversion.Version=$moby_version" \
		-tags "exclude_graphdriver_btrfs exclude_disk_quota" \
		"github.com/moby/moby/v2/cmd/dockerd@$moby_version" "github.com/moby/moby/v2/cmd/docker-proxy@$moby_version"
	step "building runc $runc_version with seccomp" \
		env CGO_ENABLED=1 GOBIN="$tmp" go install -trimpath -tags seccomp "github.com/opencontainers/runc@$runc_version"
	mv -f "$tmp"/dockerd "$tmp"/docker-proxy "$tmp"/runc "$engine_bin_dir/"
	rm -rf "$tmp"
	trap - EXIT
	log "engine binaries in $engine_bin_dir"
}

# Before dockerd starts: remember the rules and sysctls it will change, then put the guard in place, so no
# container (not even one dockerd restarts by its restart policy) runs a moment without it.
save_host_state() {
	mkdir -p "$saved_dir"
	[[ -f "$saved_dir/nft" || -f "$saved_dir/iptables" ]] && return 0 # an engine that died without stop: keep the first snapshot
	# iptables on nftables (Debian's default): the whole ruleset, so tables dockerd creates go again too.
	if iptables -V | grep -q nf_tables; then
		nft list ruleset >"$saved_dir/nft.tmp" && mv "$saved_dir/nft.tmp" "$saved_dir/nft"
	else
		ip6tables-save >"$saved_dir/ip6tables" 2>/dev/null || true
		iptables-save >"$saved_dir/iptables.tmp" && mv "$saved_dir/iptables.tmp" "$saved_dir/iptables"
	fi
	ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' >"$saved_dir/links"
	local s
	for s in "${sysctls[@]}"; do printf '%s=%s\n' "$s" "$(sysctl -n "$s" 2>/dev/null)"; done >"$saved_dir/sysctls"
}

install_guard() {
	local ifaces tool iface
	ifaces=$(external_interfaces)
	[[ -n "$ifaces" ]] || log "this machine has no default route: nothing leads off it, the guard has nothing to drop"
	for tool in iptables ip6tables; do
		command -v "$tool" >/dev/null 2>&1 || continue
		$tool -N DOCKER-USER 2>/dev/null || true
		$tool -C FORWARD -j DOCKER-USER 2>/dev/null || $tool -I FORWARD 1 -j DOCKER-USER
		for iface in $ifaces; do
			$tool -C DOCKER-USER -o "$iface" -m comment --comment "$guard_comment" -j DROP 2>/dev/null ||
				$tool -I DOCKER-USER 1 -o "$iface" -m comment --comment "$guard_comment" -j DROP
		done
	done
}

guard_in_place() {
	local iface
	for iface in $(external_interfaces); do
		iptables -C DOCKER-USER -o "$iface" -m comment --comment "$guard_comment" -j DROP 2>/dev/null || return 1
		# FORWARD must reach DOCKER-USER before dockerd's own ACCEPT rules.
		[[ "$(iptables -S FORWARD | sed -n 2p)" == "-A FORWARD -j DOCKER-USER" ]] || return 1
	done
}

# After dockerd stopped: the rules, sysctls and bridges as they were before it started.
restore_host_state() {
	[[ -d "$saved_dir" ]] || return 0
	if [[ -f "$saved_dir/nft" ]]; then
		nft flush ruleset && nft -f "$saved_dir/nft"
	elif [[ -f "$saved_dir/iptables" ]]; then
		iptables-restore <"$saved_dir/iptables"
		[[ -f "$saved_dir/ip6tables" ]] && ip6tables-restore <"$saved_dir/ip6tables"
	fi
	local link
	while read -r link; do
		[[ -n "$link" ]] || continue
		grep -qxF -- "$link" "$saved_dir/links" 2>/dev/null && continue
		# Only what dockerd makes: its default bridge, a bridge per network, and leftover veths.
		if [[ "$link" == docker0 || "$link" == br-* || "$link" == veth* ]]; then
			ip link delete "$link" 2>/dev/null || true
		fi
	done < <(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }')
	if [[ -f "$saved_dir/sysctls" ]]; then
		local line
		while IFS= read -r line; do
			if [[ "$line" == *=?* ]]; then sysctl -qw "$line" >/dev/null 2>&1 || true; fi
		done <"$saved_dir/sysctls"
	fi
	rm -rf "$saved_dir"
}

start() {
	if users_engine; then
		log "using the Docker engine that answers ($(docker context show 2>/dev/null || echo default)); nothing to start"
		return 0
	fi
	if pid=$(engine_pid); then
		guard_in_place || die "the private engine (pid $pid) runs without its egress guard; stop it: bash scripts/kind/engine.sh stop"
		log "the private engine already runs (pid $pid, $engine_socket)"
		return 0
	fi
	[[ "$(id -u)" -eq 0 ]] || die "starting a private Docker engine needs root (it manages iptables and bridges); run as root, or start your own Docker"
	ensure_packages
	build_engine
	# An engine that died without `stop`: put the host back first, then start clean.
	restore_host_state
	mkdir -p "$engine_run_dir" "$data_root"
	rm -f "$engine_socket" "$pid_file"
	cat >"$daemon_json" <<-JSON
		{
		  "hosts": ["unix://$engine_socket"],
		  "data-root": "$data_root",
		  "exec-root": "$engine_run_dir/exec",
		  "pidfile": "$pid_file",
		  "storage-driver": "overlay2",
		  "exec-opts": ["native.cgroupdriver=cgroupfs"],
		  "dns": ["$no_dns"],
		  "default-runtime": "runc",
		  "userland-proxy-path": "$engine_bin_dir/docker-proxy",
		  "features": {"containerd-snapshotter": false}
		}
	JSON
	save_host_state
	install_guard
	log "starting the private engine (dockerd from $engine_bin_dir, log $engine_log)"
	# Our runc and docker-proxy first on its PATH; Debian's containerd is the one it manages.
	PATH="$engine_bin_dir:$PATH" setsid nohup "$engine_bin_dir/dockerd" --config-file "$daemon_json" \
		>"$engine_log" 2>&1 </dev/null &
	local launched=$! waited=0
	until DOCKER_HOST="unix://$engine_socket" timeout 5 docker version >/dev/null 2>&1; do
		if ! kill -0 "$launched" 2>/dev/null; then
			restore_host_state
			die "dockerd exited at start; its last lines:
$(tail -n 15 "$engine_log")"
		fi
		((waited++ < 120)) || {
			kill "$launched" 2>/dev/null || true
			restore_host_state
			die "dockerd did not answer on $engine_socket within 60 s (log: $engine_log)"
		}
		sleep 0.5
	done
	guard_in_place || {
		stop
		die "the egress guard is not in place after dockerd started (iptables -S DOCKER-USER); stopped the engine"
	}
	log "private engine up: DOCKER_HOST=unix://$engine_socket (egress guard on $(external_interfaces | tr '\n' ' '))"
}

stop() {
	local pid
	if ! engine_pid >/dev/null && [[ ! -d "$saved_dir" && ! -S "$engine_socket" ]]; then
		log "no private engine runs"
		return 0
	fi
	if pid=$(engine_pid); then
		log "stopping the private engine (pid $pid)"
		kill -TERM "$pid"
		local waited=0
		while kill -0 "$pid" 2>/dev/null; do
			((waited++ < 60)) || {
				log "dockerd did not stop within 30 s: killing it"
				kill -KILL "$pid" 2>/dev/null || true
			}
			sleep 0.5
		done
	fi
	# The containerd it managed and the shims of its containers must go with it.
	local leftover
	leftover=$(pgrep -f -- "$engine_run_dir/exec" || true)
	if [[ -n "$leftover" ]]; then
		# shellcheck disable=SC2086 # one pid per word
		kill -TERM $leftover 2>/dev/null || true
		sleep 2
		# shellcheck disable=SC2086
		kill -KILL $leftover 2>/dev/null || true
	fi
	# Mounts of its containers (overlay layers, shm, netns files) under the data-root and exec-root.
	local mnt
	while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done < <(
		awk -v d="$data_root" -v e="$engine_run_dir" 'index($2, d) == 1 || index($2, e) == 1 { print $2 }' /proc/mounts | sort -r
	)
	restore_host_state
	rm -f "$engine_socket" "$pid_file"
	log "private engine stopped; iptables, sysctls and bridges are as they were before it started"
}

status() {
	if users_engine; then
		echo "engine: the user's own ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
	elif pid=$(engine_pid); then
		echo "engine: private, pid $pid, DOCKER_HOST=unix://$engine_socket"
		if guard_in_place; then echo "egress guard: in place"; else echo "egress guard: MISSING"; fi
		iptables -S DOCKER-USER
	else
		echo "engine: none runs"
	fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
env)
	if ! users_engine && engine_pid >/dev/null; then printf 'export DOCKER_HOST=unix://%s\n' "$engine_socket"; fi
	;;
guard) engine_pid >/dev/null && guard_in_place ;;
*)
	sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
