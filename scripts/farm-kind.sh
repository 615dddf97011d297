#!/usr/bin/env bash
# `make farm-kind`: the shared fake cloud's manifests (deploy/farm; the book, docs/book/src/farm.md) tried on the
# project's kind cluster of `make kind-up`: the database image built offline (`fakecloud-kind postgres-image`)
# and loaded onto the nodes beside the emulator image kind-up loaded, a Secret with fresh tokens and password,
# deploy/farm/kind applied, then checked through the replicas, each reached on a port of its own: an instance
# made through each is listed through every other, a quota set through one holds for calls spread over all,
# and with one replica killed (its pod deleted at once) the cloud answers with everything it acknowledged.
# `scripts/farm-kind.sh down` removes the farm (the cluster stays; `make kind-down` removes it).
set -euo pipefail
kind_script=farm-kind
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"

kubeconfig="$kind_run_root/kind.kubeconfig"
PATH="$kind_bin_dir:$PATH" # the kind binary kind-up built
namespace=fakecloud-farm
[[ -f "$kubeconfig" ]] || die "no kind cluster from this checkout ($kubeconfig is missing): run make kind-up first"
export KUBECONFIG=$kubeconfig
k() { kubectl -n "$namespace" "$@"; }

if [[ "${1:-}" == down ]]; then
	kubectl delete namespace "$namespace" --ignore-not-found --wait=true >/dev/null
	log "farm removed (namespace $namespace)"
	exit 0
fi
[[ -z "${1:-}" ]] || die "unknown argument '$1': farm-kind.sh takes none, or down"

# On the engine common.sh's settings name (DOCKER_HOST, or the private engine when it runs), as kind-up used.
step "building the database image" "$kind_tool" postgres-image
step "loading fakecloud/postgres:dev onto the nodes" kind load docker-image --name "$kind_cluster" fakecloud/postgres:dev

kubectl apply -f "$kind_repo_root/deploy/farm/base/namespace.yaml" >/dev/null
if ! k get secret fakecloud-farm >/dev/null 2>&1; then
	password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
	user_token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
	admin_token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
	k create secret generic fakecloud-farm --from-literal=postgres-password="$password" \
		--from-literal=database-url="postgres://fakecloud:$password@fakecloud-db:5432/fakecloud" \
		--from-literal=user-token="$user_token" --from-literal=admin-token="$admin_token" >/dev/null
	log "Secret fakecloud-farm created with fresh tokens and password"
fi
user_token=$(k get secret fakecloud-farm -o jsonpath='{.data.user-token}' | base64 -d)
admin_token=$(k get secret fakecloud-farm -o jsonpath='{.data.admin-token}' | base64 -d)

step "applying deploy/farm/kind" kubectl apply -k "$kind_repo_root/deploy/farm/kind"
step "waiting for the database" k rollout status statefulset/fakecloud-db --timeout=300s
step "waiting for three emulator replicas" k rollout status deployment/fakecloud --timeout=300s

# --- the checks: each replica on a port of its own --------------------------------------------------------
forwards=()
cleanup() { for pid in "${forwards[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
# A local port forwarded to pod $1; prints the port once it answers.
forward() {
	local pod=$1 port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	k port-forward "$pod" "$port:8787" >/dev/null 2>&1 &
	forwards+=($!)
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
		sleep 0.2
	done
	curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || die "pod $pod does not answer through port-forward"
	printf '%s\n' "$port"
}
# call PORT TOKEN METHOD PATH [BODY]: the answer's status and body.
call() {
	curl -sS -o /dev/stdout -w '\n%{http_code}' -X "$3" -H "Authorization: Bearer $2" \
		-H 'Content-Type: application/json' ${5:+--data "$5"} "http://127.0.0.1:$1$4"
}
instance_names() { call "$1" "$user_token" GET "/v1/instances?page_size=1000" | head -n -1 | python3 -c \
	'import json, sys; print(" ".join(sorted(i["name"] for i in json.load(sys.stdin)["items"])))'; }

mapfile -t pods < <(k get pods -l app.kubernetes.io/name=fakecloud -o name)
((${#pods[@]} == 3)) || die "expected 3 emulator pods, found ${#pods[@]}: ${pods[*]}"
ports=()
for pod in "${pods[@]}"; do ports+=("$(forward "$pod")"); done
log "replicas: ${pods[*]} on local ports ${ports[*]}"

for i in 0 1 2; do
	status=$(call "${ports[$i]}" "$user_token" POST /v1/instances "{\"name\": \"farm-$i\"}" | tail -n 1)
	[[ "$status" == 201 ]] || die "creating farm-$i through ${pods[$i]} answered $status"
done
for i in 0 1 2; do
	names=$(instance_names "${ports[$i]}")
	[[ "$names" == "farm-0 farm-1 farm-2" ]] || die "${pods[$i]} lists '$names', not the three made through all"
done
log "ok: an instance made through each replica is listed through every one"

status=$(call "${ports[0]}" "$admin_token" PUT /v1/quotas/instances '{"limit": 5}' | tail -n 1)
[[ "$status" == 200 ]] || die "setting the instance quota answered $status"
created=0
for n in $(seq 0 8); do
	status=$(call "${ports[$((n % 3))]}" "$user_token" POST /v1/instances "{\"name\": \"spread-$n\"}" | tail -n 1)
	[[ "$status" == 201 ]] && created=$((created + 1))
done
((created == 2)) || die "a quota of 5 with 3 instances let $created more through (expected 2)"
log "ok: a quota of 5 held for creates spread over the three replicas (2 of 9 made)"

before=$(instance_names "${ports[1]}")
step "killing ${pods[0]}" k delete "${pods[0]}" --grace-period=0 --force --wait=false
status=$(call "${ports[1]}" "$user_token" GET /v1/instances | tail -n 1)
[[ "$status" == 200 ]] || die "the cloud did not answer through ${pods[1]} with ${pods[0]} gone ($status)"
step "waiting for the Deployment to replace it" k rollout status deployment/fakecloud --timeout=300s
mapfile -t pods < <(k get pods -l app.kubernetes.io/name=fakecloud --field-selector=status.phase=Running -o name)
for pod in "${pods[@]}"; do
	[[ "$(instance_names "$(forward "$pod")")" == "$before" ]] || die "$pod lists other instances than before the kill"
done
log "ok: one replica killed, the others answered, and every replica lists what was acknowledged"
log "the farm runs in namespace $namespace (KUBECONFIG=$kubeconfig); remove it with: bash scripts/farm-kind.sh down"
