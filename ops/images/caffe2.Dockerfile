# The Caffe2 predictor image: Caffe2 through torch 1.10.2 (the last wheel with its extension) on
# Python 3.9, and mlscope's predictor runtime; no Celery, Flask or database code.
# `mlscope image build caffe2` assembles the build context (never build this file from the
# repository root):
#   build/src/           pyproject.toml and the package folders it maps (mlscope, installed --no-deps)
# The build stage is the deps image (deps.Dockerfile: the venv with the pins of
# runtime.requirements.txt and caffe2.requirements.txt), passed as DEPS; it installs mlscope's
# source offline (no index, no build isolation), so a change of source rebuilds no framework.
# The base must have Python 3.9 (torch 1.10.2 has no wheel for a newer one): python:3.9-slim, or
# the offline mlscope-base:bullseye (`ops/images/base.sh --release bullseye`, Debian 11's Python
# 3.9) with --base. mlscope itself declares Python >= 3.10 for the whole package; its predictor
# runtime runs on 3.9, hence --ignore-requires-python. The Caffe2 nets are converted inside the
# container on first use (the host has no Caffe2 to do it); with the cache mounted read-only they
# are kept in memory only, so put converted nets into the cache first to keep fetch short.
# One COPY and one RUN per stage: the vfs storage driver keeps a full copy of the filesystem per
# layer. `mlscope image build` removes the build stage afterwards.
ARG BASE=python:3.9-slim

ARG DEPS

FROM ${DEPS} AS build
COPY build/ /tmp/build/
RUN set -eu; \
    python3 -c 'import sys; assert sys.version_info[:2] == (3, 9), "the base must have Python 3.9, not " + sys.version'; \
    /opt/mlscope/bin/pip install --no-cache-dir --progress-bar off --disable-pip-version-check \
        --no-index --no-deps --no-build-isolation --ignore-requires-python /tmp/build/src; \
    /opt/mlscope/bin/python -c "import mlscope.runtime.execute, mlscope.runtime.predictors.caffe2.predictor"

FROM ${BASE}
# Any uid can run it (the runner may pass its own, so files in the io dir stay the worker's): HOME
# is /tmp, which every uid can write.
ENV PATH=/opt/mlscope/bin:$PATH HOME=/tmp PYTHONUNBUFFERED=1 MLSCOPE_CACHE_DIR=/mlscope/cache
USER 10001:10001
WORKDIR /tmp
# The labels last but for the COPY: `mlscope image build` passes their values, which change with
# every build, so the steps above come from the build cache (each a full filesystem copy under vfs).
ARG MLSCOPE_VERSION=""
ARG MLSCOPE_FRAMEWORK_VERSION=""
ARG MLSCOPE_INPUTS=""
ARG MLSCOPE_BASE=""
ARG MLSCOPE_DEPS=""
LABEL org.mlscope.framework=caffe2 org.mlscope.framework.version=$MLSCOPE_FRAMEWORK_VERSION \
      org.mlscope.inputs=$MLSCOPE_INPUTS org.mlscope.version=$MLSCOPE_VERSION org.mlscope.base=$MLSCOPE_BASE \
      org.mlscope.deps=$MLSCOPE_DEPS
COPY --from=build /opt/mlscope /opt/mlscope
# No ENTRYPOINT or CMD of its own: the Docker runner names the command,
#   python -m mlscope.runtime.execute --job /mlscope/io/job.json --result /mlscope/io/result.json
