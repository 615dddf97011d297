#!/usr/bin/env bash
# The project's own images for the kind path: fakecloud/emulator, fakecloud/ccm and fakecloud/vpc-router (tag
# `dev`, or FAKECLOUD_IMAGE_TAG), fakecloud/agnhost (upstream's e2e test server, built by
# build-node-binaries.sh, which runs first), and with FAKECLOUD_KIND_CCM=upstream fakecloud/upstream-ccm (the Go
# binary of scripts/build-upstream-ccm.sh). The Rust binaries are built on the host (release profile, or
# FAKECLOUD_IMAGE_PROFILE=dev for a quicker debug build) and staged into a small build context per image, so the
# Dockerfiles in docker/ download nothing: they build the same offline (on the debootstrap base of
# base-image.sh) and online. Needs DOCKER_HOST pointing at an engine (engine.sh env).
set -euo pipefail
kind_script=images
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/kind/rootfs.sh
source "$kind_repo_root/scripts/kind/rootfs.sh"

tag=${FAKECLOUD_IMAGE_TAG:-dev}
# image name -> binary it carries
declare -A binaries=([emulator]=fakecloud [ccm]=fakecloud-ccm [vpc-router]=fakecloud-vpc-router)
stage_root="$kind_run_root/image-context"
# Every image built here carries this label: what a rebuild leaves untagged (the old binary's layer) is pruned
# by it, and never anyone else's image. Without that, each run with a new binary left its old image behind in the
# engine's data-root, and the disk filled over repeated runs.
label=org.fakecloud.image

bash "$(dirname "${BASH_SOURCE[0]}")/base-image.sh"

# FAKECLOUD_IMAGE_PREBUILT=1: the caller has just built them (CI, before its tests' build starts beside the kind
# path; cargo would wait for that build's lock only to find nothing to do).
if [[ -n "${FAKECLOUD_IMAGE_PREBUILT:-}" ]]; then
	for name in "${!binaries[@]}"; do
		[[ -x "$image_target_dir/${binaries[$name]}" ]] ||
			die "FAKECLOUD_IMAGE_PREBUILT is set, and $image_target_dir/${binaries[$name]} is not built"
	done
	log "using ${binaries[*]} as built in $image_target_dir (FAKECLOUD_IMAGE_PREBUILT)"
else
	bins=()
	for name in "${!binaries[@]}"; do bins+=(--bin "${binaries[$name]}"); done
	step "building ${binaries[*]} ($image_profile profile)" \
		cargo build --locked --quiet --profile "$image_profile" "${bins[@]}" --manifest-path "$kind_repo_root/Cargo.toml"
fi

# An image of one prebuilt binary: NAME, the binary's path (staged as its file name), and optionally a
# directory staged beside it as cni-plugins/.
image_of() {
	local name=$1 bin=$2 plugins=${3:-} context="$stage_root/$1"
	local staged="$context/${bin##*/}"
	rm -rf "$context"
	mkdir -p "$context"
	if [[ -n "$plugins" ]]; then cp -r "$plugins" "$context/cni-plugins"; fi
	# Without its debug info (symbols stay, so a backtrace still names functions): a debug build's binary is
	# mostly DWARF, and every kind node holds each image twice (its layers and the unpacked copy).
	objcopy --strip-debug "$bin" "$staged"
	# --network none: nothing in these Dockerfiles may need a network, offline or not.
	step "building image fakecloud/$name:$tag ($(du -m "$staged" | cut -f1) MB binary)" \
		docker build --quiet --network none --label "$label=$name" -f "$kind_repo_root/docker/$name.Dockerfile" \
		-t "fakecloud/$name:$tag" "$context" >/dev/null
}

# The VPC router's image carries the CNI plugins its config uses, for the nodes that lack them (kindest/node has
# no bridge), built by build-node-binaries.sh.
[[ -d "$kind_bin_dir/cni" ]] || die "$kind_bin_dir/cni is missing: run scripts/kind/build-node-binaries.sh first (make kind-up does)"
for name in "${!binaries[@]}"; do
	if [[ "$name" == vpc-router ]]; then
		image_of "$name" "$image_target_dir/${binaries[$name]}" "$kind_bin_dir/cni"
	else
		image_of "$name" "$image_target_dir/${binaries[$name]}"
	fi
done

# agnhost's base: upstream's image is alpine with `bind-tools curl netcat-openbsd iproute2 iperf bash
# util-linux-misc socat`, and its specs exec curl, wget, nc, dig and ip in agnhost pods (the LoadBalancers specs
# of scripts/e2e-kind-lb.sh among them), so the binary alone is not enough. The same tools from Debian
# (dnsutils is bind9-dnsutils; wget and procps because specs call them too), as a debootstrap root filesystem
# (rootfs.sh: cached, no registry), imported once per root filesystem: its directory's name, which carries the
# hash of the packages and of the customizing below, is the label that says the image is current.
agnhost_packages=bash,bind9-dnsutils,curl,iperf,iproute2,netcat-openbsd,procps,socat,wget
agnhost_base=fakecloud/agnhost-base:$debian_suite
# What upstream's Dockerfile adds beside the packages: /uploads (netexec's upload target), porter's TLS pair,
# the agnhost-2 name (entrypoint tests), and the user and group the image-defined-user specs look for.
agnhost_customize() {
	local dir=$1 src
	src=$(cd "$k8s_module_dir" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost
	[[ -f "$src/porter/localhost.crt" ]] || die "agnhost's sources not found at $src (run scripts/kind/build-node-binaries.sh first)"
	mkdir -p "$dir/uploads"
	install -m 0644 "$src/porter/localhost.crt" "$src/porter/localhost.key" "$dir/"
	ln -sf agnhost "$dir/agnhost-2"
	in_rootfs "$dir" groupadd -g 50000 group-defined-in-image
	in_rootfs "$dir" useradd -u 1000 -M -G group-defined-in-image user-defined-in-image
	# Only what the tools need at run time: locales and translations are most of what is left to drop.
	rm -rf "$dir"/usr/share/locale/* "$dir"/usr/share/i18n/*
}
agnhost_base_image() {
	local rootfs current
	rootfs=$(make_rootfs agnhost "$agnhost_packages" agnhost_customize "$k8s_version")
	current=$(docker image inspect -f '{{index .Config.Labels "org.fakecloud.rootfs"}}' "$agnhost_base" 2>/dev/null) || true
	if [[ "$current" == "${rootfs##*/}" ]]; then
		log "$agnhost_base is current (${rootfs##*/})"
		return
	fi
	import_rootfs_image "$rootfs" "$agnhost_base" --change "LABEL $label=agnhost-base" \
		--change "LABEL org.fakecloud.rootfs=${rootfs##*/}" \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
	log "$agnhost_base imported from $rootfs ($(docker image inspect -f '{{.Size}}' "$agnhost_base" | numfmt --to=iec))"
}

agnhost="$kind_bin_dir/agnhost"
[[ -x "$agnhost" ]] || die "$agnhost is missing: run scripts/kind/build-node-binaries.sh first (make kind-up does)"
step "agnhost's base image $agnhost_base (Debian with upstream's tools)" agnhost_base_image
image_of agnhost "$agnhost"
# Upstream's CCM only where it is the one deployed (FAKECLOUD_KIND_CCM=upstream): its Go build is the slow part.
if [[ "$kind_ccm" == upstream ]]; then
	upstream_ccm=$(bash "$kind_repo_root/scripts/build-upstream-ccm.sh" | tail -n 1)
	image_of upstream-ccm "$upstream_ccm"
fi
rm -rf "$stage_root"
docker image prune -f --filter "label=$label" >/dev/null
