# The dependencies of a predictor image, one file for every framework: the venv /opt/mlscope with
# runtime.requirements.txt, <framework>.requirements.txt and setuptools (so that the predictor image
# installs mlscope's source without build isolation, offline). `mlscope image build` assembles the
# build context and tags the image mlscope-predictor-<framework>-deps:<inputs hash> (never build
# this file from the repository root):
#   build/requirements/  runtime.requirements.txt + <framework>.requirements.txt (exact pins)
#   build/ca/            the CA bundle pip must trust, only when --ca-bundle is given
# A pins file with a line `# python: X.Y` needs that Python in the base (Caffe2: 3.9).
# One COPY and one RUN per stage: the vfs storage driver keeps a full copy of the filesystem per
# layer. The CA bundle stays in the build stage, which `mlscope image build` removes afterwards.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG FRAMEWORK
ARG CA_BUNDLE=""
COPY build/ /tmp/build/
RUN set -eu; \
    if [ -n "$CA_BUNDLE" ]; then export PIP_CERT="/tmp/build/ca/$CA_BUNDLE"; fi; \
    pins=/tmp/build/requirements; \
    python=$(sed -n 's/^# python: *//p' "$pins/$FRAMEWORK.requirements.txt"); \
    if [ -n "$python" ]; then \
        python3 -c 'import sys; have = "%d.%d" % sys.version_info[:2]; sys.exit(None if have == sys.argv[1] else "the base must have Python " + sys.argv[1] + ", not " + have)' "$python"; \
    fi; \
    python3 -m venv /opt/mlscope; \
    /opt/mlscope/bin/pip install --no-cache-dir --progress-bar off --disable-pip-version-check \
        -r "$pins/runtime.requirements.txt" -r "$pins/$FRAMEWORK.requirements.txt" "setuptools>=77"

FROM ${BASE}
ARG FRAMEWORK
ARG MLSCOPE_INPUTS=""
LABEL org.mlscope.deps-of=$FRAMEWORK org.mlscope.inputs=$MLSCOPE_INPUTS
COPY --from=build /opt/mlscope /opt/mlscope
