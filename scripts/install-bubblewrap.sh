#!/usr/bin/env bash
# Idempotent: makes sure bubblewrap (`bwrap`) exists; dataset code (ThinkingBox tool servers and test code)
# runs only inside it unless `--unsandboxed` is given (docs/dataset-sandbox.md).
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "[install-bubblewrap] error: bwrap is missing and this is not root; install it with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y bubblewrap" >&2
  exit 1
fi
echo "[install-bubblewrap] installing Debian's bubblewrap package"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq bubblewrap >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
fi
if ! command -v bwrap >/dev/null 2>&1; then
  echo "[install-bubblewrap] error: apt-get finished but bwrap is still missing" >&2
  exit 1
fi
echo "[install-bubblewrap] $(bwrap --version)"
