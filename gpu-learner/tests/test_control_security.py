"""Finding 15: the learner's control endpoint and the policy server's weight reload are not open to every
local process (per-run bearer token, paths restricted to the campaign's folders), and RNG state loads with
torch.load(weights_only=True)."""

from __future__ import annotations

import os
import pathlib
import pickle
import random
import stat

import torch
from learner_support import Learner, make_tiny_model, random_batch, write_config

from tbt_gpu.learner.checkpoint import _rng_state, load_rng_file


def test_finding_15_learner_control_needs_the_run_token_and_campaign_batches(tmp_path: pathlib.Path) -> None:
    campaign = tmp_path / "campaign"
    (campaign / "batches").mkdir(parents=True)
    model = make_tiny_model(tmp_path / "model")
    inside = random_batch(campaign / "batches" / "step-1.jsonl", seed=1)
    outside = random_batch(tmp_path / "elsewhere.jsonl", seed=1)
    sneaky = campaign / "batches" / "link.jsonl"
    sneaky.symlink_to(outside)
    ckpt = campaign / "checkpoints"
    config = write_config(campaign / "learner.json", model=model, checkpoint_dir=ckpt)
    learner = Learner(config, ckpt)
    try:
        token_file = ckpt / "control.token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert learner.token not in (ckpt / "control.json").read_text()
        for route in ("/health", "/manifest"):
            assert learner.call("GET", route, token="")[0] == 401
            assert learner.call("GET", route, token="wrong")[0] == 401
        status, body = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(inside)}, token="x")
        assert status == 401 and body["code"] == "unauthorized"
        for ref in (outside, sneaky, campaign / ".." / "elsewhere.jsonl"):
            status, body = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(ref)})
            assert status == 403 and body["code"] == "path_refused", (ref, body)
        assert learner.call("GET", "/health")[1]["step"] == 0
        status, body = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(inside)})
        assert status == 200, body
        assert learner.token not in learner.output()
    finally:
        assert learner.stop() == 0


class _RunsCode:
    def __reduce__(self):
        return (os.system, (f"touch {_RunsCode.marker}",))

    marker = ""


def test_finding_15_rng_state_loads_with_weights_only(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "rng-rank0.pt"
    random.seed(11)
    torch.save(_rng_state(), good)
    expected = random.random()
    random.seed(99)
    assert load_rng_file(good) is True
    assert random.random() == expected

    _RunsCode.marker = str(tmp_path / "ran")
    crafted = tmp_path / "crafted.pt"
    with open(crafted, "wb") as f:
        pickle.dump({"python": _RunsCode()}, f)
    assert load_rng_file(crafted) is False
    assert not os.path.exists(_RunsCode.marker), "a crafted RNG file ran code"
