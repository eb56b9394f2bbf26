#!/usr/bin/env bash
# Makes sure the services the test suite talks to are up, starting any that are down:
# PostgreSQL (store contract suite: database `test`, trust auth on 127.0.0.1:5432), Redis (broker and
# agent registry, 127.0.0.1:6379) and RabbitMQ (the farm suite's second broker, 127.0.0.1:5672,
# guest/guest).
set -uo pipefail

wait_for() {  # wait_for NAME COMMAND...: retry for up to 60 s
  local name=$1; shift
  for _ in $(seq 1 120); do "$@" >/dev/null 2>&1 && { echo "services: $name is up"; return 0; }; sleep 0.5; done
  echo "services: $name did not come up" >&2; return 1
}

ensure() {  # ensure NAME CHECK START: start NAME with START when CHECK fails, then wait for CHECK
  local name=$1 check=$2 start=$3
  if $check; then echo "services: $name is up"; return 0; fi
  echo "services: starting $name"
  $start || true
  wait_for "$name" $check
}

postgres_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
postgres_start() {
  command -v pg_ctlcluster >/dev/null || return 1
  for version in $(ls /etc/postgresql 2>/dev/null); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  done
}

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
redis_start() {
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
}

rabbitmq_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && rabbitmqctl -q status >/dev/null 2>&1; }
rabbitmq_start() { rabbitmq-server -detached; }

status=0
ensure PostgreSQL postgres_up postgres_start || status=1
ensure Redis redis_up redis_start || status=1
ensure RabbitMQ rabbitmq_up rabbitmq_start || status=1
exit $status
