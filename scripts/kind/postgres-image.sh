#!/usr/bin/env bash
# fakecloud/postgres:dev, the shared cloud's database on the offline kind path (deploy/farm/kind, `make
# farm-kind`): PostgreSQL 15 from Debian's packages, debootstrapped from this machine's apt mirror like the base
# image (cached, keyed by its packages and entrypoint), with docker/postgres-entrypoint.sh, which keeps the
# official image's POSTGRES_* contract. Where a registry answers, deploy/farm/base uses the official
# postgres:15-bookworm instead. Needs root (debootstrap) and an engine (DOCKER_HOST, or the private one).
set -euo pipefail
kind_script=postgres-image
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/kind/rootfs.sh
source "$kind_repo_root/scripts/kind/rootfs.sh"

image=fakecloud/postgres:dev
entrypoint="$kind_repo_root/docker/postgres-entrypoint.sh"

use_docker_engine
if image_exists "$image"; then
	log "$image is already in the engine"
	exit 0
fi

customize_postgres_rootfs() {
	local dir=$1
	# Debian's package made a cluster of its own when it was installed; the entrypoint makes the farm's.
	rm -rf "$dir"/var/lib/postgresql/15/main "$dir"/etc/postgresql/15/main
	install -m 0755 "$entrypoint" "$dir/usr/local/bin/postgres-entrypoint"
}

rootfs=$(step "debootstrap a PostgreSQL 15 root filesystem" \
	make_rootfs fakecloud-postgres postgresql-15 customize_postgres_rootfs "$(sha256sum <"$entrypoint")")
step "import $image" import_rootfs_image "$rootfs" "$image" \
	--change 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]' \
	--change 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'EXPOSE 5432'
log "$image ready ($(docker image inspect -f '{{.Size}}' "$image" | numfmt --to=iec))"
