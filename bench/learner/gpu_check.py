"""The learner's real path at 32k tokens on one GPU, measured against the memory model's prediction.

    PYTHONPATH=gpu-learner torchrun --standalone --nproc-per-node=1 bench/learner/gpu_check.py --work DIR
    PYTHONPATH=gpu-learner torchrun ... bench/learner/gpu_check.py --device cpu --tiny    # here; gpu-check.sh runs it

Phases, each printed as JSON lines with its own seconds (`s`) and the seconds since start (`elapsed_s`):

1. build: a randomly initialised model from a config, built on the device in bf16 and saved (safetensors) to
   DIR/model, so the learner loads it as it loads any model (meta, then each rank's rows: sharded_load). Default
   `--model hybrid`: a Qwen3_5ForCausalLM text model of the 27B's family and layer pattern (3 linear_attention
   (Gated DeltaNet) layers, then 1 full_attention; hidden 2560, 32 layers, MLP 6912, 16 attention heads / 4 KV
   heads of 256, linear attention 16 key / 32 value heads of 128, vocabulary 151936, untied embeddings as the
   27B: 3.78 B parameters). `--model llama1b`: the earlier Llama in the shape of a 1B (hidden 2048, 16 layers).
   `--tiny`: a ~20M model of the same kind (vocabulary 32000, hidden 256, 4 layers) and a 512-token trajectory
   with a 128-token prompt (the CPU path check). No weights are read, nothing is downloaded.
2. memory_model: the memory model's prediction for exactly this run (bench/learner/memory_prediction.py in a
   subprocess, before the measured run): the same learner config JSON (DIR/learner-offload.json), world size 1, the
   same length and prompt. On CUDA its Gated-DeltaNet memory is flash-linear-attention's kernel (delta_rule_memory;
   transformers' PyTorch loop takes the fake run over 6 minutes at 32k); `fla_installed` says whether the measured
   run used that kernel too. On CPU (`--device cpu`) it runs the PyTorch loop, as the measured run does.
3. learner: torchrun's one-rank world (NCCL on CUDA), Trainer(info) from that config: bf16 compute with
   float32 master weights, the reference settings (fsdp.cpu_offload true, activation_checkpointing true,
   micro_batch_tokens 16384), one trajectory of `--seq-len` 32,768 tokens per step (a 1,024-token prompt, then
   31,744 trained tokens) read from a batch file. One warm-up step (allocator, kernels, AdamW state), then `--steps`
   2 timed Trainer.train_step calls: a `learner_step` line each (with `optimizer_s`, the AdamW step's seconds: on
   the host with cpu_offload, time the GPU waits), then one `learner` line.
4. memory_ratio: measured against predicted, like with like (ratio = predicted / measured: above 1 the model
   over-estimates, which is the safe side; below 1 it under-estimates and a run it calls fitting may not):
   - `allocated`: tracked peak + overlap (the learner's tensors, one extra FSDP unit in flight) against
     torch.cuda.max_memory_allocated (the caching allocator's live tensors: no context, no NCCL buffers);
   - `reserved`: the same x FRAGMENTATION (1.10) against torch.cuda.max_memory_reserved (the allocator's segments);
   - `device`: the full per-GPU figure (+ CUDA context 0.75 GiB + NCCL 1.0 GiB) against the device memory this
     process holds after the steps (cudaMemGetInfo total - free: context, NCCL, reserved; nothing else runs).
     NCCL's 1.0 GiB is sized for a 24-rank world; a one-rank communicator holds less, so expect `device` a little
     above `reserved`.
   Also `host`: the per-rank host figure (pinned-rounded shards + 3 GiB process) against this process's peak RSS
   (VmHWM, reset just before the Trainer). On CPU there is no split: `rss` compares the tracked peak with VmHWM -
   VmRSS before the Trainer (as memory_calibration does).

FLOPs per step (model FLOPs: the activation-checkpoint recompute is not counted, and old log-probabilities cost no
pass of their own: loss.old_logprobs recompute takes the step's own, detached; MFU = model FLOP/s / peak):
    6 x (matmul parameters - output head) x T  +  6 x head x T_scored                 (the dense part)
  + 6 x L_full x n_heads x head_dim x S x T                                           (softmax attention, causal)
  + 3 x L_lin x h_v x (6 x d_k x d_v + 2 x C x (3 x d_k + 2 x d_v)) x T               (chunked delta rule, approx.)
T = tokens per step, T_scored = the tokens after the prompt (only they reach the output head: logits_to_keep),
S = sequence length. Matmul parameters: every nn.Linear and the depthwise conv1d weight (embedding lookup, norms,
A_log and dt_bias excluded). Causal attention: a token at position t does 4 x t x n_heads x head_dim FLOPs in
QK^T and AV, S/2 positions on average, x3 for forward + backward; the PaLM convention (12 x ..., masked half
counted) gives `mfu_noncausal`. Linear attention per value head, chunk C = 64: the inter-chunk state (q.S, w.S and
the update k^T.u, 2 d_k d_v each) and the intra-chunk products (QK^T, KK^T, A.K: 2 C d_k each; A.V, (QK^T).V:
2 C d_v each), x3 for forward + backward; the per-chunk triangular solve (C^2/3 per token) is left out. Its
projections are already in the matmul parameters.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import init_distributed
from tbt_gpu.learner.trainer import Trainer

ROOT = pathlib.Path(__file__).resolve().parents[2]

GIB = 1024**3
STARTED = time.perf_counter()
DELTA_RULE_CHUNK = 64

QWEN35_ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}
SHAPES: dict[str, dict[str, Any]] = {
    "hybrid": {"vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 6912, "num_hidden_layers": 32,
               "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "linear_num_key_heads": 16,
               "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
               "linear_conv_kernel_dim": 4, "max_position_embeddings": 65536, "tie_word_embeddings": False,
               "pad_token_id": 0, "eos_token_id": 1, "rope_parameters": QWEN35_ROPE},
    "hybrid-tiny": {"vocab_size": 32000, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "linear_num_key_heads": 2,
                    "linear_num_value_heads": 4, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
                    "linear_conv_kernel_dim": 4, "max_position_embeddings": 4096, "tie_word_embeddings": False,
                    "pad_token_id": 0, "eos_token_id": 1, "rope_parameters": QWEN35_ROPE},
    "llama1b": {"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 65536,
                "tie_word_embeddings": True, "pad_token_id": 0},
    "llama1b-tiny": {"vocab_size": 32000, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
                     "tie_word_embeddings": True, "pad_token_id": 0},
}  # fmt: skip


def emit(record: dict[str, Any]) -> None:
    print(json.dumps({**record, "elapsed_s": round(time.perf_counter() - STARTED, 1)}), flush=True)


def hf_config(kind: str, tiny: bool) -> Any:
    shape = SHAPES[f"{kind}-tiny" if tiny else kind]
    if kind == "hybrid":
        from transformers import Qwen3_5TextConfig

        config = Qwen3_5TextConfig(**shape)
        config.architectures = ["Qwen3_5ForCausalLM"]
    else:
        from transformers import LlamaConfig

        config = LlamaConfig(**shape)
        config.architectures = ["LlamaForCausalLM"]
    return config


def build_model(folder: pathlib.Path, config: Any, device: str) -> int:
    """Initialised on `device` in bf16 (a few B parameters on a CPU take minutes), saved; returns its parameters."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder, safe_serialization=True)
    del model
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return parameters


def flops_per_step(config: Any, *, seq_len: int, tokens: int, scored: int) -> dict[str, float]:
    """The model FLOPs of one training step (see the module docstring)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d)))
    head = model.get_output_embeddings().weight.numel()
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = list(getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers)
    full = layer_types.count("full_attention")
    linear = layer_types.count("linear_attention")
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    d_attn = text.num_attention_heads * head_dim
    dense = 6 * (matmul - head) * tokens + 6 * head * scored
    attention = 6 * full * d_attn * seq_len * tokens
    delta_rule = 0.0
    if linear:
        dk, dv, heads = text.linear_key_head_dim, text.linear_value_head_dim, text.linear_num_value_heads
        per_token = 6 * dk * dv + 2 * DELTA_RULE_CHUNK * (3 * dk + 2 * dv)
        delta_rule = 3 * linear * heads * per_token * tokens
    return {
        "matmul_parameters": matmul,
        "dense": dense,
        "attention": attention,
        "attention_noncausal": 2 * attention,
        "delta_rule": delta_rule,
        "total": dense + attention + delta_rule,
        "full_attention_layers": full,
        "linear_attention_layers": linear,
    }


def learner_config(args: argparse.Namespace, work: pathlib.Path, offload: bool) -> dict[str, Any]:
    cuda = args.device == "cuda"
    return {
        "model": {"path": str(work / "model"), "dtype": "bfloat16" if cuda else "float32", "max_seq_len": args.seq_len},
        "checkpoint": {"dir": str(work / "checkpoints")},
        "distributed": {"device": args.device, "backend": "nccl" if cuda else "gloo"},
        "fsdp": {"cpu_offload": offload, "activation_checkpointing": args.activation_checkpointing == "true"},
        "optimizer": {"lr": 1e-6},
        "loss": {"old_logprobs": "recompute"},
        "train": {"micro_batch_tokens": args.micro_batch_tokens},
    }


def write_batch(path: pathlib.Path, *, count: int, seq_len: int, prompt: int, vocab: int) -> pathlib.Path:
    """`count` trajectories of `seq_len` tokens: `prompt` untrained, then trained (advantages +1, -1, ...)."""
    rng = random.Random(0)
    lines = []
    for i in range(count):
        lines.append(json.dumps({
            "trajectory_id": f"t{i}",
            "input_ids": [rng.randrange(3, vocab) for _ in range(seq_len)],
            "loss_mask": [0] * prompt + [1] * (seq_len - prompt),
            "advantage": 1.0 if i % 2 == 0 else -1.0,
        }))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def predict(args: argparse.Namespace, config_path: pathlib.Path) -> dict[str, Any] | None:
    """The memory model in a fresh process (its fake process group cannot share this one's), no GPU visible."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT / "gpu-learner"))
    delta_rule = args.delta_rule if args.delta_rule != "auto" else ("fla" if args.device == "cuda" else "torch")
    cmd = [sys.executable, str(ROOT / "bench/learner/memory_prediction.py"), "--learner-config", str(config_path),
           "--tokens", str(args.seq_len), "--prompt-tokens", str(args.prompt_tokens),
           "--target-device", args.device, "--delta-rule", delta_rule]  # fmt: skip
    try:
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.predict_timeout, check=False)
    except subprocess.TimeoutExpired:
        emit({"check": "memory_model", "error": f"timed out after {args.predict_timeout} s"})
        return None
    line = next((x for x in reversed(run.stdout.splitlines()) if x.startswith("{")), None)
    if run.returncode != 0 or line is None:
        emit({"check": "memory_model", "error": f"exit {run.returncode}: {run.stderr.strip()[-1500:]}"})
        return None
    prediction = json.loads(line)
    emit(prediction)
    return prediction


TORCHRUN_ENV = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING"}  # fmt: skip


def _status_kib(field: str) -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak_rss() -> bool:
    """Resets VmHWM to the current RSS (Linux: 5 > /proc/self/clear_refs); False where that is refused."""
    try:
        pathlib.Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def run(args: argparse.Namespace, work: pathlib.Path, config: Any, offload: bool) -> dict[str, Any]:
    cuda = args.device == "cuda"
    config_path = work / f"learner-{'offload' if offload else 'resident'}.json"
    config_path.write_text(json.dumps(learner_config(args, work, offload), indent=1))
    phase = time.perf_counter()
    prediction = predict(args, config_path)
    prediction_s = time.perf_counter() - phase
    info = init_distributed(LearnerConfig.load(config_path))
    gc.collect()  # a previous run's trainer, optimizer state and model
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    hwm_reset = _reset_peak_rss()
    rss_before = _status_kib("VmRSS") * 1024
    phase = time.perf_counter()
    trainer = Trainer(info)
    load_s = time.perf_counter() - phase
    vocab = trainer.model_info.vocab_size
    count, seq_len, prompt = args.trajectories, args.seq_len, args.prompt_tokens
    batch_file = write_batch(work / "batch.jsonl", count=count, seq_len=seq_len, prompt=prompt, vocab=vocab)
    batch = trainer.load_batch(str(batch_file))
    tokens, scored = count * seq_len, count * (seq_len - prompt)
    times, metrics = [], {}
    # The AdamW step's own seconds (on the host with cpu_offload): how much of a step the GPU waits for.
    optimizer_s: list[float] = []
    trainer.optimizer.register_step_pre_hook(lambda *_: optimizer_s.append(time.perf_counter()))
    trainer.optimizer.register_step_post_hook(lambda *_: optimizer_s.append(time.perf_counter() - optimizer_s.pop()))
    phase = time.perf_counter()
    for step in range(1, args.steps + 2):
        if cuda:
            torch.cuda.synchronize()
        started, optimizer_steps = time.perf_counter(), len(optimizer_s)
        metrics = trainer.train_step(step, batch)
        if cuda:
            torch.cuda.synchronize()
        took = time.perf_counter() - started
        if step > 1:  # the first step warms allocators, kernels and the optimizer state
            times.append(took)
        emit({"check": "learner_step", "step": step, "warm_up": step == 1, "s": round(took, 3),
              "optimizer_s": round(optimizer_s[-1], 3) if len(optimizer_s) > optimizer_steps else None,
              "tokens_per_s": round(tokens / took, 1), "loss": metrics.get("loss"),
              "grad_norm": metrics.get("grad_norm")})  # fmt: skip
    steps_s = time.perf_counter() - phase
    best = min(times)
    flops = flops_per_step(config, seq_len=seq_len, tokens=tokens, scored=scored)
    peak = args.peak_tflops * 1e12
    result: dict[str, Any] = {
        "check": "learner",
        "run": "cpu_offload" if offload else "resident",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "model": f"{args.model}{'-tiny' if args.tiny else ''}",
        "parameters": trainer.model_info.parameters,
        "matmul_parameters": flops["matmul_parameters"],
        "hybrid": trainer.model_info.hybrid,
        "fla_installed": importlib.util.find_spec("fla") is not None,
        "dtype": info.config.model.dtype,
        "cpu_offload": offload,
        "activation_checkpointing": info.config.fsdp.activation_checkpointing,
        "seq_len": seq_len,
        "prompt_tokens": prompt,
        "trajectories": count,
        "tokens_per_step": tokens,
        "micro_batch_tokens": args.micro_batch_tokens,
        "load_s": round(load_s, 1),
        "step_s": [round(t, 3) for t in times],
        "optimizer_s": [round(t, 3) for t in optimizer_s[1:]],
        "tokens_per_s": round(tokens / best, 1),
        "model_tflop_per_step": float(f"{flops['total'] / 1e12:.4g}"),
        "flops_split": {k: round(flops[k] / flops["total"], 3) for k in ("dense", "attention", "delta_rule")},
        "model_tflops_per_s": float(f"{flops['total'] / best / 1e12:.4g}"),
        "peak_tflops": args.peak_tflops,
        "mfu": round(flops["total"] / best / peak, 4) if cuda else None,
        "mfu_noncausal": round((flops["total"] + flops["attention"]) / best / peak, 4) if cuda else None,
        "loss": metrics.get("loss"),
        "grad_norm": metrics.get("grad_norm"),
    }
    hwm = _status_kib("VmHWM") * 1024
    result["host_peak_rss_gib"] = round(hwm / GIB, 2) if hwm_reset else None
    if cuda:
        free, total = torch.cuda.mem_get_info()
        stats = torch.cuda.memory_stats()
        result.update(
            max_memory_allocated_gib=round(torch.cuda.max_memory_allocated() / GIB, 2),
            max_memory_reserved_gib=round(torch.cuda.max_memory_reserved() / GIB, 2),
            device_used_gib=round((total - free) / GIB, 2),
            device_total_gib=round(total / GIB, 2),
            alloc_retries=stats.get("num_alloc_retries", 0),
            ooms=stats.get("num_ooms", 0),
        )
    emit({**result, "s": round(load_s + steps_s, 1)})
    if prediction is not None:
        kept = hwm if hwm_reset else None
        emit(ratios(prediction, result, cuda=cuda, hwm=kept, rss_before=rss_before, prediction_s=prediction_s))
    del trainer, batch
    return result


def ratios(
    p: dict[str, Any], m: dict[str, Any], *, cuda: bool, hwm: int | None, rss_before: int, prediction_s: float
) -> dict[str, Any]:
    """Predicted / measured, like with like (the module docstring says which figure goes with which)."""

    def ratio(predicted: float, measured: float | None) -> dict[str, Any]:
        value = round(predicted / measured, 3) if measured else None
        shown = round(measured, 2) if measured is not None else None
        return {"predicted_gib": round(predicted, 2), "measured_gib": shown, "ratio": value}

    out: dict[str, Any] = {"check": "memory_ratio", "run": m["run"], "tokens": m["seq_len"]}
    out["memory_model_s"] = round(prediction_s, 1)
    if cuda:
        live = p["tracked_gib"] + p["overlap_gib"]
        out["allocated"] = ratio(live, m["max_memory_allocated_gib"])
        out["reserved"] = ratio(live * p["fragmentation"], m["max_memory_reserved_gib"])
        out["device"] = ratio(p["gpu_total_gib"], m["device_used_gib"])
        out["host"] = ratio(p["host_node_gib"], m["host_peak_rss_gib"])
        out["like_with_like"] = p["delta_rule"] == "torch" or m["fla_installed"]
        if not out["like_with_like"]:
            out["note"] = (
                "the prediction has flash-linear-attention's delta-rule memory, the measured run had no fla "
                "installed and ran transformers' PyTorch loop (more activation memory in the recompute)"
            )
    else:
        measured = (hwm - rss_before) / GIB if hwm is not None else None
        out["rss"] = ratio(p["tracked_gib"], measured)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--device", choices=["cuda", "cpu"], default="cuda")
    add("--work", help="folder for the model, the learner config and the batch (default: a temp dir)")
    add("--model", choices=["hybrid", "llama1b"], default="hybrid")
    add("--tiny", action="store_true", help="a tiny model and a 512-token trajectory (CPU check)")
    add("--seq-len", type=int, default=32768)
    add("--prompt-tokens", type=int, default=1024)
    add("--trajectories", type=int, default=1)
    add("--micro-batch-tokens", type=int, default=16384, help="the reference's (a longer row goes alone)")
    add("--steps", type=int, default=2, help="timed steps, after one warm-up step")
    add("--offload", choices=["true", "false", "both"], default="true", help="fsdp.cpu_offload")
    add("--activation-checkpointing", choices=["true", "false"], default="true")
    add("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 SXM: 989; H100 PCIe: 756)")
    add("--delta-rule", choices=["auto", "fla", "torch"], default="auto", help="the memory model's (auto: see above)")
    add("--predict-timeout", type=float, default=120.0, help="seconds for the memory model")
    add("--build-only", action="store_true", help="build and save the model, then stop")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu-check: torch sees no CUDA device (torch {torch.__version__})", file=sys.stderr)
        return 2
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        print("gpu-check: one rank only (torchrun --nproc-per-node=1)", file=sys.stderr)
        return 2
    if args.tiny:
        args.seq_len, args.prompt_tokens = min(args.seq_len, 512), min(args.prompt_tokens, 128)
    if not 0 < args.prompt_tokens < args.seq_len:
        parser.error("--prompt-tokens: must be shorter than --seq-len")
    if args.device == "cpu":
        args.offload = "false"  # the learner refuses CPU offload on a CPU device (the parameters live there)
    work = pathlib.Path(args.work) if args.work else pathlib.Path(tempfile.mkdtemp(prefix="tbt-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    config = hf_config(args.model, args.tiny)
    phase = time.perf_counter()
    parameters = build_model(work / "model", config, args.device)
    emit(
        {
            "check": "build",
            "model": f"{args.model}{'-tiny' if args.tiny else ''}",
            "parameters": parameters,
            "path": str(work / "model"),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
            "s": round(time.perf_counter() - phase, 1),
        }
    )
    if args.build_only:
        return 0
    for offload in {"true": (True,), "false": (False,), "both": (False, True)}[args.offload]:
        run(args, work, config, offload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
