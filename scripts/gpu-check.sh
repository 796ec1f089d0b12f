#!/usr/bin/env bash
# The prepared device check for a one-GPU machine (an H100 or H200; torch with CUDA and transformers installed, vLLM
# too for the sync; no network, nothing downloaded), at most 8 minutes (timeouts: 280 s, then what is left of 470 s):
#
#   bash scripts/gpu-check.sh                       # the GPU check: paste its JSON lines into the note
#   bash scripts/gpu-check.sh --device cpu --tiny   # the same code on CPU, a tiny model, 512 tokens (a few minutes)
#
# 1. bench/learner/gpu_check.py under torchrun (a one-rank world, NCCL on the GPU, as the GPU worker starts the
#    learner): builds a random Qwen3.5 hybrid text model of 3.78 B parameters (Qwen3_5ForCausalLM, 3 Gated-DeltaNet
#    layers then 1 full-attention layer, x8) on the GPU in bf16, saves it to a temp folder, and prints (one JSON
#    line each, with `s` for the phase and `elapsed_s` since its start):
#    - {"check": "build"}: parameters, torch/CUDA versions, the GPU;
#    - {"check": "memory_model"}: the memory model's prediction for exactly the run that follows (same learner
#      config, world size 1, 32,768 tokens with a 1,024-token prompt): tracked_gib (the learner's GPU tensors at
#      their peak), overlap_gib (one more FSDP unit in flight), gpu_total_gib ((tracked + overlap) x 1.10
#      fragmentation + 0.75 GiB CUDA context + 1.0 GiB NCCL), host_node_gib, breakdown by category;
#    - {"check": "learner_step"} per step (one warm-up, 2 timed), then {"check": "learner"}: the learner's own
#      Trainer (sharded_load, FSDP2, bf16 compute, fsdp.cpu_offload and activation_checkpointing on, as the
#      reference) on one 32,768-token trajectory per step: tokens_per_s, model_tflops_per_s, mfu (against
#      --peak-tflops, default 989: H100/H200 SXM dense bf16; pass --peak-tflops 756 for an H100 PCIe), mfu_noncausal
#      (attention counted as the PaLM convention does), max_memory_allocated_gib, max_memory_reserved_gib,
#      device_used_gib, host_peak_rss_gib, fla_installed (whether flash-linear-attention ran the delta rule);
#    - {"check": "memory_ratio"}: predicted / measured, like with like. allocated: tracked + overlap against
#      max_memory_allocated; reserved: that x 1.10 against max_memory_reserved; device: gpu_total against the
#      GPU memory the process holds (context + NCCL + the allocator's segments); host: host_node_gib against peak
#      RSS. A ratio above 1 means the memory model over-estimates (safe: what it calls fitting fits), below 1 it
#      under-estimates (a 27B plan it calls fitting may not). The first GPU figures to calibrate its constants.
#      like_with_like false: the prediction assumed fla's kernel, the run had no fla (transformers' PyTorch loop).
# 2. bench/learner/vllm_sync_check.py: vLLM's OpenAI server on the saved model (TBT_VLLM_PYTHON, else the same
#    interpreter; --gpu-memory-utilization 0.25, --enforce-eager, --max-model-len 4096, the tbt_gpu weight
#    receiver, dev mode) and the weight sync as the GPU worker runs it: {"check": "vllm_start"} (s), then
#    {"check": "vllm_sync"} for the collective push (learner rank 0 -> receive_tbt_weights; gloo on one GPU, as
#    NCCL refuses two ranks on one GPU; NCCL with two) and for the disk reload: bytes, s (pause to resume),
#    push_s, gb_per_s (GB = 1e9), est_27b_s (54 GB at that rate). Without vLLM: {"check": "vllm_sync", "skipped"}.
#    On CPU it is skipped unless TBT_GPU_CHECK_VLLM=1 (vLLM's CPU build; needs torchvision for Qwen3.5).
#    TBT_GPU_CHECK_SYNC=gloo,nccl forces the backends (NCCL on one GPU is expected to fail: "Duplicate GPU").
# 3. Only when the vLLM sync was skipped or failed, in the time left: bench/learner/weight_transport_check.py, the
#    bare transport between two processes (1 GB; gloo, NCCL with two GPUs): {"check": "weight_transport"}.
# Everything goes to $OUT/gpu-check.jsonl (or .state/gpu-check.jsonl), logs to gpu-check.log and vllm.log beside it.
#
# TBT_GPU_PYTHON picks the interpreter (default: python3 on PATH; for --device cpu, the learner venv if set up).
# Extra arguments go to bench/learner/gpu_check.py (--model llama1b, --seq-len, --steps, --offload both, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
cpu=0
case " $* " in *" --device cpu "*) cpu=1 ;; esac
py="${TBT_GPU_PYTHON:-}"
if [ -z "$py" ] && [ "$cpu" = 1 ] && [ -f .tools/python-venv ]; then py="$(cat .tools/python-venv)/bin/python"; fi
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
work="$(mktemp -d "${TMPDIR:-/tmp}/tbt-gpu-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD/gpu-learner${PYTHONPATH:+:$PYTHONPATH}"
started=$(date +%s)
phase() { echo "gpu-check: $1 exit $2 after $(( $(date +%s) - started )) s" >&2; }
: > "$out/gpu-check.log"
# On CPU the host-memory ratio follows live tensors only with a fixed mmap threshold (memory_calibration.py).
malloc=()
[ "$cpu" = 1 ] && malloc=(env MALLOC_MMAP_THRESHOLD_=65536)
# torchrun --standalone: a one-rank world with a real process group (NCCL on the GPU), as the GPU worker starts it.
timeout --kill-after=10 280 "${malloc[@]}" "$py" -m torch.distributed.run --standalone --nproc-per-node=1 \
  bench/learner/gpu_check.py --work "$work" "$@" 2>> "$out/gpu-check.log" | tee "$out/gpu-check.jsonl"
rc=${PIPESTATUS[0]}
phase learner "$rc"
device=cuda gb=1.0
[ "$cpu" = 1 ] && device=cpu gb=0.0625
# The weight sync into vLLM, after the learner process has exited and freed the GPU (exit 3: no vLLM).
vrc=3
if [ ! -f "$work/model/config.json" ]; then
  echo '{"check": "vllm_sync", "skipped": "no model: the learner phase saved none"}' | tee -a "$out/gpu-check.jsonl"
elif [ "$cpu" = 1 ] && [ "${TBT_GPU_CHECK_VLLM:-0}" != 1 ]; then
  echo '{"check": "vllm_sync", "skipped": "--device cpu: set TBT_GPU_CHECK_VLLM=1 to run it on vLLM'"'"'s CPU build"}' \
    | tee -a "$out/gpu-check.jsonl"
else
  vpy="${TBT_VLLM_PYTHON:-}"
  if [ -z "$vpy" ] && [ "$cpu" = 1 ] && [ -f .tools/vllm-venv ]; then vpy="$(cat .tools/vllm-venv)/bin/python"; fi
  # vLLM's start: about a minute on an H100 (Triton compiles the linear-attention kernels cold); minutes on CPU.
  limit=$(( 470 - ($(date +%s) - started) )) start=150
  [ "$limit" -gt 190 ] && limit=190
  [ "$cpu" = 1 ] && limit=480 start=400
  timeout --kill-after=10 "$limit" "$py" bench/learner/vllm_sync_check.py --model "$work/model" --device "$device" \
    --python "${vpy:-$py}" --log "$out/vllm.log" --start-timeout "$start" --backends "${TBT_GPU_CHECK_SYNC:-auto}" \
    2>> "$out/gpu-check.log" | tee -a "$out/gpu-check.jsonl"
  vrc=${PIPESTATUS[0]}
  phase vllm_sync "$vrc"
  case "$vrc" in 0 | 3) ;; *) rc=1 ;; esac
fi
# Without a vLLM sync (none there, or it failed): the bare collective transport between two processes, learner
# rank 0 to a receiver (1 GB of bf16 from the GPU; 64 MB on CPU).
left=$(( 470 - ($(date +%s) - started) ))
if [ "$vrc" != 0 ] && [ "$left" -ge 15 ]; then
  timeout --kill-after=5 "$(( left < 30 ? left : 30 ))" "$py" bench/learner/weight_transport_check.py \
    --device "$device" --gb "$gb" \
    2>> "$out/gpu-check.log" | tee -a "$out/gpu-check.jsonl"
  trc=${PIPESTATUS[0]}
  phase weight_transport "$trc"
  [ "$trc" = 0 ] || rc=1
fi
echo "gpu-check: exit $rc after $(( $(date +%s) - started )) s (lines in $out/gpu-check.jsonl, log $out/gpu-check.log)"
[ "$rc" = 0 ] || tail -20 "$out/gpu-check.log" >&2
exit "$rc"
