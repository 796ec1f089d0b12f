"""The learner's own training steps on one GPU: FSDP2 over NCCL, bf16 compute, a ~1B Llama built from a config.

    torchrun --standalone --nproc-per-node=1 bench/learner/gpu_check.py          # scripts/gpu-check.sh runs this
    python bench/learner/gpu_check.py --device cpu --tiny                         # the code path, on CPU

No weights are read and nothing is downloaded: the model is a randomly initialised LlamaForCausalLM in the shape
of a 1B Llama (hidden 2048, 16 layers, 32 heads / 8 KV heads, MLP 8192, vocabulary 128256, tied embeddings),
saved once to a temporary folder so the learner loads it as it loads any model. Two runs follow, each in a fresh
Trainer: parameters and optimizer on the GPU, then FSDP2's CPU offload. Each times `--steps` Trainer.train_step
calls after one warm-up step on synthetic trajectories, and prints one JSON line per run: tokens/s (every token of
every trajectory), model FLOP/s and MFU against `--peak-tflops` (H200 bf16 dense: about 790), and peak GPU memory.

FLOPs per token: 6 x the matmul parameters (every parameter but the input embedding; the tied output head counts)
plus 12 x layers x hidden x sequence length for attention, and one more forward (2 x parameters + 4 x layers x
hidden x sequence) when the learner recomputes old log-probabilities (its default, `--old-logprobs recompute`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import random
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gpu-learner"))

import torch  # noqa: E402 - after the path set-up
from tbt_gpu.learner.config import (  # noqa: E402
    CheckpointConfig,
    DistributedConfig,
    FSDPConfig,
    LearnerConfig,
    LossConfig,
    ModelConfig,
    OptimizerConfig,
    TrainConfig,
)
from tbt_gpu.learner.distributed import init_distributed  # noqa: E402
from tbt_gpu.learner.trainer import Trainer  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                tie_word_embeddings=True, pad_token_id=0)  # fmt: skip
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True, pad_token_id=0)  # fmt: skip


def build_model(folder: pathlib.Path, shape: dict, device: str) -> LlamaConfig:
    """A random model from a config, initialised on `device` (a 1B init on CPU takes tens of seconds)."""
    config = LlamaConfig(**shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model.save_pretrained(folder, safe_serialization=True)
    del model
    return config


def synthetic_batch(
    path: pathlib.Path, *, count: int, seq_len: int, vocab: int
) -> tuple[pathlib.Path, int]:
    rng = random.Random(0)
    lines, tokens = [], 0
    for i in range(count):
        prompt = seq_len // 4
        ids = [rng.randrange(3, vocab) for _ in range(seq_len)]
        tokens += seq_len
        lines.append(json.dumps({
            "trajectory_id": f"t{i}",
            "input_ids": ids,
            "loss_mask": [0] * prompt + [1] * (seq_len - prompt),
            "old_logprobs": [0.0] * prompt + [-11.0] * (seq_len - prompt),
            "advantage": 1.0 if i % 2 == 0 else -1.0,
        }))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path, tokens


def flops_per_token(config: LlamaConfig, seq_len: int, *, recompute: bool) -> float:
    h, layers, inter = (
        config.hidden_size,
        config.num_hidden_layers,
        config.intermediate_size,
    )
    kv = h // config.num_attention_heads * config.num_key_value_heads
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * inter
    matmul_params = (
        layers * per_layer + h * config.vocab_size
    )  # the output head (tied or not) is a matmul
    train = 6 * matmul_params + 12 * layers * h * seq_len
    return train + (2 * matmul_params + 4 * layers * h * seq_len if recompute else 0)


def run(
    args: argparse.Namespace,
    model_dir: pathlib.Path,
    work: pathlib.Path,
    config: LlamaConfig,
    offload: bool,
):
    cuda = args.device == "cuda"
    cfg = LearnerConfig(
        model=ModelConfig(
            path=str(model_dir),
            dtype="bfloat16" if cuda else "float32",
            max_seq_len=args.seq_len,
        ),
        checkpoint=CheckpointConfig(dir=str(work / f"ckpt-{int(offload)}")),
        distributed=DistributedConfig(
            device=args.device, backend="nccl" if cuda else "gloo"
        ),
        fsdp=FSDPConfig(
            cpu_offload=offload, activation_checkpointing=args.activation_checkpointing
        ),
        optimizer=OptimizerConfig(lr=1e-6),
        loss=LossConfig(old_logprobs=args.old_logprobs),
        train=TrainConfig(micro_batch_tokens=args.micro_batch_tokens),
    )
    info = init_distributed(cfg)
    gc.collect()  # the previous run's trainer, optimizer state and model
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    loaded = time.perf_counter()
    trainer = Trainer(info)
    load_s = time.perf_counter() - loaded
    batch_path, tokens = synthetic_batch(work / "batch.jsonl", count=args.trajectories, seq_len=args.seq_len,
                                         vocab=config.vocab_size)  # fmt: skip
    batch = trainer.load_batch(str(batch_path))
    times, metrics = [], {}
    for step in range(1, args.steps + 2):
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        metrics = trainer.train_step(step, batch)
        if cuda:
            torch.cuda.synchronize()
        if step > 1:  # the first step warms allocators, kernels and the optimizer state
            times.append(time.perf_counter() - started)
    best = min(times)
    flops = (
        flops_per_token(
            config, args.seq_len, recompute=args.old_logprobs == "recompute"
        )
        * tokens
        / best
    )
    result = {
        "run": "cpu_offload" if offload else "resident",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "parameters": trainer.model_info.parameters,
        "tokens_per_step": tokens,
        "trajectories": args.trajectories,
        "seq_len": args.seq_len,
        "micro_batch_tokens": args.micro_batch_tokens,
        "old_logprobs": args.old_logprobs,
        "load_s": round(load_s, 1),
        "step_s": [round(t, 3) for t in times],
        "tokens_per_s": round(tokens / best, 1),
        "model_tflops_per_s": round(flops / 1e12, 2),
        "mfu": round(flops / (args.peak_tflops * 1e12), 4) if cuda else None,
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if cuda
        else None,
        "loss": metrics.get("loss"),
        "grad_norm": metrics.get("grad_norm"),
    }
    del trainer, batch
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="a tiny Llama instead of the 1B shape (CPU path check)",
    )
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch-tokens", type=int, default=8192)
    parser.add_argument(
        "--steps",
        type=int,
        default=4,
        help="timed steps per run, after one warm-up step",
    )
    parser.add_argument(
        "--old-logprobs", choices=["recompute", "sampler"], default="recompute"
    )
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=790.0,
        help="the GPU's dense bf16 peak (H200: ~790)",
    )
    parser.add_argument("--skip-offload", action="store_true")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu-check: torch sees no CUDA device (torch %s)" % torch.__version__,
            file=sys.stderr,
        )
        return 2
    if args.tiny:
        args.seq_len, args.trajectories, args.micro_batch_tokens = (
            min(args.seq_len, 256),
            min(args.trajectories, 4),
            512,
        )
    work = pathlib.Path(tempfile.mkdtemp(prefix="tbt-gpu-check-"))
    built = time.perf_counter()
    config = build_model(work / "model", TINY if args.tiny else LLAMA_1B, args.device)
    print(json.dumps({"model_built_s": round(time.perf_counter() - built, 1), "torch": torch.__version__,
                      "rank": os.environ.get("RANK", "0"), "world_size": os.environ.get("WORLD_SIZE", "1")}),
          flush=True)  # fmt: skip
    # The learner refuses CPU offload on a CPU device (the parameters already live there).
    for offload in (
        (False,) if args.skip_offload or args.device == "cpu" else (False, True)
    ):
        print(json.dumps(run(args, work / "model", work, config, offload)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
