#!/usr/bin/env bash
# Entry point of docker/standins/postgres.Dockerfile: on an empty data folder, initdb with the official image's
# variables (superuser POSTGRES_USER with POSTGRES_PASSWORD, database POSTGRES_DB, password logins over TCP), then
# PostgreSQL in the foreground as user postgres with the command's arguments.
set -euo pipefail
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
[ "${1:-postgres}" = postgres ] && shift $(($# > 0 ? 1 : 0))

mkdir -p "$PGDATA"
chown postgres:postgres "$PGDATA"
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?the stand-in, like the official image, needs POSTGRES_PASSWORD}"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  runuser -u postgres -- initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo 'host all all all scram-sha-256' >>"$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\"" | runuser -u postgres -- postgres --single -D "$PGDATA" postgres >/dev/null
  fi
fi
exec runuser -u postgres -- postgres -D "$PGDATA" "$@"
