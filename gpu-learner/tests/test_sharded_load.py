"""Loading reads only each rank's shards: peak host memory per rank near the model's size / ranks, not the model."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import torch
from learner_support import GPU_LEARNER, learner_env, write_config
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import init_distributed
from tbt_gpu.learner.model import load_model

RANKS = 4
FIXED_OVERHEAD_BYTES = 48 << 20
"""Allocator arenas, the FSDP bookkeeping and one tensor's rows read at a time: not the model's size."""


def make_model(folder: pathlib.Path) -> pathlib.Path:
    """A random Llama of ~66M parameters (265 MB in float32), stored in bfloat16 as checkpoints usually are."""
    config = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=2048, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                         tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    return folder


def test_each_rank_holds_its_shards_and_the_weights_are_the_checkpoints(tmp_path: pathlib.Path) -> None:
    model = make_model(tmp_path / "model")
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=tmp_path / "ckpt")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(RANKS)]
    run = subprocess.run([*launcher, str(GPU_LEARNER / "tests" / "sharded_load_probe.py"), str(config)],
                         cwd=GPU_LEARNER, env=learner_env(), capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    reports = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in reports) == list(range(RANKS))
    model_bytes = reports[0]["model_bytes"]
    bound = model_bytes / RANKS * 1.5 + FIXED_OVERHEAD_BYTES
    assert bound < model_bytes * 0.6  # loading the whole model on a rank would break the bound
    for report in reports:
        assert report["local_bytes"] <= model_bytes / RANKS + (1 << 20)
        assert report["grew_bytes"] < bound, (report, bound)

    # The shards hold the checkpoint's values (bfloat16 on disk, float32 in the learner), not just the right size.
    trainer_model, _ = load_model(init_distributed(LearnerConfig.load(config)))
    reference = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
    for name, value in trainer_model.state_dict().items():
        assert torch.equal(value.full_tensor(), reference[name]), name
