#!/usr/bin/env bash
# Tests of the private engine (`fakecloud-kind engine`, kind/src/engine/) as the host sees it: while it runs,
# the egress guard is in place before any container and drops a container's packet toward the outside
# (counted by the rule, refused to the container), and lookups of outside names fail locally; after `stop`,
# no process, rule, bridge or sysctl change of the engine is left. Run as root on a machine where no other
# Docker engine is in use by this test.
# Ends with "N passed, N failed".
set -uo pipefail
kind_script=test-engine
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export FAKECLOUD_PRIVATE_ENGINE=1 # test ours even where a user's engine answers

passed=0 failed=0
check() {
	local what=$1
	shift
	if "$@" >/dev/null 2>&1; then
		passed=$((passed + 1))
		log "ok: $what"
	else
		failed=$((failed + 1))
		log "FAILED: $what"
	fi
}

ruleset() { nft list ruleset 2>/dev/null; }
bridges() { ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E '^(docker0|br-|veth)' || true; }
sysctls() { sysctl -n net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding; }
iface=$(ip -4 route show default | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
gateway=$(ip -4 route show default | awk '{ print $3; exit }')

# These tests stop the engine: never under a running cluster.
if "$kind_tool" engine guard; then
	running=$(DOCKER_HOST="unix://$engine_socket" docker ps -q | wc -l)
	((running == 0)) || die "the private engine runs $running containers (a kind cluster?); these tests stop it: 'make kind-down' first"
fi
"$kind_tool" engine stop >/dev/null 2>&1
before_rules=$(ruleset) before_bridges=$(bridges) before_sysctls=$(sysctls)

"$kind_tool" engine start || {
	log "FAILED: the engine did not start"
	echo "0 passed, 1 failed"
	exit 1
}
kind_env
check "engine guard: the DROP rule is in DOCKER-USER and FORWARD reaches it first" "$kind_tool" engine guard
if [[ -n "$iface" ]]; then
	check "DOCKER-USER drops what leaves through $iface" iptables -C DOCKER-USER -o "$iface" -m comment --comment "fakecloud egress guard" -j DROP
fi

# A container's packet toward the outside (the default gateway, the first hop out) is dropped on this host.
"$kind_tool" base-image
counter() { iptables -L DOCKER-USER -v -x -n | awk -v i="$iface" '$3 == "DROP" && $7 == i { print $1; exit }'; }
drops_before=$(counter)
refused() { ! docker run --rm debian:bookworm-slim timeout 5 bash -c "echo > /dev/tcp/$gateway/80"; }
check "a container cannot open a connection to $gateway (outside)" refused
drops_after=$(counter)
check "the guard's DROP rule counted that container's packets ($drops_before -> $drops_after)" test "${drops_after:-0}" -gt "${drops_before:-0}"
no_lookup() { ! docker run --rm debian:bookworm-slim timeout 10 getent hosts example.org; }
check "a container cannot resolve an outside name" no_lookup
# Port 1 answers "refused" from the other container: the packet got there.
reach_each_other() {
	local ip
	# (no pipe into grep: the client's own exit status 1 would fail the pipeline)
	docker network create fakecloud-engine-test &&
		docker run -d --name fakecloud-engine-test-server --network fakecloud-engine-test debian:bookworm-slim sleep 30 &&
		ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' fakecloud-engine-test-server) &&
		[[ "$(docker run --rm --network fakecloud-engine-test debian:bookworm-slim timeout 5 bash -c "echo > /dev/tcp/$ip/1" 2>&1)" == *refused* ]]
}
check "containers reach each other on a user network" reach_each_other
docker rm -f fakecloud-engine-test-server >/dev/null 2>&1
docker network rm fakecloud-engine-test >/dev/null 2>&1

"$kind_tool" engine stop
no_engine_process() { ! pgrep -f -- "$engine_run_dir" && ! pgrep -f -- "$engine_root/moby-"; }
check "no process of the engine is left" no_engine_process
check "the nftables ruleset is as before the engine started" test "$(ruleset)" == "$before_rules"
check "no bridge or veth of the engine is left" test "$(bridges)" == "$before_bridges"
check "forwarding sysctls are as before" test "$(sysctls)" == "$before_sysctls"
check "the guard is gone with the engine" bash -c "! iptables -S DOCKER-USER"

echo "$passed passed, $failed failed"
((failed == 0))
