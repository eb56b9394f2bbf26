#!/usr/bin/env bash
# Makes sure the services the test suite talks to are up, starting any that are down.
# PostgreSQL backs the store contract suite (database `test`, trust auth on 127.0.0.1:5432).
set -uo pipefail

wait_for() {  # wait_for NAME COMMAND...: retry for up to 30 s
  local name=$1; shift
  for _ in $(seq 1 60); do "$@" >/dev/null 2>&1 && { echo "services: $name is up"; return 0; }; sleep 0.5; done
  echo "services: $name did not come up" >&2; return 1
}

postgres_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
if ! postgres_up; then
  echo "services: starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null; then
    for version in $(ls /etc/postgresql 2>/dev/null); do
      pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    done
  fi
  wait_for PostgreSQL postgres_up || exit 1
else
  echo "services: PostgreSQL is up"
fi
