# The compose stack's PostgreSQL (the store): Debian's postgresql-15 on BASE (CI has no registry; it
# passes its offline mlscope-base:bookworm). postgres-entrypoint.sh makes the role and the database on
# the first start; POSTGRES_PORT and POSTGRES_LISTEN say where it listens.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
ARG MLSCOPE_INPUTS=""
LABEL org.opencontainers.image.title=mlscope-postgres org.mlscope.inputs=$MLSCOPE_INPUTS
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
ENTRYPOINT ["postgres-entrypoint.sh"]
# The package would make a cluster of its own ("main"): the entrypoint makes the one it serves.
RUN mkdir -p /etc/postgresql-common \
    && echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       -o Dpkg::Options::=--force-confold postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p "$PGDATA" /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
USER postgres
COPY postgres-entrypoint.sh /usr/local/bin/
