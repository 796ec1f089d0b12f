"""Tokens per second of the learner's train_step against a bare torch loop on the same model and batch.

    $(cat .tools/python-venv)/bin/python bench/learner/bench_learner.py            # SmolLM2-135M (model store)
    ... bench_learner.py --model /path/to/hf-folder --trajectories 16 --seq-len 256 --steps 5
    ... bench_learner.py --tiny                                                    # a random tiny Llama

Both sides run in this process, on the same device, from the same weights, with the same micro-batches
(same token budget and padding) and AdamW with the same hyperparameters. The bare loop is a plain
Hugging Face model with an advantage-weighted log-likelihood loss, gradient clipping and optimizer.step().
The learner side is Trainer.train_step (FSDP2 in a one-rank world, batch planning, clipped surrogate,
metrics, finiteness guards); checkpointing is not included. The learner projects only the positions it trains
on onto the vocabulary, the bare loop every position (the plain way). Steps alternate between the two sides, so
load from other processes hits both alike; the ratio is printed from the best and the median step of each.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gpu-learner"))

import torch  # noqa: E402 - after the path set-up
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from tbt_gpu.learner.batch import Batch, Trajectory, pack_micro_batches, prompt_rows  # noqa: E402
from tbt_gpu.learner.config import (  # noqa: E402
    CheckpointConfig,
    DistributedConfig,
    LearnerConfig,
    ModelConfig,
    OptimizerConfig,
    TrainConfig,
)
from tbt_gpu.learner.distributed import init_distributed  # noqa: E402
from tbt_gpu.learner.trainer import Trainer  # noqa: E402


def tiny_model(folder: pathlib.Path) -> pathlib.Path:
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, pad_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def synthetic_batch(path: pathlib.Path, *, count: int, seq_len: int, vocab: int, seed: int) -> pathlib.Path:
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        length = rng.randint(seq_len // 2, seq_len)
        prompt = length // 3
        lines.append(json.dumps({
            "trajectory_id": f"t{i}",
            "input_ids": [rng.randrange(3, vocab) for _ in range(length)],
            "loss_mask": [0] * prompt + [1] * (length - prompt),
            "advantage": 1.0 if i % 2 == 0 else -1.0,
        }))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def padded(group: list[Trajectory]) -> tuple[torch.Tensor, ...]:
    """Right-padded input ids, attention mask, loss mask and advantages: the plain way to batch."""
    width = max(t.length for t in group)
    ids = torch.zeros((len(group), width), dtype=torch.long)
    attention = torch.zeros((len(group), width), dtype=torch.long)
    mask = torch.zeros((len(group), width), dtype=torch.float32)
    for i, traj in enumerate(group):
        ids[i, : traj.length] = torch.tensor(traj.input_ids)
        attention[i, : traj.length] = 1
        mask[i, : traj.length] = torch.tensor(traj.loss_mask, dtype=torch.float32)
    return ids, attention, mask, torch.tensor([t.advantage for t in group])


class BareLoop:
    """What a plain torch training step on this batch looks like."""

    def __init__(self, model_path: pathlib.Path, cfg: LearnerConfig, device: torch.device) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device)
        self.model.config.use_cache = False
        self.model.train()
        opt = cfg.optimizer
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=opt.lr, betas=opt.betas, eps=opt.eps,
                                           weight_decay=opt.weight_decay)  # fmt: skip
        self.grad_clip = cfg.train.grad_clip
        self.device = device

    def step(self, micro_batches: list[list[Trajectory]], global_tokens: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        for group in micro_batches:
            ids, attention, mask, advantages = (t.to(self.device) for t in padded(group))
            logits = self.model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
            logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            loss = -(logp * advantages[:, None] * mask[:, 1:]).sum() / global_tokens
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="Hugging Face model folder (default: SmolLM2-135M from the model store)")
    parser.add_argument("--tiny", action="store_true", help="use a random tiny Llama instead")
    parser.add_argument("--trajectories", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=96)
    parser.add_argument("--micro-batch-tokens", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (after one warm-up step each)")
    args = parser.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-learner-"))
    if args.tiny:
        model_path = tiny_model(work / "model")
    elif args.model:
        model_path = pathlib.Path(args.model)
    else:
        from tbt_gpu.model_store import ensure_model

        model_path = ensure_model()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = LearnerConfig(
        model=ModelConfig(path=str(model_path), dtype="float32"),
        checkpoint=CheckpointConfig(dir=str(work / "ckpt")),
        distributed=DistributedConfig(device=device, backend="nccl" if device == "cuda" else "gloo"),
        optimizer=OptimizerConfig(lr=1e-6),
        train=TrainConfig(micro_batch_tokens=args.micro_batch_tokens),
    )
    info = init_distributed(cfg)
    trainer = Trainer(info)
    bare = BareLoop(model_path, info.config, info.device)
    batch_path = synthetic_batch(work / "batch.jsonl", count=args.trajectories, seq_len=args.seq_len,
                                 vocab=trainer.model_info.vocab_size, seed=0)  # fmt: skip
    batch: Batch = trainer.load_batch(str(batch_path))
    # the learner's own grouping (every synthetic prompt differs, so one trajectory per row)
    rows = prompt_rows(batch.trajectories, args.micro_batch_tokens, share=False)
    micro_batches = [[r.members[0] for r in g] for g in pack_micro_batches(rows, args.micro_batch_tokens)]
    tokens = sum(t.length for t in batch.trajectories)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    times: dict[str, list[float]] = {"learner": [], "bare": []}
    step_id = 0
    for i in range(args.steps + 1):
        for side in ("learner", "bare"):
            sync()
            started = time.perf_counter()
            if side == "learner":
                step_id += 1
                trainer.train_step(step_id, batch)
            else:
                bare.step(micro_batches, batch.token_count)
            sync()
            if i > 0:  # the first step of each side warms allocators and lazy initialisation
                times[side].append(time.perf_counter() - started)

    learner_tps = tokens / statistics.median(times["learner"])
    bare_tps = tokens / statistics.median(times["bare"])
    # On a shared machine interference only ever adds time, so the fastest step of each side is the
    # steadier estimate; the medians are printed too.
    best_ratio = min(times["bare"]) / min(times["learner"])
    print(json.dumps({
        "model": str(model_path),
        "device": device,
        "trajectories": len(batch.trajectories),
        "tokens_per_step": tokens,
        "micro_batches": len(micro_batches),
        "steps_timed": args.steps,
        "learner_step_s": [round(t, 3) for t in times["learner"]],
        "bare_step_s": [round(t, 3) for t in times["bare"]],
        "learner_tokens_per_s": round(learner_tps, 1),
        "bare_tokens_per_s": round(bare_tps, 1),
    }, indent=2))  # fmt: skip
    print(f"learner/bare tokens-per-second ratio: {best_ratio:.3f} (best step each), "
          f"{learner_tps / bare_tps:.3f} (median step each)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
