#!/bin/sh
# Start PostgreSQL on $PGDATA; on the first start (an empty data directory) make it with the role
# POSTGRES_USER (password POSTGRES_PASSWORD) and the database POSTGRES_DB. Listens on POSTGRES_LISTEN
# (default every address of the container) port POSTGRES_PORT (default 5432).
set -eu
user=${POSTGRES_USER:-mlscope}
database=${POSTGRES_DB:-mlscope}
port=${POSTGRES_PORT:-5432}
listen=${POSTGRES_LISTEN:-*}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "${POSTGRES_PASSWORD:-}" ] || { echo "postgres: set POSTGRES_PASSWORD" >&2; exit 1; }
  password_file=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$password_file"
  # Inside the container the socket trusts its own user; over TCP a password is asked for.
  initdb -D "$PGDATA" -U "$user" --pwfile="$password_file" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$password_file"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$database" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -k /tmp" -w start >/dev/null
    psql -h /tmp -U "$user" -d postgres -v ON_ERROR_STOP=1 -q -c "CREATE DATABASE \"$database\""
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
fi
exec postgres -D "$PGDATA" -p "$port" -c listen_addresses="$listen" -k /var/run/postgresql
