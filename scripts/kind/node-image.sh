#!/usr/bin/env bash
# Builds the offline kind node image $kind_node_image (fakecloud/kind-node:<k8s version>) by hand, because
# `kind build node-image` always pulls (its base image and the kubeadm images):
#
#   1. binaries: scripts/build-control-plane.sh (kube-apiserver, kube-controller-manager, etcd, kubectl) and
#      scripts/kind/build-node-binaries.sh (kubelet, kubeadm, kube-proxy, kube-scheduler, crictl, coredns, kind),
#      plus pause, compiled static from the kubernetes module's build/pause/linux/pause.c;
#   2. the kubeadm images, tiny, named exactly as `kubeadm config images list --image-repository
#      $kind_image_repository` says: pause (FROM scratch), etcd, kube-apiserver, kube-controller-manager,
#      kube-scheduler, coredns (FROM debian:bookworm-slim, see base-image.sh) and kube-proxy (FROM a second
#      debootstrap base with iptables, nftables, conntrack and ipset: $kind_image_repository/debian-iptables);
#   3. the node root filesystem: debootstrap with systemd, Debian's containerd and runc, the CNI plugins
#      (linked into /opt/cni/bin), iptables/nftables/conntrack/iproute2/socat/ebtables/kmod/e2fsprogs/pigz...,
#      and kind's own files from the kind module (images/base/files, placed as its images/base/Dockerfile
#      does), with containerd's sandbox_image set to our pause and restrict_oom_score_adj = true (our hosts'
#      capability bounding set lacks CAP_SYS_RESOURCE, so pods may not lower oom_score_adj);
#   4. a build container from that root filesystem gets kubeadm, kubelet, kubectl, crictl and /kind/version
#      (what `kind create cluster` reads), imports the kubeadm images into its containerd (pinned, not
#      unpacked: the node unpacks them on its /var volume) and is committed with kind's ENTRYPOINT, ENV and
#      STOPSIGNAL.
#
# Every step is cached: binaries and root filesystems under $cache_root, images in the engine. The node image
# carries labels with the Kubernetes version and a hash of its inputs (these scripts and the binaries); it is
# rebuilt only when they change.
#
# Clusters from this image need, in the kind config: networking.disableDefaultCNI: true (the image has no
# kindnetd; bring a CNI), a ClusterConfiguration patch imageRepository: fakecloud.local, and on cgroup v1
# hosts a KubeletConfiguration patch failCgroupV1: false.
#
# Uses DOCKER_HOST, or the private engine of scripts/kind/engine.sh when it runs. Needs root (debootstrap).
set -euo pipefail

kind_script=node-image
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/kind/rootfs.sh
source "$kind_repo_root/scripts/kind/rootfs.sh"

# What kind's images/base/Dockerfile installs, minus what only rootless nodes (fuse-overlayfs) and storage e2e
# tests (nfs-common, open-iscsi) use, plus Debian's containerd, runc and CNI plugins where kind builds its own,
# and socat/ebtables/ipset that kubelet, kubeadm's checks and port-forward look for.
node_packages=systemd,containerd,runc,containernetworking-plugins
node_packages+=,conntrack,iptables,nftables,ebtables,ipset,iproute2,ethtool,util-linux,mount,kmod,socat
node_packages+=,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps
# kube-proxy's image base: what it execs (upstream bases it on distroless-iptables).
kube_proxy_packages=iptables,nftables,conntrack,ipset,kmod
# The CNI plugins kind's own node image ships in /opt/cni/bin, and only those (its base image Dockerfile copies
# host-local, loopback, ptp and portmap; Debian's package has them in /usr/lib/cni): like kindest/node, this
# image has no bridge, so the kind path proves the VPC router brings what its config needs to any node image.
kind_cni_plugins=(host-local loopback portmap ptp)

base_image=debian:bookworm-slim
iptables_base_image="$kind_image_repository/debian-iptables:$debian_suite"
label_inputs=io.fakecloud.inputs
label_version=io.fakecloud.kubernetes-version
work_dir=""
build_container=""

cleanup() {
	if [[ -n "$build_container" ]]; then docker rm -f -v "$build_container" >/dev/null 2>&1 || true; fi
	if [[ -n "$work_dir" ]]; then rm -rf "$work_dir"; fi
}
trap cleanup EXIT

label_of() { docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
hash_of() { sha256sum | cut -c1-16; }

# --- 1. binaries --------------------------------------------------------------------------------------------

build_binaries() {
	cp_bin=$(bash "$kind_repo_root/scripts/build-control-plane.sh" | tail -n 1)
	node_bin=$(bash "$kind_repo_root/scripts/kind/build-node-binaries.sh" | tail -n 1)
	[[ -x "$cp_bin/kubectl" && -x "$cp_bin/etcd" && -x "$node_bin/kubeadm" ]] ||
		die "the binary builds reported $cp_bin and $node_bin, which lack kubectl, etcd or kubeadm"
}

# The images kubeadm will ask the node's containerd for: name -> reference, from kubeadm itself.
read_kubeadm_images() {
	local ref name
	declare -gA image_ref=()
	while read -r ref; do
		[[ -n "$ref" ]] || continue
		name=${ref##*/}
		name=${name%%:*}
		image_ref[$name]=$ref
	done < <("$node_bin/kubeadm" config images list --kubernetes-version "$k8s_version" \
		--image-repository "$kind_image_repository" 2>/dev/null)
	for name in pause etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy coredns; do
		[[ -n "${image_ref[$name]:-}" ]] ||
			die "kubeadm $k8s_version does not list a $name image (kubeadm config images list); the image set this script builds needs updating"
	done
	((${#image_ref[@]} == 7)) ||
		die "kubeadm $k8s_version lists images this script does not build: ${image_ref[*]}"
}

# pause, compiled static from the kubernetes module's source (what build/pause/Makefile does).
build_pause() {
	local tag=${image_ref[pause]##*:} src stamp_value
	src="$(cd "$k8s_module_dir" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
	[[ -f "$src" ]] || die "pause.c not found at $src (is k8s.io/kubernetes $k8s_version in the module cache? run scripts/build-control-plane.sh)"
	stamp_value="$tag $(sha256sum <"$src" | cut -c1-16)"
	if [[ -x "$node_bin/pause" && "$(cat "$node_bin/.pause.version" 2>/dev/null)" == "$stamp_value" ]]; then
		log "pause $tag already built"
		return
	fi
	# gcc prints the full path of libc.a when a static libc is installed, and just the name when not.
	if ! command -v gcc >/dev/null 2>&1 || [[ "$(gcc -print-file-name=libc.a)" != /* ]]; then
		((EUID == 0)) || die "compiling pause needs gcc and a static libc (apt-get install gcc libc6-dev)"
		log "installing gcc and libc6-dev (static libc) with apt-get to compile pause"
		if ! apt-get update -qq >&2 ||
			! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >&2; then
			die "apt-get install gcc libc6-dev failed; install them and run this script again"
		fi
	fi
	gcc -Os -Wall -Werror -static -s -DVERSION="v$tag-$k8s_version" -o "$node_bin/.pause.tmp" "$src" ||
		die "compiling $src failed (see above)"
	mv -f "$node_bin/.pause.tmp" "$node_bin/pause"
	printf '%s\n' "$stamp_value" >"$node_bin/.pause.version"
}

# --- 2. the kubeadm images ----------------------------------------------------------------------------------

# A root filesystem customisation: the iptables wrapper is added in the kube-proxy image itself.
customize_iptables_rootfs() { :; }

build_iptables_base() {
	local rootfs
	rootfs=$(make_rootfs debian-iptables "$kube_proxy_packages" customize_iptables_rootfs)
	if [[ "$(label_of "$iptables_base_image" io.fakecloud.rootfs)" == "${rootfs##*/}" ]]; then
		log "$iptables_base_image already imported"
		return
	fi
	import_rootfs_image "$rootfs" "$iptables_base_image" --change "LABEL io.fakecloud.rootfs=${rootfs##*/}" --change 'CMD ["bash"]'
}

# kube-proxy's iptables must be the backend (legacy or nft) the node already uses, or its rules and the
# node's would live in different tables. Like upstream's iptables-wrapper: the first call picks it from the
# rules kubelet (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY) or anything else left, points the commands at it and
# runs the real command.
iptables_wrapper() {
	cat <<'WRAPPER'
#!/bin/sh
# Picks the iptables backend the host (node) uses, once; then every iptables command is the real one.
set -eu
hint='KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY'
if (iptables-nft-save -t mangle; ip6tables-nft-save -t mangle) 2>/dev/null | grep -Eq "$hint"; then
	mode=nft
elif (iptables-legacy-save -t mangle; ip6tables-legacy-save -t mangle) 2>/dev/null | grep -Eq "$hint"; then
	mode=legacy
else
	legacy=$( (iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -c '^-' || true)
	nft=$( (iptables-nft-save; ip6tables-nft-save) 2>/dev/null | grep -c '^-' || true)
	if [ "${legacy:-0}" -gt "${nft:-0}" ]; then mode=legacy; else mode=nft; fi
fi
for family in iptables ip6tables; do
	ln -sf "$family-$mode" "/usr/sbin/$family"
	ln -sf "$family-$mode-save" "/usr/sbin/$family-save"
	ln -sf "$family-$mode-restore" "/usr/sbin/$family-restore"
done
exec "$0" "$@"
WRAPPER
}

# build_image NAME FROM FILE... : builds image_ref[NAME] from a generated Dockerfile; FILEs are copied into the
# context. Skipped when the image exists with the same inputs (Dockerfile, files, base image).
build_image() {
	local name=$1 from=$2 ref=${image_ref[$1]} ctx file hash from_id=""
	shift 2
	ctx="$work_dir/$name"
	mkdir -p "$ctx"
	# hard links where they can be (the work dir is in the same cache), copies where not
	for file in "$@"; do cp -l "$file" "$ctx/" 2>/dev/null || cp "$file" "$ctx/"; done
	dockerfile_for "$name" "$from" >"$ctx/Dockerfile"
	[[ "$from" == scratch ]] || from_id=$(docker image inspect -f '{{.Id}}' "$from")
	hash=$({
		cat "$ctx/Dockerfile"
		printf '%s\n' "$from_id"
		# generated files by content, the (large) cached binaries by name, size and time
		for file in "$@"; do
			case $file in
			"$work_dir"/*) sha256sum <"$file" ;;
			*) stat -c '%n %s %Y' "$file" ;;
			esac
		done
	} | hash_of)
	if [[ "$(label_of "$ref" "$label_inputs")" == "$hash" ]]; then
		log "$ref is up to date"
		return
	fi
	printf 'LABEL %s=%s\n' "$label_inputs" "$hash" >>"$ctx/Dockerfile"
	docker build -q --network none -t "$ref" "$ctx" >"$ctx.log" 2>&1 || {
		cat "$ctx.log" >&2
		die "docker build of $ref failed (output above)"
	}
	log "built $ref"
}

dockerfile_for() {
	local name=$1 from=$2
	printf '# %s for kind nodes without a registry; built by scripts/kind/node-image.sh\nFROM %s\n' "$name" "$from"
	case $name in
	pause)
		printf 'COPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
		;;
	coredns)
		printf 'COPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT ["/coredns"]\n'
		;;
	kube-proxy)
		printf 'COPY kube-proxy /usr/local/bin/kube-proxy\nCOPY iptables-wrapper /usr/sbin/iptables-wrapper\n'
		# shellcheck disable=SC2016 # $c and $s are the RUN shell's
		printf 'RUN chmod 0755 /usr/sbin/iptables-wrapper && for c in iptables ip6tables; do for s in "" -save -restore; do ln -sf iptables-wrapper "/usr/sbin/$c$s"; done; done\n'
		printf 'ENTRYPOINT ["/usr/local/bin/kube-proxy"]\n'
		;;
	*) # etcd and the control plane: kubeadm's static pods run them by name from PATH
		printf 'COPY %s /usr/local/bin/%s\nENTRYPOINT ["/usr/local/bin/%s"]\n' "$name" "$name" "$name"
		;;
	esac
}

build_kubeadm_images() {
	iptables_wrapper >"$work_dir/iptables-wrapper"
	build_image pause scratch "$node_bin/pause"
	build_image etcd "$base_image" "$cp_bin/etcd"
	build_image kube-apiserver "$base_image" "$cp_bin/kube-apiserver"
	build_image kube-controller-manager "$base_image" "$cp_bin/kube-controller-manager"
	build_image kube-scheduler "$base_image" "$node_bin/kube-scheduler"
	build_image coredns "$base_image" "$node_bin/coredns"
	build_image kube-proxy "$iptables_base_image" "$node_bin/kube-proxy" "$work_dir/iptables-wrapper"
}

# --- 3. the node root filesystem ----------------------------------------------------------------------------

# Runs on the debootstrap result (make_rootfs hashes this function's body, so editing it rebuilds the rootfs).
# kind_files and pause_ref are set before; both are part of the rootfs cache key.
customize_node_rootfs() {
	local dir=$1 file plugin
	# kind's files, with its Dockerfile's modes: scripts 0755, everything else 0644.
	while read -r file; do
		case $file in
		usr/local/bin/* | kind/bin/*) install -D -m 0755 "$kind_files/$file" "$dir/$file" ;;
		*) install -D -m 0644 "$kind_files/$file" "$dir/$file" ;;
		esac
	done < <(cd "$kind_files" && find . -type f | sed 's|^\./||' | sort)
	# The rest of its Dockerfile's RUN steps: trim systemd's units for a container, enable kind's.
	find "$dir/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
	rm -f "$dir"/lib/systemd/system/multi-user.target.wants/* "$dir"/etc/systemd/system/*.wants/* \
		"$dir"/lib/systemd/system/local-fs.target.wants/* "$dir"/lib/systemd/system/sockets.target.wants/*udev* \
		"$dir"/lib/systemd/system/sockets.target.wants/*initctl* "$dir"/lib/systemd/system/basic.target.wants/*
	echo "ReadKMsg=no" >>"$dir/etc/systemd/journald.conf"
	in_rootfs "$dir" ln -sf /usr/lib/systemd/systemd /sbin/init
	in_rootfs "$dir" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
	in_rootfs "$dir" systemctl mask systemd-binfmt.service
	mkdir -p "$dir/etc/kubernetes/manifests"
	# Debian's containerd is /usr/bin/containerd; kind's unit starts /usr/local/bin/containerd.
	ln -sf /usr/bin/containerd "$dir/usr/local/bin/containerd"
	# kind's base runtime spec: containerd's default plus the hook that gives each container its own
	# product_uuid, without rlimits.
	in_rootfs "$dir" sh -c 'ctr oci spec | jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" | jq "del(.process.rlimits)" >/etc/containerd/cri-base.json'
	jq -e '.hooks.createContainer[0].path == "/kind/bin/mount-product-files.sh"' "$dir/etc/containerd/cri-base.json" >/dev/null ||
		die "could not generate /etc/containerd/cri-base.json with the rootfs's ctr and jq"
	# kind's containerd config, with our pause, restrict_oom_score_adj and without the fuse-overlayfs proxy
	# snapshotter (only rootless nodes use it, and its daemon is not installed).
	{
		printf '# kind %s images/base/files/etc/containerd/config.toml, changed by scripts/kind/node-image.sh:\n' "$kind_module"
		printf '# local pause image, restrict_oom_score_adj = true (no CAP_SYS_RESOURCE), no fuse-overlayfs.\n'
		sed -e '/^\[proxy_plugins\]/,/^$/d' \
			-e "s|^\([[:space:]]*sandbox_image = \).*|\1\"$pause_ref\"|" \
			-e 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
			"$kind_files/etc/containerd/config.toml"
	} >"$dir/etc/containerd/config.toml"
	if ! grep -q "sandbox_image = \"$pause_ref\"" "$dir/etc/containerd/config.toml" ||
		! grep -q 'restrict_oom_score_adj = true' "$dir/etc/containerd/config.toml" ||
		grep -q 'proxy_plugins' "$dir/etc/containerd/config.toml"; then
		die "kind's containerd config.toml changed shape; update the edits in customize_node_rootfs"
	fi
	# kind's CNI plugins where containerd looks for them.
	mkdir -p "$dir/opt/cni/bin"
	for plugin in "${kind_cni_plugins[@]}"; do
		[[ -x "$dir/usr/lib/cni/$plugin" ]] || die "Debian's containernetworking-plugins has no $plugin"
		ln -sf "/usr/lib/cni/$plugin" "$dir/opt/cni/bin/"
	done
	# The StorageClass kind falls back to without this file, written so it does not warn.
	mkdir -p "$dir/kind/manifests"
	cat >"$dir/kind/manifests/default-storage.yaml" <<'YAML'
# host-path based default storage class (kind's fallback; no provisioner image needed)
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  namespace: kube-system
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
YAML
}

build_node_rootfs() {
	local json
	kind_module=$(cat "$node_bin/.kind.version" 2>/dev/null) || die "no $node_bin/.kind.version; run scripts/kind/build-node-binaries.sh"
	json=$(cd "$work_dir" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "$kind_module") ||
		die "could not get $kind_module from the Go module proxy"
	kind_files="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")/images/base/files"
	[[ -f "$kind_files/usr/local/bin/entrypoint" ]] || die "$kind_module has no images/base/files/usr/local/bin/entrypoint"
	pause_ref=${image_ref[pause]}
	node_rootfs=$(make_rootfs kind-node "$node_packages" customize_node_rootfs "$kind_module $pause_ref")
	node_rootfs_image="fakecloud/kind-node-rootfs:${node_rootfs##*-}"
	if image_exists "$node_rootfs_image"; then
		log "$node_rootfs_image already imported"
		return
	fi
	import_rootfs_image "$node_rootfs" "$node_rootfs_image" \
		--change 'ENV container=docker' --change 'STOPSIGNAL SIGRTMIN+3' \
		--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]'
	log "imported $node_rootfs_image"
}

# --- 4. the node image --------------------------------------------------------------------------------------

in_build() { docker exec "$build_container" "$@"; }
copy_in() {
	docker cp "$1" "$build_container:$2" >/dev/null || die "docker cp of $1 into the build container failed"
	in_build chown root:root "$2"
	in_build chmod 0755 "$2"
}

commit_node_image() {
	local ref imported missing=()
	build_container="fakecloud-node-build-$$"
	docker rm -f -v "$build_container" >/dev/null 2>&1 || true
	docker run -d --name "$build_container" --network none --security-opt seccomp=unconfined \
		--stop-signal SIGRTMIN+3 --entrypoint sleep "$node_rootfs_image" infinity >/dev/null ||
		die "could not start a build container from $node_rootfs_image"
	# Where kind's own node image build puts them (its kubelet unit runs /usr/bin/kubelet).
	copy_in "$node_bin/kubeadm" /usr/bin/kubeadm
	copy_in "$node_bin/kubelet" /usr/bin/kubelet
	copy_in "$cp_bin/kubectl" /usr/bin/kubectl
	copy_in "$node_bin/crictl" /usr/local/bin/crictl
	printf '%s' "$k8s_version" | docker exec -i "$build_container" sh -c 'cat >/kind/version'

	# containerd as kind's build runs it: just long enough to import the images.
	in_build bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
	# shellcheck disable=SC2016 # for the build container's shell
	in_build bash -c 'for _ in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && exec ctr version >/dev/null; sleep 0.2; done; exit 1' ||
		die "containerd did not start in the build container: $(in_build cat /tmp/containerd.log 2>&1 | tail -n 5)"
	docker save "${image_ref[@]}" |
		docker exec -i "$build_container" ctr --namespace=k8s.io images import \
			--label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null ||
		die "importing the kubeadm images into the node's containerd failed"
	imported=$(in_build ctr --namespace=k8s.io images ls -q)
	for ref in "${image_ref[@]}"; do
		grep -Fqx "$ref" <<<"$imported" || missing+=("$ref")
	done
	((${#missing[@]} == 0)) || die "the node's containerd lacks ${missing[*]} after the import"
	in_build pkill containerd
	# Stopped means gone or a zombie: the container's PID 1 (sleep) never reaps it.
	# shellcheck disable=SC2016 # for the build container's shell
	in_build bash -c 'for _ in $(seq 1 50); do ps -C containerd -o stat= | grep -qv "^Z" || exit 0; sleep 0.2; done; exit 1' ||
		die "containerd did not stop in the build container"
	in_build bash -c 'rm -rf /tmp/* /var/tmp/* /run/containerd'

	docker commit \
		--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
		--change 'ENV container=docker' \
		--change "LABEL $label_version=$k8s_version $label_inputs=$inputs_hash" \
		"$build_container" "$kind_node_image" >/dev/null || die "docker commit of the node image failed"
	docker rm -f -v "$build_container" >/dev/null
	build_container=""
}

# What earlier runs left: root filesystem images superseded by the current one, and the untagged remains of
# images this script rebuilt (only those carrying its label, never anyone else's).
prune_superseded_images() {
	local image
	while read -r image; do
		[[ "$image" == "$node_rootfs_image" ]] && continue
		log "removing the superseded $image"
		docker rmi "$image" >/dev/null 2>&1 || true
	done < <(docker image ls --format '{{.Repository}}:{{.Tag}}' fakecloud/kind-node-rootfs)
	docker image prune -f --filter "label=$label_inputs" >/dev/null 2>&1 || true
}

# --- main ---------------------------------------------------------------------------------------------------

((EUID == 0)) || die "run this as root: the root filesystems are made with debootstrap and chroot"
use_docker_engine
step "binaries (control plane and node)" build_binaries
read_kubeadm_images
log "kubeadm $k8s_version images: ${image_ref[*]}"

# Everything the image is made from: these scripts, the binaries, kubeadm's image list.
inputs_hash=$({
	cat "$kind_repo_root"/scripts/kind/{common,rootfs,node-image,base-image,build-node-binaries,k8s-ldflags}.sh \
		"$kind_repo_root/scripts/build-control-plane.sh"
	for bin in "$cp_bin"/{etcd,kube-apiserver,kube-controller-manager,kubectl} \
		"$node_bin"/{kubeadm,kubelet,kube-proxy,kube-scheduler,crictl,coredns}; do
		stat -c '%n %s %Y' "$bin"
	done
	printf '%s\n' "${image_ref[@]}"
} | hash_of)

if [[ "$(label_of "$kind_node_image" "$label_version")" == "$k8s_version" &&
	"$(label_of "$kind_node_image" "$label_inputs")" == "$inputs_hash" ]]; then
	log "$kind_node_image is up to date ($(docker image inspect -f '{{.Size}}' "$kind_node_image" | numfmt --to=iec))"
	exit 0
fi

mkdir -p "$cache_root/kind/$k8s_version"
work_dir=$(mktemp -d "$cache_root/kind/$k8s_version/.node-image.XXXXXX")
step "pause ${image_ref[pause]##*:} (static C)" build_pause
step "$base_image" bash "$kind_repo_root/scripts/kind/base-image.sh"
step "$iptables_base_image (kube-proxy's base)" build_iptables_base
step "kubeadm images" build_kubeadm_images
step "node root filesystem" build_node_rootfs
step "node image $kind_node_image" commit_node_image
prune_superseded_images
log "$kind_node_image ready: $(docker image inspect -f '{{.Size}}' "$kind_node_image" | numfmt --to=iec) (kind create cluster --image $kind_node_image)"
