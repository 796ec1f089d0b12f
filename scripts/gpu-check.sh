#!/usr/bin/env bash
# The prepared GPU check for a single-GPU machine (one H200; torch with CUDA and transformers already installed;
# no network, no package downloads): the learner's own FSDP2 training steps over NCCL in bf16 on a randomly
# initialised ~1B Llama built from a config, first resident on the GPU, then with FSDP2 CPU offload. Prints one
# JSON line per run (tokens/s, model TFLOP/s, MFU against --peak-tflops, peak GPU memory) and keeps them in
# $OUT/gpu-check.jsonl (or .state/gpu-check.jsonl); then the collective weight transport (learner rank 0 to a
# receiver process, bench/learner/weight_transport_check.py). At most 10 minutes (timeouts 480 s + 120 s).
#
#   bash scripts/gpu-check.sh                         # the GPU check
#   bash scripts/gpu-check.sh --device cpu --tiny     # the same code path on CPU with a tiny model (here)
#
# TBT_GPU_PYTHON picks the interpreter (default: python3 on PATH; for --device cpu, the learner venv if set up).
# Extra arguments go to bench/learner/gpu_check.py (--steps, --seq-len, --trajectories, --old-logprobs, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
py="${TBT_GPU_PYTHON:-}"
if [ -z "$py" ]; then
  case " $* " in *" --device cpu "*) [ -f .tools/python-venv ] && py="$(cat .tools/python-venv)/bin/python" ;; esac
fi
py="${py:-python3}"
"$py" - <<'PY' || exit 2
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "safetensors") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu-check: {sys.executable} lacks {', '.join(missing)} (this check installs nothing)")
import torch
print(f"gpu-check: torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.device_count()} GPU(s) {torch.cuda.get_device_name() if torch.cuda.is_available() else ''}")
PY
out="${OUT:-.state}"
mkdir -p "$out"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD/gpu-learner${PYTHONPATH:+:$PYTHONPATH}"
started=$(date +%s)
# torchrun --standalone: a one-rank world with a real process group (NCCL on the GPU), as the GPU worker starts it.
timeout --kill-after=10 480 "$py" -m torch.distributed.run --standalone --nproc-per-node=1 \
  bench/learner/gpu_check.py "$@" 2> "$out/gpu-check.log" | tee "$out/gpu-check.jsonl"
rc=${PIPESTATUS[0]}
# The collective weight transport, learner rank 0 to a receiver process (2 GB of bf16; 64 MB on CPU).
device=cuda gb=2.0
case " $* " in *" --device cpu "*) device=cpu gb=0.0625 ;; esac
timeout --kill-after=10 120 "$py" bench/learner/weight_transport_check.py --device "$device" --gb "$gb" \
  2>> "$out/gpu-check.log" | tee -a "$out/gpu-check.jsonl"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "gpu-check: exit $rc after $(( $(date +%s) - started )) s (log $out/gpu-check.log)"
[ "$rc" = 0 ] || tail -20 "$out/gpu-check.log" >&2
exit "$rc"
