# Stand-in for the official postgres:15 image where no image registry is reachable (scripts/deploy-test.sh): Debian
# bookworm's PostgreSQL 15 behind an entry point that honours the official image's POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB and `postgres ARGS...` command, which is all docker/compose.yaml uses of it.
ARG DEBIAN_IMAGE=localhost/tbt-base/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    mkdir -p /etc/postgresql-common/createcluster.d; \
    echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/no-main.conf; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    mkdir -p /var/lib/postgresql/data /var/run/postgresql; \
    chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:${PATH} PGDATA=/var/lib/postgresql/data
COPY docker/standins/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENTRYPOINT ["bash", "/usr/local/bin/postgres-entrypoint.sh"]
CMD ["postgres"]
