#!/usr/bin/env bash
# The install steps of docker/worker.Dockerfile that let the image run dataset code (docs/dataset-sandbox.md,
# "Production"), in a script so that test/worker-image.test.ts runs them without a Docker engine:
#
#   system-packages [--simulate]  Debian packages: Python 3.11 with venv (per-dataset environments, the relay),
#                                 bubblewrap (the sandbox), util-linux (prlimit, setpriv, unshare), CA certificates
#                                 (pip). --simulate: apt-get -s, changes nothing and needs no root.
#   helper-venv VENV MARKER       the Python environment of the test-file parser (thinkingbox/requirements.txt, as
#                                 scripts/setup.sh step 3b), recorded in MARKER (.tools/thinkingbox-venv in the image)
#   check MARKER                  fails, naming what is missing, unless every program the sandbox runs is there
#
# Run from anywhere; paths in the repository are relative to its root.
set -euo pipefail
cd "$(dirname "$0")/.."

# Where the sandbox looks for its helpers (SYSTEM_PATH in datasets/thinkingbox/dataset-sandbox.ts).
system_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
packages=(python3 python3-venv bubblewrap util-linux ca-certificates)

fail() {
  echo "[worker-image] error: $*" >&2
  exit 1
}

system_packages() {
  if [ "${1:-}" = "--simulate" ]; then
    apt-get -s install --no-install-recommends "${packages[@]}"
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  rm -rf /var/lib/apt/lists/*
}

helper_venv() {
  local venv="${1:?helper-venv VENV MARKER}" marker="${2:?helper-venv VENV MARKER}"
  # The system interpreter by absolute path: the venv must not point at whatever python3 a PATH finds first.
  local python="${TBT_IMAGE_PYTHON:-/usr/bin/python3}"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")" "$(dirname "$marker")"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r thinkingbox/requirements.txt
  "$venv/bin/python" -c 'import mcp, yaml'
  echo "$venv" >"$marker"
}

# The first executable NAME in the system PATH, as the sandbox resolves its helpers.
system_program() {
  local dir
  IFS=: read -ra dirs <<<"$system_path"
  for dir in "${dirs[@]}"; do
    if [ -x "$dir/$1" ]; then
      echo "$dir/$1"
      return 0
    fi
  done
  return 1
}

check() {
  local marker="${1:?check MARKER}" name missing=()
  for name in bwrap prlimit setpriv unshare env python3; do
    system_program "$name" >/dev/null || missing+=("$name")
  done
  [ ${#missing[@]} = 0 ] || fail "not in $system_path: ${missing[*]} (run: $0 system-packages)"
  local python
  python=$(system_program python3)
  # tomllib (the importer reads pyproject.toml), venv and ensurepip (tbt tasks prepare-env) need Python >= 3.11.
  "$python" -c 'import sys, tomllib, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null ||
    fail "$python is not Python >= 3.11 with venv and ensurepip"
  [ -f "$marker" ] || fail "$marker: no helper environment recorded (run: $0 helper-venv VENV $marker)"
  local venv
  venv=$(cat "$marker")
  [ -x "$venv/bin/python" ] || fail "$marker names $venv, which has no bin/python"
  "$venv/bin/python" -c 'import mcp, yaml' 2>/dev/null || fail "$venv cannot import mcp and yaml"
  [ -f thinkingbox/tbt_thinkingbox/loopback_forward.py ] || fail "the helper package thinkingbox/ is missing"
  echo "[worker-image] ok: $($(system_program bwrap) --version), Python $("$python" -c \
    'import platform; print(platform.python_version())'), helper environment $venv"
}

step="${1:-}"
shift || true
case "$step" in
  system-packages) system_packages "$@" ;;
  helper-venv) helper_venv "$@" ;;
  check) check "$@" ;;
  *) fail "unknown step '${step}' (system-packages, helper-venv, check)" ;;
esac
