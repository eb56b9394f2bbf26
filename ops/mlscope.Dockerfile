# The farm's image: `mlscope api` and `mlscope worker` (see ops/compose.yaml).
#
#   docker build -f ops/mlscope.Dockerfile -t mlscope-farm .                       # api only
#   docker build -f ops/mlscope.Dockerfile --build-arg EXTRAS=farm,mongodb,postgresql,pytorch,onnxruntime \
#       -t mlscope-worker .                                                      # a worker with frameworks
#
# BASE is any image with Python 3.10+ and pip. PIP_ARGS passes extra pip options, e.g. an index
# that serves CPU-only PyTorch wheels, or a proxy's CA bundle.
ARG BASE=python:3.11-slim
FROM ${BASE}

ARG EXTRAS=farm,mongodb,postgresql
ARG PIP_ARGS=""
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MLSCOPE_CACHE_DIR=/var/cache/mlscope

WORKDIR /opt/mlscope
COPY pyproject.toml constraints.txt README.md ./
COPY mlscope ./mlscope
RUN pip install --no-cache-dir ${PIP_ARGS} -c constraints.txt ".[${EXTRAS}]" \
    && useradd --system --create-home mlscope \
    && mkdir -p /var/cache/mlscope && chown mlscope /var/cache/mlscope
USER mlscope
ENTRYPOINT ["mlscope"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
