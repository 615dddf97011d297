#!/usr/bin/env bash
# Makes sure the Docker engine has debian:bookworm-slim, the base our Dockerfiles and the kind images build
# FROM, without needing a registry:
#   - present already: nothing to do;
#   - else, unless FAKECLOUD_OFFLINE=1: `docker pull` it, briefly (where a registry answers, users get the real one);
#   - else: `debootstrap --variant=minbase bookworm` from this machine's own apt mirror (see rootfs.sh), cached
#     under $cache_root/kind/rootfs, and `docker import`ed under that name, so the same Dockerfiles build
#     offline and online.
# Uses DOCKER_HOST, or the private engine of scripts/kind/engine.sh when it runs. Needs root for debootstrap.
set -euo pipefail

kind_script=base-image
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/kind/rootfs.sh
source "$kind_repo_root/scripts/kind/rootfs.sh"

base_image=debian:bookworm-slim
pull_timeout=${FAKECLOUD_PULL_TIMEOUT:-30}

use_docker_engine

if image_exists "$base_image"; then
	log "$base_image is already in the engine"
	exit 0
fi

# The private engine of engine.sh is offline by design (its containers reach nothing outside): never pull there.
if [[ "${FAKECLOUD_OFFLINE:-0}" != 1 && "${DOCKER_HOST:-}" != "unix://$engine_socket" ]]; then
	log "pulling $base_image (at most ${pull_timeout}s; FAKECLOUD_OFFLINE=1 skips this)"
	if timeout "$pull_timeout" docker pull -q "$base_image" >/dev/null 2>&1; then
		log "pulled $base_image"
		exit 0
	fi
	log "no registry answered; building $base_image from the Debian mirror instead"
fi

rootfs=$(step "debootstrap $base_image root filesystem" make_rootfs debian-bookworm-slim "" "")
step "import $base_image" import_rootfs_image "$rootfs" "$base_image" --change 'CMD ["bash"]'
log "$base_image ready ($(docker image inspect -f '{{.Size}}' "$base_image" | numfmt --to=iec))"
