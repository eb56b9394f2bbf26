#!/usr/bin/env bash
# Builds the GPU check's wheelhouse (docs/gpu.md): mlscope's own dependencies, and what the check
# installs beside them (ops/ci/gpu-requirements.txt), as wheels for the GPU machine's
# Python (CPython 3.12 on x86-64 Linux), which reaches no package registry. PyTorch, its CUDA
# libraries and the frameworks come with that machine's image and are never in it. Versions follow
# constraints.txt; setuptools is there too, the build backend of mlscope's install from
# the checkout. Run here, where pip reaches its index: `make gpu-wheelhouse`.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
WHEELHOUSE=${MLSCOPE_GPU_WHEELHOUSE:-build/gpu-wheelhouse}
LIMIT_MB=60
# The GPU machine's interpreter (another version only to try the install on a machine of that one);
# manylinux up to glibc 2.28, which its image's system exceeds.
PYTHON_VERSION=${MLSCOPE_GPU_PYTHON_VERSION:-3.12}
TARGET=(--only-binary=:all: --implementation cp --python-version "$PYTHON_VERSION"
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

mapfile -t dependencies < <("$PYTHON" -c '
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
mapfile -t extra < <(grep -v '^\s*\(#\|$\)' ops/ci/gpu-requirements.txt)
requirements=("${dependencies[@]}" "${extra[@]}" "setuptools>=77")

rm -rf "$WHEELHOUSE"
mkdir -p "$WHEELHOUSE"
echo "gpu-wheelhouse: downloading ${requirements[*]}"
"$PYTHON" -m pip download --quiet --disable-pip-version-check "${TARGET[@]}" -c constraints.txt \
  -d "$WHEELHOUSE" "${requirements[@]}"

# Nothing of the GPU image's own stack may come along: it would replace the image's CUDA build.
stray=$(cd "$WHEELHOUSE" && ls | grep -E '^(torch|torchvision|triton|nvidia_(cu|nccl|nvjit|nvtx|cufft|curand))' || true)
if [ -n "$stray" ]; then
  echo "gpu-wheelhouse: refusing wheels of the GPU image's own stack: $stray" >&2
  exit 1
fi
size_mb=$(du -sm "$WHEELHOUSE" | cut -f1)
count=$(ls "$WHEELHOUSE"/*.whl | wc -l)
echo "gpu-wheelhouse: $count wheels, $(du -sh "$WHEELHOUSE" | cut -f1) in $WHEELHOUSE"
if [ "$size_mb" -gt "$LIMIT_MB" ]; then
  echo "gpu-wheelhouse: $size_mb MB is over the $LIMIT_MB MB it may take" >&2
  exit 1
fi
