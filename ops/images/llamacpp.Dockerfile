# The llama.cpp predictor image: llama-cpp-python (llama.cpp built for any x86-64 CPU), and mlscope's
# predictor runtime; no Celery, Flask or database code. `mlscope image build llamacpp` assembles the
# build context (never build this file from the repository root):
#   build/src/           pyproject.toml and the package folders it maps (mlscope, installed --no-deps)
# The build stage is the deps image (deps.Dockerfile: the venv with the pins of
# runtime.requirements.txt and llamacpp.requirements.txt, llama-cpp-python from the wheel built on
# the host), passed as DEPS; it installs mlscope's source offline (no index, no build isolation), so
# a change of source rebuilds no framework.
# One COPY and one RUN per stage: the vfs storage driver keeps a full copy of the filesystem per
# layer. `mlscope image build` removes the build stage afterwards.
# No gguf, torch or transformers: the GGUF file is written on the host, at admission, into the model
# cache. llama.cpp loads libgomp (OpenMP) from the system. The build stage copies it next to the venv,
# so the final stage needs nothing from the base image but Python (mlscope-base:bookworm has it).
ARG BASE=python:3.11-slim

ARG DEPS

FROM ${DEPS} AS build
COPY build/ /tmp/build/
RUN set -eu; \
    /opt/mlscope/bin/pip install --no-cache-dir --progress-bar off --disable-pip-version-check \
        --no-index --no-deps --no-build-isolation /tmp/build/src; \
    mkdir -p /opt/mlscope/lib/system; \
    path=$(ldconfig -p | awk '$1 == "libgomp.so.1" { print $NF; exit }'); \
    if [ -z "$path" ]; then echo "the base image lacks libgomp.so.1: use a base with libgomp1" >&2; exit 1; fi; \
    cp -L "$path" /opt/mlscope/lib/system/; \
    export LD_LIBRARY_PATH=/opt/mlscope/lib/system; \
    /opt/mlscope/bin/python -c "import mlscope.runtime.execute, llama_cpp; llama_cpp.llama_print_system_info()"

FROM ${BASE}
# Metadata first, the COPY last: the legacy builder makes a container for every step, and with vfs
# each one copies the whole filesystem (after the COPY, the venv too: 25-50 s a step for TensorFlow).
# Any uid can run it (the runner may pass its own, so files in the io dir stay the worker's): HOME
# is /tmp, which every uid can write, for what a framework keeps in ~ (Keras writes ~/.keras).
ENV PATH=/opt/mlscope/bin:$PATH HOME=/tmp PYTHONUNBUFFERED=1 MLSCOPE_CACHE_DIR=/mlscope/cache \
    LD_LIBRARY_PATH=/opt/mlscope/lib/system
USER 10001:10001
WORKDIR /tmp
# The labels last but for the COPY: `mlscope image build` passes their values, which change with
# every build, so the steps above come from the build cache (each a full filesystem copy under vfs).
ARG MLSCOPE_VERSION=""
ARG MLSCOPE_FRAMEWORK_VERSION=""
ARG MLSCOPE_INPUTS=""
ARG MLSCOPE_BASE=""
ARG MLSCOPE_DEPS=""
LABEL org.opencontainers.image.title=mlscope-predictor-llamacpp org.mlscope.framework=llamacpp \
      org.mlscope.framework.version=$MLSCOPE_FRAMEWORK_VERSION \
      org.mlscope.inputs=$MLSCOPE_INPUTS org.mlscope.version=$MLSCOPE_VERSION org.mlscope.base=$MLSCOPE_BASE \
      org.mlscope.deps=$MLSCOPE_DEPS
# No ENTRYPOINT or CMD of its own: the Docker runner names the command,
#   python -m mlscope.runtime.execute --job /mlscope/io/job.json --result /mlscope/io/result.json
COPY --from=build /opt/mlscope /opt/mlscope
