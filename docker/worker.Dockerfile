# Image of the CPU workers (orchestrator, rollout), the one-shot `setup` service and the `tbt` CLI service.
# Build from the repository root:  docker build -f docker/worker.Dockerfile -t tbt-worker .
# glibc base on purpose: the Temporal core bridge ships prebuilt for glibc only (no Alpine/musl).
# NODE_IMAGE: any Debian bookworm image with Node 20 in /usr/local (the official one's layout); scripts/build-images.sh
# passes one it builds itself where no registry is reachable (docs/deployment.md).
ARG NODE_IMAGE=node:20.20.0-bookworm-slim
FROM ${NODE_IMAGE}

WORKDIR /app
ENV NODE_ENV=production
# Two malloc arenas: without it the rollout worker's RSS doubled over 10,000 episodes (infra/local-workers.ts).
ENV MALLOC_ARENA_MAX=2
# What the worker writes (scratch folders of dataset code) stays in the container; imported datasets and their
# Python environments live on the tbt-datasets volume (docker/compose.yaml), mounted at /var/lib/tbt/datasets.
ENV TBT_STATE_DIR=/var/lib/tbt/state
ENV TBT_DATASET_ENV_DIR=/var/lib/tbt/datasets/envs

# Dataset code (docs/dataset-sandbox.md, "Production"): Python 3.11, bubblewrap, util-linux. The steps are in a
# script that test/worker-image.test.ts runs without a Docker engine.
COPY docker/worker-image-setup.sh docker/worker-image-setup.sh
RUN bash docker/worker-image-setup.sh system-packages
# A user of its own rather than `node` (uid 1000, often a person on the host): dataset code runs as this uid, and
# its process limit (RLIMIT_NPROC) counts every process of the uid on the host.
RUN groupadd --gid 10001 tbt \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/tbt --shell /usr/sbin/nologin tbt \
    && mkdir -p /var/lib/tbt/state /var/lib/tbt/datasets/envs \
    && chown -R 10001:10001 /var/lib/tbt

# Dependencies first, so a source change does not reinstall them.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --loglevel=error \
    && npm cache clean --force
# The test-file parser's Python environment (scripts/setup.sh step 3b), recorded where datasets/thinkingbox/
# dataset-python.ts looks for it.
COPY thinkingbox/requirements.txt thinkingbox/requirements.txt
RUN PIP_NO_CACHE_DIR=1 bash docker/worker-image-setup.sh helper-venv /opt/tbt/thinkingbox-venv \
    /app/.tools/thinkingbox-venv

# Owned by root: the workers read their code and cannot change it.
COPY . .
# The pre-built workflow bundle (out/ is not copied): the orchestrator loads it instead of bundling at start.
RUN node --import tsx infra/workflow-bundle-build.ts
RUN bash docker/worker-image-setup.sh check /app/.tools/thinkingbox-venv

USER 10001:10001
# One process per container (`node --import tsx`, not the tsx launcher, which runs the script in a child):
# signals reach the Temporal worker directly and its host:pid identity is the worker's own.
# Compose picks the entry point per service with `command:`.
# The rollout worker's heap limit: nodeWorkerFlags in infra/local-workers.ts.
CMD ["node", "--max-old-space-size=1024", "--import", "tsx", "workers/rollout-worker.ts"]
