# Image of the GPU worker (one per GPU host): the Node worker that polls this host's task queue
# (tbt-gpu-<host>) and starts the torchrun learner from gpu-learner/ on the host's GPUs.
# Build from the repository root:  docker build -f docker/gpu-worker.Dockerfile -t tbt-gpu-worker .
#
# torch: gpu-learner/requirements.txt pins the CPU build the dev machines use (torch==2.13.0); installing it
# as is would replace the CUDA build. This image keeps the base image's CUDA torch and installs every other
# requirement. To run a different CUDA torch (e.g. the same version the CPU tests use), pass
#   --build-arg TORCH_VERSION=2.13.0 --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
# (the index must match the host driver's CUDA); the build fails if the result is a CPU build.
#
# Base images as build arguments: PYTORCH_IMAGE is any image whose `python` and `pip` on PATH are the environment
# holding torch; NODE_IMAGE any glibc image with Node 20 at /usr/local/bin/node. scripts/build-images.sh builds both
# on a local Debian base where no registry is reachable, with the CPU torch and TORCH_BUILD=cpu, to test the image
# on a machine without a GPU (docs/deployment.md). Production keeps the defaults.
ARG PYTORCH_IMAGE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
ARG NODE_IMAGE=node:20.20.0-bookworm-slim

FROM ${NODE_IMAGE} AS node-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --loglevel=error

FROM ${PYTORCH_IMAGE}
# Node 20 from the official image: its binary needs glibc >= 2.28 (this base is Ubuntu 22.04), and the
# Temporal core bridge inside node_modules is the glibc build.
COPY --from=node-deps /usr/local/bin/node /usr/local/bin/node
WORKDIR /app
ENV NODE_ENV=production PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

ARG TORCH_VERSION=""
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
# The torch build the image must end with: cuda (production), or cpu for a test build on a machine without a GPU.
ARG TORCH_BUILD=cuda
COPY gpu-learner/requirements.txt gpu-learner/requirements-cuda.txt gpu-learner/
RUN set -eux; \
    if [ -n "$TORCH_VERSION" ]; then pip install --index-url "$TORCH_INDEX_URL" "torch==$TORCH_VERSION"; fi; \
    grep -vE '^torch([=<>!~ ]|$)' gpu-learner/requirements.txt > /tmp/requirements-cuda.txt; \
    pip install -r /tmp/requirements-cuda.txt -r gpu-learner/requirements-cuda.txt; \
    python -c "import sys, torch; want = sys.argv[1]; got = 'cuda' if torch.version.cuda else 'cpu'; \
assert got == want, f'torch {torch.__version__} is a {got} build, not TORCH_BUILD={want}'; \
print('torch', torch.__version__, got, torch.version.cuda or '')" "$TORCH_BUILD"

COPY --from=node-deps /app/node_modules node_modules
COPY . .
# infra/python-env.ts finds Python through .tools/python-venv (an environment prefix holding bin/python).
RUN set -eux; \
    mkdir -p .tools /models /checkpoints; \
    python -c "import sys; print(sys.prefix)" > .tools/python-venv; \
    test -x "$(cat .tools/python-venv)/bin/python"; \
    useradd --create-home --uid 10001 tbt; \
    chown -R tbt:tbt /app /models /checkpoints

USER tbt
CMD ["node", "--import", "tsx", "workers/gpu-worker.ts"]
