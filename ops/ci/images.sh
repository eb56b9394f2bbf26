#!/usr/bin/env bash
# Builds the predictor images the container tests run in (ONNX Runtime, OpenVINO, TensorFlow, MXNet, LiteRT,
# llama.cpp) on the offline base image mlscope-base:bookworm (made by ops/ci/docker.sh), through
# `mlscope image build`: pip inside the build reaches the index over the host's network, trusting
# the host's CA bundle (it passes a TLS-intercepting proxy here). An image whose inputs (Dockerfiles,
# pins, mlscope source, base image) are unchanged is not rebuilt: about 1 s when all are up to date.
# Each image builds on a deps image of its framework (the pins' venv), itself rebuilt only when the
# pins, ops/images/deps.Dockerfile or the base change: a change of mlscope's source reinstalls no
# framework.
# PyTorch's image is not built here: PyPI's torch is the multi-GB CUDA build (ops/images/README.md).
# llama.cpp's deps image installs llama-cpp-python from a wheel `mlscope image build` makes on the host
# (pip wheel: from pip's wheel cache once `make venv` has compiled it, else a compile, which needs a C++
# compiler and CMake here).
#
# Two images build at once (`--jobs`): one build's downloads and pip overlap the other's layer commits.
#
# Environment: MLSCOPE_CA_BUNDLE (default: the host's bundle, when it exists), MLSCOPE_CI_IMAGES
# (default "onnxruntime openvino tensorflow mxnet litert llamacpp") and MLSCOPE_IMAGE_JOBS (default 2).
set -euo pipefail

readonly BASE_IMAGE=mlscope-base:bookworm
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mlscope=$root/.venv/bin/mlscope
[[ -x $mlscope ]] || { echo "images: error: $mlscope is missing; run make venv" >&2; exit 1; }

args=(--base "$BASE_IMAGE" --network host --jobs "${MLSCOPE_IMAGE_JOBS:-2}")
ca_bundle=${MLSCOPE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[[ -f $ca_bundle ]] && args+=(--ca-bundle "$ca_bundle")
read -r -a frameworks <<<"${MLSCOPE_CI_IMAGES:-onnxruntime openvino tensorflow mxnet litert llamacpp}"

cd "$root"
exec "$mlscope" image build "${args[@]}" "${frameworks[@]}"
