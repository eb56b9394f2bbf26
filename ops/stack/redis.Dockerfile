# The compose stack's Redis (broker and agent registry): Debian's redis-server on BASE, so the stack
# needs no image but its base (CI has no registry; it passes its offline mlscope-base:bookworm).
# ops/compose.yaml passes the port, address and persistence as the command.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
ARG MLSCOPE_INPUTS=""
LABEL org.opencontainers.image.title=mlscope-redis org.mlscope.inputs=$MLSCOPE_INPUTS
ENTRYPOINT ["redis-server"]
CMD ["--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"]
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
