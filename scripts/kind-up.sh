#!/usr/bin/env bash
# The kind path: create a kind cluster whose nodes wait for an external CCM, run the emulator beside it on the
# kind network, adopt the kind nodes as cloud instances, build and load the CCM image and deploy it from
# ccm/deploy/. Needs a Docker (or Podman) engine; stops at once, saying so, where none answers.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kind_config=${KIND_CONFIG:-$repo_root/kind-config/cluster.yaml}
cluster=${KIND_CLUSTER_NAME:-fakecloud}
port=${FAKECLOUD_PORT:-8787}
run_root=${FAKECLOUD_RUN_DIR:-$repo_root/.run}
kind_version=${KIND_VERSION:-v0.31.0}

log() { printf '[kind-up] %s\n' "$*" >&2; }
die() { printf '[kind-up] error: %s\n' "$*" >&2; exit 1; }

[[ -f "$kind_config" ]] || die "no kind config at $kind_config"

# 1. A container engine. Without one nothing below can work, so say so before doing anything.
if ! command -v docker >/dev/null 2>&1; then
	die "kind needs a Docker (or Podman) engine and there is no 'docker' command here. Install Docker, or use the local backend: 'make up' and 'make test'."
fi
if ! docker info >/dev/null 2>&1; then
	die "kind needs a running Docker engine, and 'docker info' gets no answer (the docker client is installed but no engine runs). Start Docker, or use the local backend: 'make up' and 'make test'."
fi

# 2. kind itself, from the Go module proxy if it is missing.
if ! command -v kind >/dev/null 2>&1; then
	command -v go >/dev/null 2>&1 || die "kind is not installed and there is no Go toolchain to install it with ('go install sigs.k8s.io/kind@$kind_version')"
	log "installing kind $kind_version with go install"
	GOBIN="$repo_root/.run/bin" go install "sigs.k8s.io/kind@$kind_version"
	export PATH="$repo_root/.run/bin:$PATH"
fi

log "creating kind cluster $cluster from $kind_config"
kind create cluster --name "$cluster" --config "$kind_config"
kubeconfig="$run_root/kind.kubeconfig"
mkdir -p "$run_root"
kind get kubeconfig --name "$cluster" >"$kubeconfig"

log "building the emulator image (docker/emulator.Dockerfile)"
docker build -q -f "$repo_root/docker/emulator.Dockerfile" -t fakecloud/emulator:dev "$repo_root" >/dev/null
token_user=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
token_admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
(
	umask 077
	printf 'export FAKECLOUD_ENDPOINT=http://127.0.0.1:%s\nexport FAKECLOUD_USER_TOKEN=%s\nexport FAKECLOUD_ADMIN_TOKEN=%s\n' \
		"$port" "$token_user" "$token_admin" >"$run_root/kind.credentials"
)
# A fixed address on the kind network, near the top of its IPv4 range (away from the nodes, which docker
# numbers from the bottom): the CCM pods reach the emulator there without DNS for container names, and a
# `docker kill` + `docker start` (the e2e suite's emulator crash) brings it back at the same place.
subnet=$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}' | tr ' ' '\n' | grep -m1 '\.')
emulator_ip=$(python3 -c 'import ipaddress, sys; print(ipaddress.ip_network(sys.argv[1])[-6])' "$subnet")
log "running the emulator on the kind network at $emulator_ip (container fakecloud-emulator, host port $port)"
docker run -d --name fakecloud-emulator --network kind --ip "$emulator_ip" -p "127.0.0.1:$port:8787" \
	-e FAKECLOUD_USER_TOKEN="$token_user" -e FAKECLOUD_ADMIN_TOKEN="$token_admin" fakecloud/emulator:dev >/dev/null

(cd "$repo_root" && cargo build --locked --quiet --bin fakecloud)
export FAKECLOUD_ENDPOINT="http://127.0.0.1:$port"
export FAKECLOUD_USER_TOKEN=$token_user FAKECLOUD_ADMIN_TOKEN=$token_admin
for _ in $(seq 1 50); do "$repo_root/target/debug/fakecloud" quota get >/dev/null 2>&1 && break; sleep 0.2; done
log "adopting the kind nodes as cloud instances"
"$repo_root/target/debug/fakecloud" adopt --kubeconfig "$kubeconfig"

log "building and loading the CCM image, deploying it (ccm/deploy/)"
docker build -q -f "$repo_root/docker/ccm.Dockerfile" -t fakecloud/ccm:dev "$repo_root" >/dev/null
kind load docker-image --name "$cluster" fakecloud/ccm:dev
KUBECONFIG=$kubeconfig kubectl apply -f "$repo_root/ccm/deploy/rbac.yaml"
# The real cloud config (the placeholder in ccm/deploy/cloud-config.yaml is not applied).
KUBECONFIG=$kubeconfig kubectl -n kube-system create secret generic fakecloud-cloud-config \
	--from-literal=cloud-config="$(printf 'endpoint: http://%s:8787\ntoken-file: /etc/fakecloud/token\n' "$emulator_ip")" \
	--from-literal=token="$token_user" --dry-run=client -o yaml | KUBECONFIG=$kubeconfig kubectl apply -f -
KUBECONFIG=$kubeconfig kubectl apply -f "$repo_root/ccm/deploy/deployment.yaml"
log "waiting for the CCM's replicas, then for every node to be initialized (a providerID)"
KUBECONFIG=$kubeconfig kubectl -n kube-system rollout status deployment/fakecloud-ccm --timeout=300s
uninitialized() {
	KUBECONFIG=$kubeconfig kubectl get nodes --no-headers -o custom-columns='N:.metadata.name,P:.spec.providerID' |
		awk '$2 == "<none>" { print $1 }'
}
for _ in $(seq 1 120); do
	[[ -z "$(uninitialized)" ]] && break
	sleep 1
done
[[ -z "$(uninitialized)" ]] || die "nodes not initialized by the CCM after 2 minutes: $(uninitialized | tr '\n' ' ')(kubectl -n kube-system logs deploy/fakecloud-ccm)"

cat <<MSG

kind cluster $cluster is up with the fakecloud emulator beside it.

  export KUBECONFIG=$kubeconfig
  source $run_root/kind.credentials    # FAKECLOUD_ENDPOINT and the emulator's tokens, for the fakecloud CLI

The conformance suite against it: make e2e-kind
Stop: make kind-down
MSG
