# Python 3.11 with the CPU build of torch on a Debian bookworm base: the PYTORCH_IMAGE that scripts/build-images.sh
# passes to docker/gpu-worker.Dockerfile (with TORCH_BUILD=cpu) to build and run the GPU worker's image on a machine
# without a GPU or an image registry. Like the official pytorch image, `python` and `pip` on PATH are the environment
# holding torch (a venv here: Debian's own Python refuses pip installs). This build's context is a folder holding the
# torch wheel the script downloaded.
ARG DEBIAN_IMAGE=localhost/tbt-base/debian:bookworm

FROM ${DEBIAN_IMAGE} AS python
ENV PATH=/opt/venv/bin:${PATH} PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/venv

FROM python AS install
ARG TORCH_WHEEL
COPY ${TORCH_WHEEL} /tmp/
RUN pip install -q "/tmp/${TORCH_WHEEL}"

# Only the environment comes across: the wheel (about 200 MB) stays out of the image's layers.
FROM python
COPY --from=install /opt/venv /opt/venv
RUN python -c "import torch; assert not torch.version.cuda; print('torch', torch.__version__)"
