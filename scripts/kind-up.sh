#!/usr/bin/env bash
# `make kind-up`: the kind path, end to end, on this machine or a user's.
#  1. a container engine: the user's Docker if one answers, else a private one built and started here
#     (scripts/kind/engine.sh: its own socket and data-root, an egress guard before any container runs);
#  2. the kind node image of the local control plane's Kubernetes version, built offline
#     (scripts/kind/node-image.sh), and the project's images (scripts/kind/images.sh);
#  3. a kind cluster (kind-config/cluster.yaml, or KIND_CONFIG) whose kubelets wait for an external CCM;
#  4. the emulator container on the kind network at a fixed address, the kind nodes adopted as its instances;
#  5. the VPC's routing (vpc-router/deploy/): every node's pod network from its podCIDR, the routes between
#     nodes from the emulator's route table — so fakecloud-ccm's route controller is what connects them;
#  6. the CCM as its two-replica Deployment: fakecloud-ccm (ccm/deploy/), or with FAKECLOUD_KIND_CCM=upstream
#     upstream's cloud-controller-manager with fakecloud's Go provider (ccm-upstream/deploy/); then a wait until
#     every node is Ready and initialized (providerID, zone labels, no uninitialized taint) and CoreDNS runs.
# On a failure or Ctrl-C it deletes what it created, stops an engine it started, and says what went wrong.
# `kind-up.sh --prepare` stops after step 2 (engine and images, no cluster): make e2e-kind-both runs it once, so
# its two kind-ups can go side by side, each finding everything built.
set -euo pipefail
kind_script=kind-up
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"
repo_root=$kind_repo_root
prepare=""
case ${1:-} in
"") ;;
--prepare) prepare=yes ;;
*) die "unknown argument '$1': kind-up.sh takes none, or --prepare (the engine and the images, no cluster)" ;;
esac
kind_dir="$repo_root/scripts/kind"
kind_config=${KIND_CONFIG:-$repo_root/kind-config/cluster.yaml}
cluster=$kind_cluster
port=${FAKECLOUD_PORT:-8787}
run_root=$kind_run_root
emulator=$kind_emulator
kubeconfig="$run_root/kind.kubeconfig"

[[ -f "$kind_config" ]] || die "no kind config at $kind_config"
mkdir -p "$run_root"

# --- refuse early: what is already there, the port, the disk ---------------------------------------------
[[ -z "$prepare" ]] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
	die "port $port on 127.0.0.1 is taken (another emulator, or 'make up'?); free it or set FAKECLOUD_PORT"
# --- 1. the engine ----------------------------------------------------------------------------------------
started_engine=""
if ! (command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1); then
	started_engine=yes
fi
bash "$kind_dir/engine.sh" start
eval "$(bash "$kind_dir/engine.sh" env)"
# kind runs rootless nodes only on cgroup v2 (its rootless guide): say so before kind fails deep in its start.
if docker info -f '{{json .SecurityOptions}}' 2>/dev/null | grep -q rootless &&
	[[ "$(docker info -f '{{.CgroupVersion}}' 2>/dev/null)" != 2 ]]; then
	die "the Docker engine that answers is rootless on cgroup v1, where kind cannot run its nodes: use a rootful engine (or unset DOCKER_HOST and stop it: make kind-up then starts a private one), or boot the host with cgroup v2"
fi

# The node image (~1.3 GB) once, then per running node ~1.6 GB (its /var: the preloaded images and ours,
# unpacked; measured on the 3-node config) with room to spare, plus the build caches on a first run.
nodes=$(grep -cE '^\s*- role:' "$kind_config")
need_gb=$((nodes * 3 + 2))
[[ -n "$(docker image ls -q "$kind_node_image" 2>/dev/null)" ]] || need_gb=$((need_gb + 10))
mkdir -p "$cache_root"
free_gb() { df --output=avail -BG "$cache_root" | tail -1 | tr -dc 0-9; }
avail_gb=$(free_gb)
if ((avail_gb < need_gb)) && [[ "${DOCKER_HOST:-}" == "unix://$engine_socket" ]]; then
	# Everything in the private engine is ours: what earlier runs left untagged, and the build cache, go first.
	log "only ${avail_gb} GB free of the ${need_gb} GB needed: pruning the private engine's untagged images and build cache"
	docker image prune -f >/dev/null 2>&1 || true
	docker builder prune -af >/dev/null 2>&1 || true
	avail_gb=$(free_gb)
fi
((avail_gb >= need_gb)) ||
	die "about ${need_gb} GB of free disk are needed under $cache_root for $nodes kind nodes (and the image builds), and only ${avail_gb} GB are free. What is largest there:
$(du -xsh "$cache_root"/*/* 2>/dev/null | sort -rh | head -n 6 | sed 's/^/  /')"

created=()
cleanup() {
	local rc=$?
	((rc == 0)) && return
	log "failed: removing what this run created (${created[*]:-nothing})"
	for what in "${created[@]}"; do
		case "$what" in
		cluster) kind delete cluster --name "$cluster" >/dev/null 2>&1 || true ;;
		emulator)
			docker rm -f "$emulator" >/dev/null 2>&1 || true
			docker volume rm "$emulator-data" >/dev/null 2>&1 || true
			;;
		esac
	done
	if [[ -n "$started_engine" ]]; then bash "$kind_dir/engine.sh" stop || true; fi
	rm -f "$kubeconfig" "$run_root/kind.credentials" "$kind_ccm_file"
	log "logs of the engine, if it was ours: $engine_run_dir/dockerd.log"
}
trap cleanup EXIT

if [[ -z "$prepare" ]] && docker ps -a --format '{{.Names}}' | grep -qx "$emulator"; then
	die "a container named $emulator exists (an earlier make kind-up?): 'make kind-down' first"
fi

# --- 2. binaries and images -------------------------------------------------------------------------------
cp_bin=$(bash "$repo_root/scripts/build-control-plane.sh" | tail -n 1) # kubectl of the cluster's version
bash "$kind_dir/build-node-binaries.sh"
PATH="$kind_bin_dir:$cp_bin:$PATH"
if [[ -z "$prepare" ]] && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	die "a kind cluster named $cluster exists already (an earlier make kind-up?): use it, or 'make kind-down' first"
fi
node_image=${KIND_NODE_IMAGE:-$kind_node_image}
if [[ "$node_image" == "$kind_node_image" ]]; then bash "$kind_dir/node-image.sh"; fi
# A node image of another Kubernetes version would run kubelets that this checkout's control-plane tools, CCMs
# and test images were not built for: refused before anything is created. kind's node images say their version
# in /kind/version (ours too).
image_version=$(docker run --rm --entrypoint cat "$node_image" /kind/version 2>&1) ||
	die "cannot read /kind/version from node image $node_image (not a kind node image, or not in the engine and not pullable): $image_version
  use kindest/node:$k8s_version, or unset KIND_NODE_IMAGE and make kind-up builds fakecloud's own"
[[ "$image_version" == "$k8s_version" ]] ||
	die "node image $node_image is Kubernetes $image_version, and this checkout's is $k8s_version (controlplane/upstream/go.mod): use kindest/node:$k8s_version, or unset KIND_NODE_IMAGE and make kind-up builds fakecloud's own"
bash "$kind_dir/images.sh"
if [[ -n "$prepare" ]]; then
	log "prepared: the engine answers ($DOCKER_HOST) and the node image and the project's images are built"
	exit 0
fi

# --- 3. the cluster ---------------------------------------------------------------------------------------
# The config as given, plus what this node image and this host need, for every node.
config="$run_root/kind-config.yaml"
cp "$kind_config" "$config"
grep -qE '^kubeadmConfigPatches:' "$config" &&
	die "$kind_config has a top-level kubeadmConfigPatches; put them on the nodes (kind-up adds its own at the top level)"
{
	echo "kubeadmConfigPatches:"
	if [[ "$node_image" == "$kind_node_image" ]]; then
		# The kubeadm images are preloaded in our node image under this name; there is no registry behind it.
		printf '  - |\n    kind: ClusterConfiguration\n    imageRepository: %s\n' "$kind_image_repository"
	fi
	if [[ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]]; then
		# kubelet 1.35+ refuses cgroup v1 unless told otherwise; only where the host has nothing else.
		log "this host has cgroup v1: the kubelets get failCgroupV1: false"
		printf '  - |\n    kind: KubeletConfiguration\n    failCgroupV1: false\n'
	fi
} >>"$config"
created+=(cluster)
step "creating kind cluster $cluster ($nodes nodes, image $node_image)" \
	kind create cluster --name "$cluster" --image "$node_image" --config "$config"
kind get kubeconfig --name "$cluster" >"$kubeconfig"
export KUBECONFIG=$kubeconfig

# --- 4. the emulator beside the cluster -------------------------------------------------------------------
token_user=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
token_admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
(
	umask 077
	printf 'export FAKECLOUD_ENDPOINT=http://127.0.0.1:%s\nexport FAKECLOUD_USER_TOKEN=%s\nexport FAKECLOUD_ADMIN_TOKEN=%s\n' \
		"$port" "$token_user" "$token_admin" >"$run_root/kind.credentials"
)
# A fixed address on the kind network, near the top of its IPv4 range (away from the nodes, which docker
# numbers from the bottom): pods and nodes reach the emulator there without DNS for container names, and a
# `docker kill` + `docker start` (the e2e suite's emulator crash) brings it back at the same place, on its volume.
subnets=$(docker network inspect "$kind_network" -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}')
subnet=$(tr ' ' '\n' <<<"$subnets" | grep -m1 '\.')
# The nodes live outside the emulator's VPC: it adopts machines there (`fakecloud adopt`, below) because it is
# told the kind network is where they are, as a real cloud takes private IPs only inside its own networks.
adopt_networks=$(xargs <<<"$subnets" | tr ' ' ',')
emulator_ip=$(python3 -c 'import ipaddress, sys; print(ipaddress.ip_network(sys.argv[1])[-6])' "$subnet")
# The load balancers' public pool: the /24 below the one the emulator sits in, far above the nodes. The emulator
# serves the load balancers' traffic and holds the pool's addresses in its container (a local route, so it
# needs NET_ADMIN, as root there), so an EXTERNAL-IP answers from the host and from the pods. A passthrough load
# balancer's packets it routes on to a node, out of the interface they came in by: forwarding on, and no ICMP
# redirect telling the client to go to the node itself (both only in the container's network namespace).
lb_pool=$(python3 -c 'import ipaddress, sys; n = ipaddress.ip_network(sys.argv[1]); print(ipaddress.ip_network(f"{n[-1] - 511}/24", strict=False) if n.prefixlen <= 22 else "")' "$subnet")
[[ -n "$lb_pool" ]] || die "the kind network $subnet is too small for the nodes, the emulator and a /24 of load balancer addresses (kind makes a /16; 'docker network rm kind' and run again)"
created+=(emulator)
step "starting the emulator on the kind network at $emulator_ip, load balancers in $lb_pool (container $emulator, host port $port)" \
	docker run -d --name "$emulator" --network "$kind_network" --ip "$emulator_ip" -p "127.0.0.1:$port:8787" \
	-v "$emulator-data:/var/lib/fakecloud" --user 0 --cap-add NET_ADMIN --sysctl net.ipv4.ip_forward=1 \
	--sysctl net.ipv4.conf.all.send_redirects=0 --sysctl net.ipv4.conf.default.send_redirects=0 \
	-e FAKECLOUD_SERVE_LOAD_BALANCERS=true -e FAKECLOUD_PUBLIC_POOL="$lb_pool" -e FAKECLOUD_HOLD_PUBLIC_POOL=true \
	-e FAKECLOUD_ADOPT_NETWORKS="$adopt_networks" \
	-e FAKECLOUD_USER_TOKEN="$token_user" -e FAKECLOUD_ADMIN_TOKEN="$token_admin" fakecloud/emulator:dev

export FAKECLOUD_ENDPOINT="http://127.0.0.1:$port"
export FAKECLOUD_USER_TOKEN=$token_user FAKECLOUD_ADMIN_TOKEN=$token_admin
cli="$image_target_dir/fakecloud" # built by images.sh
for _ in $(seq 1 100); do "$cli" quota get >/dev/null 2>&1 && break; sleep 0.2; done
"$cli" quota get >/dev/null || die "the emulator does not answer on $FAKECLOUD_ENDPOINT (docker logs $emulator)"
step "adopting the kind nodes as cloud instances" "$cli" adopt --kubeconfig "$kubeconfig"

# --- 5 and 6. the VPC's routing and the CCM ---------------------------------------------------------------
# The emulator's image too: the e2e suite's pod-network case runs it as a server and a client pod; agnhost is
# the server its load balancer traffic cases send to.
step "loading the images into the kind nodes" \
	kind load docker-image --name "$cluster" "$kind_ccm_image:dev" fakecloud/vpc-router:dev fakecloud/emulator:dev fakecloud/agnhost:dev
# The real cloud config (the placeholder in ccm/deploy/cloud-config.yaml is not applied): the user token, as a
# customer of the cloud has it.
cloud_config=$(printf 'endpoint: http://%s:8787\ntoken-file: /etc/fakecloud/token\n' "$emulator_ip")
kubectl -n kube-system create secret generic fakecloud-cloud-config --from-literal=cloud-config="$cloud_config" \
	--from-literal=token="$token_user" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# The VPC router is the cloud's fabric, not a customer: the admin token (never faulted, not the CCM's calls).
kubectl -n kube-system create secret generic fakecloud-vpc-router-config --from-literal=cloud-config="$cloud_config" \
	--from-literal=token="$token_admin" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -f "$repo_root/vpc-router/deploy/vpc-router.yaml" >/dev/null
# The CCM manages routes inside the cluster's pod range: the kind config's podSubnet (both families on a
# dual-stack cluster), kind's own default when it names none.
pod_subnet=$(awk '$1 == "podSubnet:" { print $2; exit }' "$kind_config" | tr -d '"')
pod_subnet=${pod_subnet:-10.244.0.0/16}
kubectl apply -f "$repo_root/ccm/deploy/rbac.yaml" >/dev/null
kind_ccm_manifest | sed "s|--cluster-cidr=.*|--cluster-cidr=$pod_subnet|" | kubectl apply -f - >/dev/null
echo "$kind_ccm" >"$kind_ccm_file"

# Wait until CHECK prints nothing, up to SECONDS, saying every 15 s what is still awaited.
wait_until_none() {
	local what=$1 seconds=$2 check=$3 left start=$SECONDS
	while left=$($check) && [[ -n "$left" ]]; do
		((SECONDS - start < seconds)) || die "$what after ${seconds}s, still: $(tr '\n' ' ' <<<"$left")
  kubectl --kubeconfig $kubeconfig -n kube-system get pods -o wide; docker logs $emulator"
		(((SECONDS - start) % 15 == 0)) && log "waiting for $what: $(tr '\n' ' ' <<<"$left")"
		sleep 1
	done
}
not_ready() { kubectl get nodes --no-headers | awk '$2 != "Ready" { print $1 }'; }
uninitialized() {
	kubectl get nodes --no-headers -o custom-columns='N:.metadata.name,P:.spec.providerID,T:.spec.taints[*].key' |
		awk '$2 == "<none>" || $3 ~ /node.cloudprovider.kubernetes.io\/uninitialized/ { print $1 }'
}
dns_not_running() { kubectl -n kube-system get pods -l k8s-app=kube-dns --no-headers | awk '$3 != "Running" { print $1 }'; }
step "waiting for every node to be initialized by $kind_ccm_deployment" wait_until_none "nodes initialized" 300 uninitialized
step "waiting for every node to be Ready (the VPC router wrote its pod network)" wait_until_none "Ready nodes" 300 not_ready
step "waiting for CoreDNS" wait_until_none "CoreDNS running" 300 dns_not_running
kubectl -n kube-system rollout status "deployment/$kind_ccm_deployment" --timeout=300s >/dev/null

trap - EXIT
cat <<MSG

kind cluster $cluster is up ($((SECONDS - kind_t0)) s), with the fakecloud emulator beside it and $kind_ccm_deployment in it.

  export KUBECONFIG=$kubeconfig
  source $run_root/kind.credentials    # FAKECLOUD_ENDPOINT and the emulator's tokens, for the fakecloud CLI
$(bash "$kind_dir/engine.sh" env | sed 's/^/  /')

The conformance suite against it: make e2e-kind
Stop (cluster, emulator$([[ -n "$started_engine" ]] && echo ", private engine")): make kind-down
MSG
