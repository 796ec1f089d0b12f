"""LoRA mode in this process (a one-rank gloo world): only adapters train, the export is a peft-format adapter
that means what the learner computed, and checkpoints resume it."""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
from learner_support import build_trainer as build
from learner_support import random_batch
from learner_support import trainer_weights as named
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.loss import token_logprobs
from tbt_gpu.lora_adapter import KEY_PREFIX, WEIGHTS_FILE, write_zero_adapter

LORA = {"rank": 4, "alpha": 8.0, "targets": ["q_proj", "v_proj", "down_proj"]}


def merged_base(model_dir: pathlib.Path, adapter_dir: pathlib.Path, alpha: float, rank: int) -> torch.nn.Module:
    """The base model with the adapter folded in: W + (alpha / rank) * B @ A, as a LoRA server applies it."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tensors = load_file(str(adapter_dir / WEIGHTS_FILE))
    modules = {k.removeprefix(KEY_PREFIX).rsplit(".lora_", 1)[0] for k in tensors}
    with torch.no_grad():
        for name in modules:
            a = tensors[f"{KEY_PREFIX}{name}.lora_A.weight"]
            b = tensors[f"{KEY_PREFIX}{name}.lora_B.weight"]
            model.get_submodule(name).weight += (alpha / rank) * b @ a
    return model.eval()


def test_lora_trains_adapters_only_and_exports_what_it_computed(tmp_path, tiny_model) -> None:
    trainer, ckpt = build(tmp_path, tiny_model, lora=LORA, optimizer={"lr": 0.01})
    info = trainer.model_info
    assert 0 < info.trainable_parameters < info.parameters / 5
    before = named(trainer)
    batch = trainer.load_batch(str(random_batch(tmp_path / "b.jsonl", seed=3)))
    logp_before = trainer.sequence_logprobs(batch)
    result = trainer.train_step(1, batch)
    logp_after = trainer.sequence_logprobs(batch)
    after = named(trainer)
    assert result["skipped"] is False and result["grad_norm"] > 0
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    # Only adapters move, and on the first step only B: with B = 0, A's gradient is exactly zero.
    assert changed == {k for k in before if ".lora_B." in k}, changed
    # The surrogate improved: advantage-weighted log-probabilities rose.
    gain = sum(t.advantage * (logp_after[t.trajectory_id] - logp_before[t.trajectory_id]) for t in batch.trajectories)
    assert gain > 0

    exported = ckpt.export(1)
    assert json.loads((exported / "tbt_export.json").read_text())["mode"] == "lora"
    config = json.loads((exported / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8.0 and config["target_modules"] == sorted(LORA["targets"])
    assert not (exported / "model.safetensors").exists()
    # Same keys and shapes as the zero adapter a LoRA server starts on (written from the config alone).
    zero = tmp_path / "zero"
    assert write_zero_adapter(str(tiny_model), 4, 8.0, LORA["targets"], zero) == 2 * 3  # 2 layers x 3 targets
    ours, theirs = load_file(str(exported / WEIGHTS_FILE)), load_file(str(zero / WEIGHTS_FILE))
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    assert not any(torch.count_nonzero(v) for v in theirs.values())

    # The adapter folded into the base model gives the learner's log-probabilities.
    model = merged_base(tiny_model, exported, 8.0, 4)
    for traj in batch.trajectories[:3]:
        ids = torch.tensor([traj.input_ids])
        with torch.no_grad():
            logp, _ = token_logprobs(model(input_ids=ids).logits, ids)
        logp = (logp[0] * torch.tensor(traj.loss_mask[1:], dtype=torch.float32)).sum()
        assert float(logp) == pytest.approx(logp_after[traj.trajectory_id], abs=1e-4)


def test_lora_checkpoint_resumes_the_adapter(tmp_path, tiny_model) -> None:
    trainer, ckpt = build(tmp_path, tiny_model, lora=LORA, optimizer={"lr": 0.05})
    trainer.train_step(1, trainer.load_batch(str(random_batch(tmp_path / "b.jsonl", seed=4))))
    ckpt.save()
    fresh, fresh_ckpt = build(tmp_path, tiny_model, lora=LORA, optimizer={"lr": 0.05})
    assert fresh_ckpt.load_latest() == 1
    a, b = named(trainer), named(fresh)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_lora_targets_that_match_nothing_name_the_field(tmp_path, tiny_model) -> None:
    with pytest.raises(ValueError, match=r"^lora.targets: no Linear module is named any of \['qkv'\]"):
        build(tmp_path, tiny_model, lora={"rank": 2, "targets": ["qkv"]})
    with pytest.raises(ValueError, match=r"^lora.rank: must be an integer >= 0"):
        LearnerConfig.from_dict({"model": {"path": "m"}, "checkpoint": {"dir": "d"}, "lora": {"rank": -1}})
