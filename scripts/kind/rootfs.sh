# shellcheck shell=bash
# Sourced (not run), after common.sh, by base-image.sh and node-image.sh: Debian root filesystems made with
# `debootstrap --variant=minbase` from the machine's own apt mirror, cached under $cache_root/kind/rootfs, and
# the Docker engine those scripts import them into. No registry and no mirror host is named here: the mirror
# is whatever this machine's apt already uses (FAKECLOUD_DEBIAN_MIRROR overrides it).
# shellcheck disable=SC2154 # cache_root and engine_socket come from common.sh

debian_suite=bookworm
rootfs_cache="$cache_root/kind/rootfs"

# Prints the first http(s) URI this machine's apt sources use for $debian_suite itself (not -updates or
# -security), from one-line .list files or deb822 .sources files.
apt_mirror() {
	local f uri=""
	if [[ -n "${FAKECLOUD_DEBIAN_MIRROR:-}" ]]; then
		printf '%s\n' "$FAKECLOUD_DEBIAN_MIRROR"
		return
	fi
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f "$f" ]] || continue
		# deb [options] URI suite components...
		uri=$(awk -v suite="$debian_suite" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i + 1) == suite && $i ~ /^https?:\/\//) { print $i; exit }
			}' "$f")
		[[ -n "$uri" ]] && break
	done
	if [[ -z "$uri" ]]; then
		for f in /etc/apt/sources.list.d/*.sources; do
			[[ -f "$f" ]] || continue
			# Paragraphs of "Field: value" lines; a paragraph with Enabled: no is skipped.
			uri=$(awk -v suite="$debian_suite" '
				BEGIN { RS = ""; FS = "\n" }
				{
					types = ""; uris = ""; suites = ""; enabled = "yes"
					for (i = 1; i <= NF; i++) {
						if ($i ~ /^#/ || !match($i, /^[A-Za-z-]+:/)) continue
						key = tolower(substr($i, 1, RLENGTH - 1)); val = substr($i, RLENGTH + 1)
						gsub(/^[ \t]+|[ \t]+$/, "", val)
						if (key == "types") types = val
						else if (key == "uris") uris = val
						else if (key == "suites") suites = val
						else if (key == "enabled") enabled = tolower(val)
					}
					if (enabled == "no" || (" " types " ") !~ / deb / || (" " suites " ") !~ (" " suite " ")) next
					n = split(uris, u, /[ \t]+/)
					for (j = 1; j <= n; j++) if (u[j] ~ /^https?:\/\//) { print u[j]; exit }
				}' "$f")
			[[ -n "$uri" ]] && break
		done
	fi
	[[ -n "$uri" ]] || die "found no http(s) Debian mirror for '$debian_suite' in /etc/apt/sources.list or /etc/apt/sources.list.d/*.{list,sources}.
Add the mirror this machine installs packages from there, or set FAKECLOUD_DEBIAN_MIRROR to its URL."
	printf '%s\n' "$uri"
}

ensure_debootstrap() {
	command -v debootstrap >/dev/null 2>&1 && return
	((EUID == 0)) || die "debootstrap is not installed; install it (apt-get install debootstrap) or run this script as root"
	command -v apt-get >/dev/null 2>&1 || die "debootstrap is not installed and there is no apt-get to install it with; install debootstrap"
	log "installing debootstrap with apt-get"
	apt-get update -qq >&2 || die "apt-get update failed; check this machine's apt sources"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2 ||
		die "apt-get install debootstrap failed"
}

# Runs a command inside a root filesystem with a clean environment.
in_rootfs() {
	local dir=$1
	shift
	chroot "$dir" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

# Unmounts whatever is still mounted below a directory (an interrupted debootstrap leaves /proc and /sys
# mounted in its target), deepest first, so removing the directory never reaches into them.
unmount_below() {
	local target
	while read -r target; do
		umount -l "$target" 2>/dev/null || true
	done < <(awk -v d="$1/" 'index($2 "/", d) == 1 { print $2 }' /proc/self/mounts | sort -r)
}

# make_rootfs NAME PACKAGES CUSTOMIZE [KEY]
#   Prints the directory of a minbase $debian_suite root filesystem with PACKAGES (comma-separated, may be
#   empty) and their dependencies, after CUSTOMIZE (a function, called with the directory, may be "") has run.
#   Cached as $rootfs_cache/NAME-<hash of suite, packages, CUSTOMIZE's body and KEY>; older NAME-* are removed.
make_rootfs() {
	local name=$1 packages=$2 customize=$3 key=${4:-} hash dir tmp mirror old
	((EUID == 0)) || die "building a root filesystem with debootstrap needs root"
	hash=$({
		printf '%s\n' "$debian_suite" "$packages" "$key"
		[[ -z "$customize" ]] || declare -f "$customize"
		declare -f finish_rootfs
	} | sha256sum | cut -c1-12)
	dir="$rootfs_cache/$name-$hash"
	if [[ -f "$dir.complete" ]]; then
		log "root filesystem $name already built: $dir"
		printf '%s\n' "$dir"
		return
	fi
	ensure_debootstrap
	mirror=$(apt_mirror)
	mkdir -p "$rootfs_cache"
	tmp=$(mktemp -d "$rootfs_cache/.$name.XXXXXX")
	chmod 0755 "$tmp" # it becomes the image's /
	# shellcheck disable=SC2064 # expand $tmp now: it is local
	trap "unmount_below '$tmp'; rm -rf --one-file-system '$tmp'" EXIT
	log "debootstrap --variant=minbase $debian_suite ${packages:+(with $packages) }from $mirror (log: $rootfs_cache/$name.debootstrap.log)"
	if ! debootstrap --variant=minbase --components=main ${packages:+--include="$packages"} \
		"$debian_suite" "$tmp" "$mirror" >"$rootfs_cache/$name.debootstrap.log" 2>&1; then
		tail -n 20 "$rootfs_cache/$name.debootstrap.log" >&2
		die "debootstrap failed (last lines above; all of it in $rootfs_cache/$name.debootstrap.log). Check that $mirror answers (apt-get update) and that the packages exist in $debian_suite."
	fi
	# stdout carries only the directory printed at the end
	[[ -z "$customize" ]] || "$customize" "$tmp" >&2
	finish_rootfs "$tmp" >&2
	for old in "$rootfs_cache/$name"-*; do
		[[ -e "$old" && "$old" != "$dir" && "$old" != "$dir.complete" ]] || continue
		log "removing an older root filesystem: $old"
		unmount_below "$old"
		rm -rf --one-file-system "$old"
	done
	mv "$tmp" "$dir"
	trap - EXIT
	touch "$dir.complete"
	log "root filesystem $name ready: $dir ($(du -sh "$dir" | cut -f1))"
	printf '%s\n' "$dir"
}

# What debian:*-slim leaves out, and nothing of the build machine: its resolv.conf and host name (Docker
# provides both at run time), apt's downloaded lists, logs, docs and the device nodes debootstrap made.
finish_rootfs() {
	local dir=${1:?}
	in_rootfs "$dir" apt-get clean
	rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/debconf/*-old \
		"$dir"/var/log/* "$dir"/tmp/* "$dir"/var/tmp/* \
		"$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* \
		"${dir:?}"/dev/* "$dir"/etc/hostname "$dir"/etc/machine-id "$dir"/var/lib/dbus/machine-id
	: >"$dir/etc/resolv.conf"
	# systemd and others expect /etc/machine-id to exist (empty = generate at first boot).
	: >"$dir/etc/machine-id"
}

# Imports a root filesystem as a Docker image: import_rootfs_image DIR TAG [docker import --change args...].
import_rootfs_image() {
	local dir=$1 tag=$2
	shift 2
	tar --numeric-owner -C "$dir" -c . | docker import "$@" - "$tag" >/dev/null ||
		die "docker import of $dir as $tag failed"
}

# Points docker at the engine to use: DOCKER_HOST if set, else the project's private engine when it runs
# (scripts/kind/engine.sh), else the default. Dies with what to do when no engine answers.
use_docker_engine() {
	command -v docker >/dev/null 2>&1 || die "no 'docker' command on PATH; the kind images need a Docker client and engine"
	if [[ -z "${DOCKER_HOST:-}" && -S "$engine_socket" ]]; then
		export DOCKER_HOST="unix://$engine_socket"
	fi
	docker info >/dev/null 2>&1 || die "no Docker engine answers${DOCKER_HOST:+ at $DOCKER_HOST}.
Start the project's private engine and point docker at it:
  bash scripts/kind/engine.sh start && export DOCKER_HOST=unix://$engine_socket"
	log "using the Docker engine at ${DOCKER_HOST:-the default socket} ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
