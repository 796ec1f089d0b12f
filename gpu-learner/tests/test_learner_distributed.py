"""Two gloo ranks under torchrun give the same update as one rank on the same batch.

This holds only because the loss is a token-mean over the GLOBAL token count: the two ranks hold
different numbers of tokens, so a per-rank mean would weight their tokens differently.
The one-rank run is the same Trainer in this process (a one-rank gloo world), which saves a start.
"""

from __future__ import annotations

import pathlib

import pytest
from learner_support import Learner, make_tiny_model, max_abs_diff, random_batch, read_export, write_config
from safetensors.torch import load_file

from tbt_gpu.learner.batch import prompt_rows, shard_for_ranks
from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import init_distributed
from tbt_gpu.learner.trainer import Trainer


def test_two_ranks_match_one_rank(tmp_path: pathlib.Path) -> None:
    model = make_tiny_model(tmp_path / "model")
    batch_path = random_batch(tmp_path / "batch.jsonl", seed=7, count=9, with_old=True)
    # loss.old_logprobs "sampler": the sampled log-probabilities are the ratio's denominator, so ratios leave 1
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=tmp_path / "ckpt",
                          train={"micro_batch_tokens": 64},
                          loss={"old_logprobs": "sampler"})  # fmt: skip

    learner = Learner(config, tmp_path / "ckpt", nproc=2)
    try:
        status, health = learner.call("GET", "/health")
        assert status == 200 and health["world_size"] == 2 and health["step"] == 0
        status, answer = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(batch_path)})
        assert status == 200, answer
        status, export = learner.call("POST", "/export", {"step_id": 1})
        assert status == 200, export
    finally:
        code = learner.stop()
    assert code == 0, learner.output()
    two, w2 = answer["result"], read_export(pathlib.Path(export["path"]))

    reference = Trainer(init_distributed(LearnerConfig.load(config)))
    batch = reference.load_batch(str(batch_path))
    shares = shard_for_ranks(prompt_rows(batch.trajectories, 64, share=True), 2)
    tokens = [sum(t.tokens for r in share for t in r.members) for share in shares]
    assert tokens[0] != tokens[1]  # the case a per-rank mean gets wrong
    one = reference.train_step(1, batch)
    w1 = {k: v.full_tensor() for k, v in reference.model.state_dict().items() if k in w2}

    assert one["tokens"] == two["tokens"] == batch.token_count
    assert one["clip_fraction"] > 0  # the sampled log-probabilities make some ratios leave [0.8, 1.2]
    for key in (
        "loss",
        "grad_norm",
        "clip_fraction",
        "dual_clip_fraction",
        "entropy",
        "sampler_log_ratio_mean",
        "sampler_kl",
    ):
        assert two[key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key
    initial = load_file(str(model / "model.safetensors"))
    moved = max_abs_diff(w1, {k: v for k, v in initial.items() if k in w1})
    assert moved > 1e-3  # the step did change the weights (lr 1e-2)
    assert max_abs_diff(w1, w2) < 1e-5, (max_abs_diff(w1, w2), moved)
