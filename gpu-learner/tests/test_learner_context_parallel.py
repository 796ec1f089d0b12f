"""Context parallelism in the trainer: two gloo ranks splitting every episode's sequence give the one-rank update.

The two ranks form one CP group (data-parallel degree 1): each runs every micro-batch on its half of each row.
The reference is the same Trainer at one rank without CP, in this process.
"""

from __future__ import annotations

import pathlib

import pytest
from learner_support import (
    Learner,
    make_tiny_hybrid_model,
    make_tiny_model,
    max_abs_diff,
    random_batch,
    read_export,
    write_config,
)

from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import init_distributed
from tbt_gpu.learner.trainer import Trainer


@pytest.mark.parametrize("family", ["llama", "qwen3_5"])
def test_two_context_parallel_ranks_match_one_rank(tmp_path: pathlib.Path, family: str) -> None:
    make = make_tiny_hybrid_model if family == "qwen3_5" else make_tiny_model
    model = make(tmp_path / "model")
    batch_path = random_batch(tmp_path / "batch.jsonl", seed=11, count=5, with_old=True)
    common = {"loss": {"old_logprobs": "sampler"}, "optimizer": {"lr": 1e-2}}
    cp_config = write_config(tmp_path / "cp.json", model=model, checkpoint_dir=tmp_path / "ckpt",
                             train={"micro_batch_tokens": 24, "context_parallel": 2, "logprob_chunk_tokens": 7},
                             **common)  # fmt: skip
    learner = Learner(cp_config, tmp_path / "ckpt", nproc=2)
    try:
        status, answer = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(batch_path)})
        assert status == 200, answer
        status, export = learner.call("POST", "/export", {"step_id": 1})
        assert status == 200, export
    finally:
        code = learner.stop()
    assert code == 0, learner.output()
    split, w_split = answer["result"], read_export(pathlib.Path(export["path"]))

    one_config = write_config(tmp_path / "one.json", model=model, checkpoint_dir=tmp_path / "ckpt1",
                              train={"micro_batch_tokens": 64, "share_prompts": False}, **common)  # fmt: skip
    reference = Trainer(init_distributed(LearnerConfig.load(one_config)))
    batch = reference.load_batch(str(batch_path))
    one = reference.train_step(1, batch)
    w_one = {k: v.full_tensor() for k, v in reference.model.state_dict().items() if k in w_split}

    assert split["tokens"] == one["tokens"] == batch.token_count
    for key in ("loss", "grad_norm", "clip_fraction", "entropy", "sampler_kl"):
        assert split[key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key
    assert one["grad_norm"] > 0 and one["clip_fraction"] > 0
    assert max_abs_diff(w_one, w_split) < 1e-5
