# The farm's image: `mlscope api` and `mlscope worker` (ONNX Runtime), one image for both services of
# ops/compose.yaml, which builds it from the repository root:
#
#   docker build -f ops/mlscope.Dockerfile -t mlscope-farm .
#   docker build -f ops/mlscope.Dockerfile --build-arg EXTRAS=farm,postgresql,onnxruntime,pytorch \
#       --build-arg PIP_ARGS="<your pip options>" -t mlscope-farm .
#
# BASE is any Debian-based image with python3 and its venv module (CI passes its offline
# mlscope-base:bookworm). PIP_ARGS passes extra pip options to every install (a wheel source of your
# own, for instance one with CPU-only PyTorch builds, which are far smaller). Behind a
# TLS-intercepting proxy, put its CA bundle at build-ca.crt in a build context of your own
# (ops/ci/compose.sh does): only the build stage sees it, and the repository's .dockerignore keeps
# such a file out of a context made from the checkout.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
ARG EXTRAS=farm,postgresql,onnxruntime
ARG PIP_ARGS=""
# Marks this stage's images, so a build script can remove them (they hold the CA bundle).
LABEL org.mlscope.stage=farm-build
COPY pyproject.toml constraints.txt README.md build-ca* /tmp/build/
COPY mlscope /tmp/build/mlscope
RUN set -eu; \
    if [ -f /tmp/build/build-ca.crt ]; then export PIP_CERT=/tmp/build/build-ca.crt; fi; \
    python3 -m venv /opt/mlscope; \
    /opt/mlscope/bin/pip install --no-cache-dir --progress-bar off --disable-pip-version-check ${PIP_ARGS} \
        -c /tmp/build/constraints.txt "/tmp/build[${EXTRAS}]"; \
    /opt/mlscope/bin/mlscope --help >/dev/null

FROM ${BASE}
# Metadata first, the COPY last: the legacy builder makes a container for every step, and with the vfs
# storage driver each one copies the whole filesystem (after the COPY, the venv too).
ARG MLSCOPE_INPUTS=""
LABEL org.opencontainers.image.title=mlscope-farm org.mlscope.inputs=$MLSCOPE_INPUTS
ENV PATH=/opt/mlscope/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    MLSCOPE_CACHE_DIR=/var/cache/mlscope
RUN useradd --system --create-home --uid 10001 mlscope \
    && mkdir -p /var/cache/mlscope && chown mlscope /var/cache/mlscope
USER mlscope
WORKDIR /home/mlscope
ENTRYPOINT ["mlscope"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
COPY --from=build /opt/mlscope /opt/mlscope
