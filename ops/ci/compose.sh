#!/usr/bin/env bash
# Makes the compose stack (ops/compose.yaml) startable here, for tests/integration/test_compose_stack.py:
# installs Debian's docker-compose (1.29; this engine has no compose plugin) when missing, and builds
# the stack's images on the offline base mlscope-base:bookworm (made by ops/ci/docker.sh), tagged as
# the compose file names them. pip and apt inside a build use the host's network; pip trusts the
# host's CA bundle (it passes a TLS-intercepting proxy here), which goes into a temporary build context
# and the build stage only, never into the image. An image whose inputs (its Dockerfile and context,
# the base image's id) are unchanged is not rebuilt: about 1 s when all are up to date.
#
# Environment: MLSCOPE_CA_BUNDLE (default: the host's bundle, when it exists).
set -euo pipefail

readonly BASE_IMAGE=mlscope-base:bookworm
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ca_bundle=${MLSCOPE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

say() { echo "compose: $*" >&2; }
die() { echo "compose: error: $*" >&2; exit 1; }

install_docker_compose() {
  command -v docker-compose >/dev/null && return 0
  [[ $EUID -eq 0 ]] || die "docker-compose is missing and installing it needs root"
  say "installing docker-compose with apt-get"
  local log install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
    docker-compose)
  log=$(mktemp)
  if ! "${install[@]}" >"$log" 2>&1; then
    apt-get update -q >>"$log" 2>&1 || true  # a stale package index is the usual cause
    "${install[@]}" >>"$log" 2>&1 || { tail -n 20 "$log" >&2; rm -f "$log"; die "apt-get install failed"; }
  fi
  rm -f "$log"
}

files_of() {  # the files under the paths given (relative to $root), as a build context holds them
  (cd "$root" && find "$@" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z)
}

inputs_of() {  # sha256 over the files' paths and bytes, and the base image's id
  local base_id
  base_id=$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE") \
    || die "no image $BASE_IMAGE: run ops/ci/docker.sh"
  { (cd "$root" && files_of "$@" | xargs -0 sha256sum); echo "$BASE_IMAGE@$base_id"; } \
    | sha256sum | cut -c1-64
}

up_to_date() {  # image $1 carries the inputs hash $2
  [[ $(docker image inspect --format '{{index .Config.Labels "org.mlscope.inputs"}}' "$1" \
    2>/dev/null) == "$2" ]]
}

build() {  # build() IMAGE INPUTS CONTEXT DOCKERFILE: a build on the base, logged, quiet on success
  local image=$1 inputs=$2 context=$3 dockerfile=$4 log outdated
  outdated=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
  log=$(mktemp)
  say "building $image on $BASE_IMAGE (its inputs changed)"
  if ! docker build --network host --build-arg "BASE=$BASE_IMAGE" --build-arg "MLSCOPE_INPUTS=$inputs" \
      -f "$context/$dockerfile" -t "$image" "$context" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    rm -f "$log"
    remove_build_stages
    die "docker build of $image failed"
  fi
  rm -f "$log"
  remove_build_stages
  # vfs keeps a full copy per image: drop the one just replaced unless a container still uses it.
  [[ -z $outdated ]] || docker image rm "$outdated" >/dev/null 2>&1 || true
}

remove_build_stages() {  # the farm image's build stage: it held the CA bundle, and under vfs it is big
  local ids
  ids=$(docker image ls --all --quiet --filter label=org.mlscope.stage=farm-build | sort -u)
  # shellcheck disable=SC2086  # one id a word
  [[ -z $ids ]] || docker image rm $ids >/dev/null 2>&1 || true
}

build_farm() {  # the API's and the worker's image, from a temporary copy of what its Dockerfile copies
  local paths=(pyproject.toml constraints.txt README.md mlscope ops/mlscope.Dockerfile) inputs context
  inputs=$(inputs_of "${paths[@]}")
  up_to_date mlscope-farm "$inputs" && return 0
  context=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
  trap "rm -rf '$context'" EXIT
  files_of "${paths[@]}" | (cd "$root" && tar --null -T - -cf -) | tar -C "$context" -xf -
  [[ -f $ca_bundle ]] && cp "$ca_bundle" "$context/build-ca.crt"
  build mlscope-farm "$inputs" "$context" ops/mlscope.Dockerfile
  rm -rf "$context"
  trap - EXIT
}

build_service() {  # build_service NAME FILE...: mlscope-NAME from ops/stack/NAME.Dockerfile (no pip, no CA)
  local name=$1 inputs
  shift
  inputs=$(inputs_of "$@")
  up_to_date "mlscope-$name" "$inputs" && return 0
  build "mlscope-$name" "$inputs" "$root/ops/stack" "$name.Dockerfile"
}

install_docker_compose
build_service redis ops/stack/redis.Dockerfile
build_service postgres ops/stack/postgres.Dockerfile ops/stack/postgres-entrypoint.sh
build_farm
