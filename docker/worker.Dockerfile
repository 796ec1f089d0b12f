# Image of the CPU workers (orchestrator, rollout) and the one-shot `setup` service.
# Build from the repository root:  docker build -f docker/worker.Dockerfile -t tbt-worker .
# glibc base on purpose: the Temporal core bridge ships prebuilt for glibc only (no Alpine/musl).
FROM node:20.20.0-bookworm-slim

WORKDIR /app
ENV NODE_ENV=production
# Two malloc arenas: without it the rollout worker's RSS doubled over 10,000 episodes (infra/local-workers.ts).
ENV MALLOC_ARENA_MAX=2

# Dependencies first, so a source change does not reinstall them.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --loglevel=error \
    && npm cache clean --force

COPY --chown=node:node . .

USER node
# One process per container (`node --import tsx`, not the tsx launcher, which runs the script in a child):
# signals reach the Temporal worker directly and its host:pid identity is the worker's own.
# Compose picks the entry point per service with `command:`.
# The rollout worker's heap limit: nodeWorkerFlags in infra/local-workers.ts.
CMD ["node", "--max-old-space-size=1024", "--import", "tsx", "workers/rollout-worker.ts"]
