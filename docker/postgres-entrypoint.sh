#!/bin/sh
# The entrypoint of fakecloud/postgres (`fakecloud-kind postgres-image`): PostgreSQL 15 from Debian's packages,
# keeping the part of the official postgres image's contract the farm's manifests use (deploy/farm): on an empty
# PGDATA, a cluster whose superuser is POSTGRES_USER with POSTGRES_PASSWORD (scram-sha-256 over TCP) and a
# database POSTGRES_DB; then the server, as the postgres user, listening on every address.
set -eu
bin=/usr/lib/postgresql/15/bin
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
	echo "postgres-entrypoint: POSTGRES_PASSWORD is not set; set it (the farm's Secret has postgres-password)" >&2
	exit 1
fi
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	pwfile=$(mktemp)
	printf '%s' "$POSTGRES_PASSWORD" >"$pwfile"
	chown postgres "$pwfile"
	as_postgres "$bin/initdb" -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8
	rm -f "$pwfile"
	echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
	if [ "$POSTGRES_DB" != postgres ]; then
		# Over the local socket only, while nothing else can connect.
		as_postgres "$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=" -w start
		as_postgres "$bin/createdb" -U "$POSTGRES_USER" "$POSTGRES_DB"
		as_postgres "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop
	fi
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$PGDATA" -c listen_addresses='*'
