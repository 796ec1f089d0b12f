# Stand-in for typesense/typesense where no image registry is reachable (scripts/deploy-test.sh): the lexical
# stand-in that `tbt up` runs locally (thinkingbox/tbt_thinkingbox/typesense_standin.py), on 0.0.0.0:8108 with the
# API key compose passes. The stand-in keeps its collections in memory: compose's --data-dir is accepted and unused.
ARG DEBIAN_IMAGE=localhost/tbt-base/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 >/dev/null; \
    rm -rf /var/lib/apt/lists/*
COPY thinkingbox/tbt_thinkingbox/typesense_standin.py /opt/standin/typesense_standin.py
COPY docker/standins/typesense-entrypoint.sh /opt/standin/entrypoint.sh
ENTRYPOINT ["bash", "/opt/standin/entrypoint.sh"]
