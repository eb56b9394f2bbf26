#!/usr/bin/env bash
# Makes sure a Docker engine answers and the offline base image mlscope-base:bookworm exists, so the
# container tests can run. When the engine is down it installs Debian's docker.io (and debootstrap)
# if missing and starts dockerd the way this kind of machine allows: vfs storage, no iptables, no
# bridge (containers then run with `--network none`). The image itself is built by
# ops/images/base.sh. Silent and fast (< 2 s) when everything is already up; needs root otherwise.
set -euo pipefail

default_log=/var/log/mlscope-dockerd.log
# Without root the caller's shell opens the log, so it must be somewhere the caller can write.
[[ $EUID -eq 0 ]] || default_log=${TMPDIR:-/tmp}/mlscope-dockerd.log
readonly DOCKERD_LOG=${MLSCOPE_DOCKERD_LOG:-$default_log}
readonly DOCKERD_WAIT_SECONDS=60
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

say() { echo "docker: $*" >&2; }
die() { echo "docker: error: $*" >&2; exit 1; }

engine_up() { docker info >/dev/null 2>&1; }

ROOT=()  # the prefix that runs a command as root: nothing, or non-interactive sudo
need_root() {
  [[ $EUID -eq 0 ]] && return 0
  command -v sudo >/dev/null && sudo -n true 2>/dev/null \
    || die "$1 needs root (no passwordless sudo); start a Docker engine yourself and rerun"
  ROOT=(sudo -n)
}

install_missing_packages() {  # apt-get install only what is absent: the engine and debootstrap
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [[ ${#missing[@]} -eq 0 ]] && return 0
  need_root "installing ${missing[*]}"
  say "installing ${missing[*]} with apt-get"
  local log install=("${ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q
    --no-install-recommends "${missing[@]}")
  log=$(mktemp)
  if ! "${install[@]}" >"$log" 2>&1; then
    # A stale package index is the usual cause; refresh it once and retry.
    "${ROOT[@]}" apt-get update -q >>"$log" 2>&1 || true
    "${install[@]}" >>"$log" 2>&1 \
      || { tail -n 20 "$log" >&2; rm -f "$log"; die "apt-get install ${missing[*]} failed"; }
  fi
  rm -f "$log"
}

dockerd_running() {  # a dockerd that is still starting must not get a twin
  local pid
  pid=$(cat /var/run/docker.pid 2>/dev/null) || return 1
  # A stale pid file may name a recycled pid: check it really is a dockerd.
  [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]]
}

start_dockerd() {
  if dockerd_running; then
    say "dockerd is already starting; waiting for it"
  else
    need_root "starting dockerd"
    say "starting dockerd (vfs storage, no iptables, no bridge; log $DOCKERD_LOG)"
    # setsid + nohup: the daemon must outlive the `make test` that started it.
    "${ROOT[@]}" setsid nohup dockerd --storage-driver=vfs --iptables=false --bridge=none \
      >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  local deadline=$((SECONDS + DOCKERD_WAIT_SECONDS))
  until engine_up; do
    if ((SECONDS >= deadline)); then
      tail -n 20 "$DOCKERD_LOG" >&2 2>/dev/null || true
      die "dockerd did not answer 'docker info' in ${DOCKERD_WAIT_SECONDS} s (log: $DOCKERD_LOG)"
    fi
    sleep 0.5
  done
  say "engine is up"
}

command -v docker >/dev/null || install_missing_packages
if ! engine_up; then
  install_missing_packages
  start_dockerd
fi
bash "$here/../images/base.sh"
