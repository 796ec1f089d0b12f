"""The memory model's persistent bytes against the arithmetic, and its peak against the sequence length.

The estimate runs in a subprocess: it needs a fake process group of its own world size, which cannot share a
process with the gloo group other learner tests create.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

from learner_support import GPU_LEARNER, learner_env

WORLD = 8
CONFIG = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


def run_estimate() -> dict:
    code = (
        "import json, sys, logging\n"
        "logging.disable(logging.WARNING)\n"
        "import torch\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "from tbt_gpu.learner.config import LearnerConfig\n"
        "from tbt_gpu.learner.memory_model import estimate\n"
        "hf = LlamaConfig(**json.loads(sys.argv[1]))\n"
        "cfg = LearnerConfig.from_dict({'model': {'path': '/nonexistent'}, 'checkpoint': {'dir': '/tmp'},\n"
        "    'fsdp': {'cpu_offload': True, 'activation_checkpointing': True}})\n"
        "est = estimate(cfg, hf, world_size=int(sys.argv[2]), gpus_per_node=8, lengths=[128, 1024])\n"
        "with torch.device('meta'):\n"
        "    shapes = [list(p.shape) for p in LlamaForCausalLM(hf).parameters()]\n"
        "print(json.dumps({'params': est.sharded_param_bytes, 'grads': est.sharded_grad_bytes,\n"
        "    'opt': est.opt_state_bytes, 'peaks': [o.gpu_tracked for o in est.lengths], 'shapes': shapes}))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(CONFIG), str(WORLD)],
        env=learner_env(), cwd=str(GPU_LEARNER), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_sharded_bytes_are_the_arithmetic_and_the_peak_grows_with_length() -> None:
    out = run_estimate()
    # FSDP2 gives rank 0 ceil(rows / W) rows of every parameter (the last ranks hold the padding).
    shard = sum(math.ceil(s[0] / WORLD) * math.prod(s[1:]) * 4 for s in out["shapes"])
    assert out["params"] == shard
    assert out["grads"] == shard
    # AdamW: exp_avg and exp_avg_sq like each shard, plus one float32 step counter per parameter.
    assert out["opt"] == 2 * shard + 4 * len(out["shapes"])
    total = sum(math.prod(s) for s in out["shapes"])
    assert abs(shard - total * 4 / WORLD) < 0.02 * shard
    short, long = out["peaks"]
    assert long > short * 1.5, out["peaks"]
