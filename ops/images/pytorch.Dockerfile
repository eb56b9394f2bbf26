# The PyTorch predictor image: PyTorch and torchvision, and mlscope's predictor runtime; no
# Celery, Flask or database code. `mlscope image build pytorch` assembles the build context
# (never build this file from the repository root):
#   build/requirements/  runtime.requirements.txt + pytorch.requirements.txt (exact pins)
#   build/src/           pyproject.toml and the package folders it maps (mlscope, installed --no-deps)
#   build/ca/            the CA bundle pip must trust, only when --ca-bundle is given
# One COPY and one RUN per stage: the vfs storage driver keeps a full copy of the filesystem per
# layer. The CA bundle stays in the build stage, which `mlscope image build` removes afterwards.
# From PyPI that is the CUDA build (several GB); CI does not build it (see README.md here).
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG CA_BUNDLE=""
COPY build/ /tmp/build/
RUN set -eu; \
    if [ -n "$CA_BUNDLE" ]; then export PIP_CERT="/tmp/build/ca/$CA_BUNDLE"; fi; \
    python3 -m venv /opt/mlscope; \
    pip="/opt/mlscope/bin/pip install --no-cache-dir --progress-bar off --disable-pip-version-check"; \
    $pip -r /tmp/build/requirements/runtime.requirements.txt -r /tmp/build/requirements/pytorch.requirements.txt; \
    $pip --no-deps /tmp/build/src; \
    /opt/mlscope/bin/python -c "import mlscope.runtime.execute, torch, torchvision"

FROM ${BASE}
# Metadata first, the COPY last: the legacy builder makes a container for every step, and with vfs
# each one copies the whole filesystem (after the COPY, the venv too: 25-50 s a step for TensorFlow).
# `mlscope image build` passes the label values.
ARG MLSCOPE_VERSION=""
ARG MLSCOPE_FRAMEWORK_VERSION=""
ARG MLSCOPE_INPUTS=""
ARG MLSCOPE_BASE=""
LABEL org.opencontainers.image.title=mlscope-predictor-pytorch org.mlscope.framework=pytorch \
      org.mlscope.framework.version=$MLSCOPE_FRAMEWORK_VERSION \
      org.mlscope.inputs=$MLSCOPE_INPUTS org.mlscope.version=$MLSCOPE_VERSION org.mlscope.base=$MLSCOPE_BASE
# Any uid can run it (the runner may pass its own, so files in the io dir stay the worker's): HOME
# is /tmp, which every uid can write, for what a framework keeps in ~ (Keras writes ~/.keras).
ENV PATH=/opt/mlscope/bin:$PATH HOME=/tmp PYTHONUNBUFFERED=1 MLSCOPE_CACHE_DIR=/mlscope/cache
USER 10001:10001
WORKDIR /tmp
# No ENTRYPOINT or CMD of its own: the Docker runner names the command,
#   python -m mlscope.runtime.execute --job /mlscope/io/job.json --result /mlscope/io/result.json
COPY --from=build /opt/mlscope /opt/mlscope
