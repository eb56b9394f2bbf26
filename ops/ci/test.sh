#!/usr/bin/env bash
# `make test` after the virtual environment: the services, lint and types, then every test, with the
# Docker engine, its base image, the predictor images and the compose stack's images (ops/ci/docker.sh,
# images.sh, compose.sh) made in the background meanwhile. On a fresh machine those take about ten
# minutes, nearly all of it waiting on downloads and the engine's disk, and no test but the `docker`
# ones needs them: so the tests that need no engine run first, beside the build, then the `docker`
# ones once it is done, then the `quiet` ones alone (they hold the tool's timing to a known truth, so
# nothing may run beside them). When the images are up to date the build takes seconds.
#
# The run fails when the build fails (its log's tail is printed) or any test fails; the 25 slowest
# tests of the parallel runs are printed last (ops/ci/slowest.py).
#
# Environment: TEST_WORKERS (pytest-xdist workers, default 2), MAKE (the make that runs lint and
# typecheck), and what docker.sh, images.sh and compose.sh read.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
python=.venv/bin/python
workers=${TEST_WORKERS:-2}

# First, alone: both may install Debian packages, and apt takes one installer at a time.
bash ops/ci/services.sh
bash ops/ci/browser.sh

work=$(mktemp -d)
build_log=$work/images.log
cleanup() {
  [[ -n ${builder:-} ]] && kill -- "-$builder" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# Its own process group (set -m), so that an early failure here ends the whole build with it.
set -m
(bash ops/ci/docker.sh && bash ops/ci/images.sh && bash ops/ci/compose.sh) >"$build_log" 2>&1 &
builder=$!
set +m
echo "images: the Docker engine and the images are being made in the background (log shown when done)"

"${MAKE:-make}" --no-print-directory lint typecheck

pytest=("$python" -m pytest -q)
"${pytest[@]}" -n "$workers" --dist loadscope -m "not quiet and not docker" --junitxml "$work/parallel.xml"

started=$(date +%s)
if ! wait "$builder"; then
  builder=
  tail -n 40 "$build_log" >&2
  echo "images: error: the Docker engine or an image could not be made (above: the log's tail)" >&2
  exit 1
fi
builder=
# What was made, without the builds' step-by-step output.
grep -E '^(docker|base image|image |compose):' "$build_log" || true
echo "images: ready ($(($(date +%s) - started)) s waited after the tests that need no engine)"

"${pytest[@]}" -n "$workers" --dist loadscope -m "docker and not quiet" --junitxml "$work/docker.xml"
"${pytest[@]}" -n 0 -m quiet
"$python" ops/ci/slowest.py 25 "$work/parallel.xml" "$work/docker.xml"
