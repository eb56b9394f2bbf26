#!/usr/bin/env bash
# Builds the offline base image mlscope-base:bookworm (Debian 12 minbase + python3, python3-venv,
# ca-certificates, libgomp1, libquadmath0), or of another Debian release (bullseye: Python 3.9, which
# the Caffe2 image needs), without any image registry: debootstrap a root
# filesystem from the Debian mirror the host's apt already uses, cache it as a tarball, and
# `docker import` it. A lost image is
# re-imported from the cached tarball without a new debootstrap. Does nothing when the image exists.
#
#   ops/images/base.sh           ensure the image exists (silent when it does)
#   ops/images/base.sh --rebuild forget the cached root filesystem and image, build both again
#   ops/images/base.sh --release bullseye [--rebuild]   the same for mlscope-base:bullseye
#
# Environment: MLSCOPE_DEBIAN_MIRROR overrides the mirror read from /etc/apt; XDG_CACHE_HOME moves
# the cache (default ~/.cache/mlscope-ci).
set -euo pipefail

RELEASE=bookworm
REBUILD=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --rebuild) REBUILD=1; shift ;;
    --release) [[ $# -ge 2 && $2 =~ ^[a-z]+$ ]] || { echo "base image: error: --release needs a Debian codename" >&2; exit 1; }
               RELEASE=$2; shift 2 ;;
    *) echo "base image: error: unknown argument '$1' (only --rebuild, --release NAME)" >&2; exit 1 ;;
  esac
done
readonly RELEASE REBUILD
readonly IMAGE=mlscope-base:$RELEASE
# libgomp1, libquadmath0: MXNet's wheel loads them from the system (PyTorch, ONNX Runtime don't).
readonly PACKAGES=python3,python3-venv,ca-certificates,libgomp1,libquadmath0
readonly CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/mlscope-ci
# The package list is part of the name, so changing it never re-imports a stale root filesystem.
PACKAGES_HASH=$(echo "$PACKAGES" | sha256sum | cut -c1-8)
readonly ROOTFS_TAR=$CACHE_DIR/debian-$RELEASE-minbase-$PACKAGES_HASH.tar

say() { echo "base image: $*" >&2; }
die() { echo "base image: error: $*" >&2; exit 1; }

image_exists() {  # ... and was built from the current package list
  [[ $(docker image inspect --format '{{index .Config.Labels "org.mlscope.packages"}}' "$IMAGE" \
    2>/dev/null) == "$PACKAGES" ]]
}

debian_mirror() {  # the first apt source serving $RELEASE, else the host's own release's (one
  # Debian mirror serves every release: a bookworm host's sources name no bullseye line)
  if [[ -n ${MLSCOPE_DEBIAN_MIRROR:-} ]]; then echo "$MLSCOPE_DEBIAN_MIRROR"; return; fi
  local mirror="" release
  for release in "$RELEASE" $(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}"); do
    mirror=$(mirror_for "$release")
    [[ -z $mirror ]] || break
  done
  [[ -n $mirror ]] || die "no apt source for '$RELEASE' in /etc/apt; set MLSCOPE_DEBIAN_MIRROR"
  echo "$mirror"
}

mirror_for() {  # the first apt source serving release $1 (one-line or deb822 format), or nothing
  local release=$1 mirror=""
  if [[ -r /etc/apt/sources.list ]]; then
    mirror=$(awk -v release="$release" '
      $1 == "deb" { i = 2; if ($2 ~ /^\[/) while (i <= NF && $(i - 1) !~ /\]$/) i++
                    if ($(i + 1) == release) { print $i; exit } }' /etc/apt/sources.list)
  fi
  if [[ -z $mirror ]] && compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
    mirror=$(awk -v release="$release" '
      BEGIN { RS = ""; FS = "\n" }
      { uri = ""; ok = 0; off = 0; deb = 0
        for (n = 1; n <= NF; n++) {
          split($n, kv, ":[ \t]*"); key = tolower(kv[1])
          value = substr($n, length(kv[1]) + 2)
          if (key == "types" && value ~ /(^|[ \t])deb([ \t]|$)/) deb = 1
          if (key == "uris" && uri == "") {
            split(value, u, /[ \t]+/); uri = (u[1] == "" ? u[2] : u[1]) }
          if (key == "suites" && (" " value " ") ~ ("[ \t]" release "[ \t]")) ok = 1
          if (key == "enabled" && value ~ /no/) off = 1 }
        if (deb && ok && !off && uri != "") { print uri; exit } }' \
      /etc/apt/sources.list.d/*.sources)
  fi
  echo "$mirror"
}

ensure_debootstrap() {
  command -v debootstrap >/dev/null && return 0
  [[ $EUID -eq 0 ]] || die "debootstrap is missing and installing it needs root"
  say "installing debootstrap with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap \
    >/dev/null 2>&1 || die "apt-get install debootstrap failed"
}

build_rootfs_tarball() {  # debootstrap into a scratch dir next to the cache, then tar it atomically
  [[ $EUID -eq 0 ]] || die "debootstrap needs root"
  ensure_debootstrap
  local mirror scratch log
  mirror=$(debian_mirror)
  scratch=$(mktemp -d "$CACHE_DIR/rootfs.XXXXXX")
  log=$CACHE_DIR/debootstrap.log
  # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
  trap "rm -rf '$scratch' '$ROOTFS_TAR.partial'" EXIT
  say "debootstrap $RELEASE (minbase + $PACKAGES); log $log"
  debootstrap --variant=minbase --include="$PACKAGES" "$RELEASE" "$scratch/root" "$mirror" \
    >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "debootstrap failed (log: $log)"; }
  # The package cache and index only make the image bigger; apt inside it is not the point.
  rm -rf "$scratch/root/var/cache/apt/archives/"*.deb "$scratch/root/var/lib/apt/lists/"*
  tar -C "$scratch/root" --numeric-owner -cf "$ROOTFS_TAR.partial" .
  mv "$ROOTFS_TAR.partial" "$ROOTFS_TAR"
  find "$CACHE_DIR" -maxdepth 1 -name "debian-$RELEASE-minbase-*.tar" ! -path "$ROOTFS_TAR" -delete
  rm -rf "$scratch"
  trap - EXIT
}

import_image() {  # labels say when the root filesystem was built and which Debian point release
  local built debian_version outdated
  outdated=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
  built=$(date -u -r "$ROOTFS_TAR" +%Y-%m-%dT%H:%M:%SZ)
  debian_version=$(tar -xOf "$ROOTFS_TAR" ./etc/debian_version)
  say "importing $IMAGE (Debian $debian_version, built $built)"
  docker import \
    --change "LABEL org.opencontainers.image.created=$built" \
    --change "LABEL org.opencontainers.image.title=mlscope-base" \
    --change "LABEL org.debian.release=$RELEASE" \
    --change "LABEL org.debian.version=$debian_version" \
    --change "LABEL org.mlscope.packages=$PACKAGES" \
    --change 'ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    - "$IMAGE" <"$ROOTFS_TAR" >/dev/null || die "docker import of $ROOTFS_TAR failed"
  # vfs keeps a full copy per image: drop the one just replaced unless something still uses it.
  [[ -z $outdated ]] || docker image rm "$outdated" >/dev/null 2>&1 || true
}

if [[ $REBUILD == 1 ]]; then
  rm -f "$ROOTFS_TAR"
  docker image rm -f "$IMAGE" >/dev/null 2>&1 || true
fi

image_exists && exit 0
docker info >/dev/null 2>&1 || die "no Docker engine answers; run ops/ci/docker.sh"
mkdir -p "$CACHE_DIR"
# Two `make test` runs at once must not debootstrap twice into the same cache.
exec 9>"$CACHE_DIR/.lock"
flock 9
image_exists && exit 0
[[ -s $ROOTFS_TAR ]] || build_rootfs_tarball
import_image
