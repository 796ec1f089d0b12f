"""Checks the memory model against a measured run: the same learner code, at a size this CPU runs for real.

A random Qwen3 of ~130M parameters is saved to a temporary folder; for each (ranks, tokens) case a fresh learner
process (torchrun for several ranks) builds the Trainer from it (load_model: meta, shards, safetensors rows),
takes a short step (AdamW's state appears) and then the measured step, and reports rank 0's peak RSS (VmHWM)
minus its RSS just before the model is built. The memory model predicts the same step under fake tensors at that
world size; on a CPU there is no GPU/host split and no GPU overheads, so the comparison is of the tracked total.

    python -m tbt_gpu.learner.memory_calibration [--ranks 1,2] [--lengths 256,1024]

Prints predicted, measured and their ratio per case; the last line is `calibration: cases=N worst_ratio=R`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

GPU_LEARNER = pathlib.Path(__file__).resolve().parents[2]
MIB = 1024**2


def _status_kib(field: str) -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def make_model(folder: pathlib.Path) -> pathlib.Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    return folder


def learner_config(model: pathlib.Path, checkpoint_dir: pathlib.Path, activation_checkpointing: bool) -> dict:
    return {
        "model": {"path": str(model), "dtype": "float32", "export_dtype": "float32"},
        "checkpoint": {"dir": str(checkpoint_dir)},
        "distributed": {"device": "cpu", "backend": "gloo", "timeout_s": 600},
        "fsdp": {"activation_checkpointing": activation_checkpointing},
        "train": {"micro_batch_tokens": 4096, "logprob_chunk_tokens": 1024},
        "control": {"idle_tick_s": 60},
    }


def worker(config_path: str, tokens: int) -> None:
    """One learner process (a rank): baseline RSS, Trainer from the checkpoint, two steps, peak RSS."""
    import logging

    logging.disable(logging.WARNING)
    import torch

    from .config import LearnerConfig
    from .distributed import init_distributed
    from .memory_model import episode_batch
    from .trainer import Trainer

    torch.set_num_threads(1)
    cfg = LearnerConfig.load(config_path)
    info = init_distributed(cfg)
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):  # the model's code is imported before the baseline: library pages, not tensors
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(cfg.model.path))
    baseline = _status_kib("VmRSS")
    trainer = Trainer(info)
    vocab = trainer.model_info.vocab_size
    trainer._update(1, episode_batch(64, vocab))
    trainer._update(2, episode_batch(tokens, vocab))
    peak = _status_kib("VmHWM")
    if info.rank == 0:
        print(json.dumps({"baseline_kib": baseline, "peak_kib": peak, "measured_bytes": (peak - baseline) * 1024}))


def predict(config: dict, ranks: int, lengths: list[int]) -> dict[int, int]:
    """The memory model's tracked peak per length (a fresh process: the fake process group has its own world)."""
    code = (
        "import json, sys, logging; logging.disable(logging.WARNING)\n"
        "from tbt_gpu.learner.config import LearnerConfig\n"
        "from tbt_gpu.learner.memory_model import estimate, load_hf_config\n"
        "cfg = LearnerConfig.from_dict(json.loads(sys.argv[1]))\n"
        "hf = load_hf_config(cfg.model.path, None, [])\n"
        f"est = estimate(cfg, hf, world_size={ranks}, gpus_per_node={ranks}, lengths={lengths!r}, "
        "target_device='cpu')\n"
        "print(json.dumps({str(o.tokens): o.gpu_tracked for o in est.lengths}))\n"
    )
    out = _run([sys.executable, "-c", code, json.dumps(config)])
    return {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}


MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
"""glibc raises its mmap threshold (up to 32 MiB) after each free of a mapped block, after which freed blocks stay in
the heap and in RSS: the peak RSS then holds dead tensors, up to +30% here. A fixed 64 KiB threshold maps every
tensor on its own and unmaps it when freed, so RSS follows the live tensors, which is what the model predicts (a
GPU's caching allocator is FRAGMENTATION in memory_model). `--glibc-default` measures without it."""


def measure(config_path: pathlib.Path, ranks: int, tokens: int, env: dict[str, str]) -> int:
    module = ["-m", "tbt_gpu.learner.memory_calibration", "--worker", str(config_path), "--tokens", str(tokens)]
    if ranks == 1:
        cmd = [sys.executable, *module]
    else:
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
        cmd = [*torchrun, *module]
    out = _run(cmd, env)
    line = next(x for x in reversed(out.strip().splitlines()) if x.startswith("{"))
    return int(json.loads(line)["measured_bytes"])


def _run(cmd: list[str], extra: dict[str, str] | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(GPU_LEARNER), "OMP_NUM_THREADS": "1", **(extra or {})}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    run = subprocess.run(cmd, env=env, cwd=str(GPU_LEARNER), capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {run.returncode}:\n{run.stderr[-3000:]}")
    return run.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbt_gpu.learner.memory_calibration")
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--lengths", default="256,1024")
    parser.add_argument("--activation-checkpointing", choices=["true", "false"], default="false")
    parser.add_argument("--glibc-default", action="store_true", help="measure with glibc's default malloc tuning")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.tokens)
        return 0
    ranks_list = [int(r) for r in args.ranks.split(",")]
    lengths = [int(n) for n in args.lengths.split(",")]
    worst = 1.0
    cases = 0
    with tempfile.TemporaryDirectory(prefix="tbt-memory-calibration-") as tmp:
        folder = pathlib.Path(tmp)
        model = make_model(folder / "model")
        config = learner_config(model, folder / "ckpt", args.activation_checkpointing == "true")
        config_path = folder / "learner.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        malloc = "glibc default" if args.glibc_default else f"{MALLOC_ENV}"
        print(f"model: random Qwen3 in {model}; fp32 on CPU, activation_checkpointing={args.activation_checkpointing}, "
              f"malloc {malloc}")  # fmt: skip
        for ranks in ranks_list:
            started = time.perf_counter()
            predicted = predict(config, ranks, lengths)
            print(f"ranks={ranks}: memory model ran in {time.perf_counter() - started:.0f}s", flush=True)
            for tokens in lengths:
                started = time.perf_counter()
                measured = measure(config_path, ranks, tokens, {} if args.glibc_default else MALLOC_ENV)
                ratio = predicted[tokens] / measured
                worst = ratio if abs(ratio - 1) > abs(worst - 1) else worst
                cases += 1
                print(
                    f"ranks={ranks} tokens={tokens}: predicted {predicted[tokens] / MIB:.0f} MiB, measured "
                    f"{measured / MIB:.0f} MiB (rank 0 VmHWM - RSS before the model), ratio {ratio:.3f} "
                    f"[{time.perf_counter() - started:.0f}s]",
                    flush=True,
                )
    print(f"calibration: cases={cases} worst_ratio={worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
