"""Config validation, the resolved manifest, and the multi-node launch dry run."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from learner_support import GPU_LEARNER, learner_env

from tbt_gpu.learner.config import LearnerConfig, LossConfig, OptimizerConfig, gpu_grpo_preset
from tbt_gpu.learner.launch import Topology, node_commands

BASE = {"model": {"path": "/models/m"}, "checkpoint": {"dir": "/ckpt"}}


def test_defaults_pin_the_reference_grpo_recipe() -> None:
    cfg = LearnerConfig.from_dict(BASE)
    assert (cfg.optimizer.lr, cfg.optimizer.betas, cfg.optimizer.eps, cfg.optimizer.weight_decay) == (
        1e-6, (0.9, 0.999), 1e-8, 0.0,
    )  # fmt: skip
    assert (cfg.loss.eps_low, cfg.loss.eps_high, cfg.loss.dual_clip_c, cfg.loss.aggregation) == (
        0.2, 0.2, 3.0, "token-mean",
    )  # fmt: skip
    assert cfg.train.grad_clip == 1.0


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"optimizer": {"lr": 0}}, "optimizer.lr"),
        ({"optimizer": {"betas": [0.9]}}, "optimizer.betas"),
        ({"optimizer": {"weight_decay": -1}}, "optimizer.weight_decay"),
        ({"loss": {"eps_low": 1.5}}, "loss.eps_low"),
        ({"loss": {"dual_clip_c": 1.0}}, "loss.dual_clip_c"),
        ({"loss": {"aggregation": "seq-mean"}}, "loss.aggregation"),
        ({"train": {"micro_batch_tokens": 0}}, "train.micro_batch_tokens"),
        ({"train": {"grad_clip": float("nan")}}, "train.grad_clip"),
        ({"distributed": {"device": "tpu"}}, "distributed.device"),
        ({"distributed": {"device": "cpu", "backend": "nccl"}}, "distributed.backend"),
        ({"checkpoint": {"dir": "/c", "keep_last": 0}}, "checkpoint.keep_last"),
        ({"control": {"port": 70000}}, "control.port"),
        ({"model": {"path": ""}}, "model.path"),
        ({"optimizer": {"lr": 1e-6, "momentum": 0.9}}, "optimizer.momentum"),
        ({"optimiser": {}}, "optimiser"),
    ],
)
def test_invalid_values_name_their_field(patch: dict, field: str) -> None:
    data = json.loads(json.dumps(BASE))
    for section, values in patch.items():
        data[section] = {**data.get(section, {}), **values}
    with pytest.raises(ValueError, match="^" + re.escape(field) + "[:\\[]"):
        LearnerConfig.from_dict(data)


def test_resolve_and_manifest() -> None:
    cfg = LearnerConfig.from_dict(BASE)
    with pytest.raises(ValueError, match="resolve"):
        cfg.to_manifest()
    cpu = cfg.resolve(cuda_available=False, world_size=2).to_manifest()
    assert cpu["distributed"] == {"device": "cpu", "backend": "gloo", "world_size": 2, "timeout_s": 1800.0}
    assert cpu["model"]["dtype"] == "float32"
    gpu = cfg.resolve(cuda_available=True, world_size=8).to_manifest()
    assert (gpu["distributed"]["backend"], gpu["model"]["dtype"], gpu["model"]["export_dtype"]) == (
        "nccl", "bfloat16", "bfloat16",
    )  # fmt: skip
    assert gpu["optimizer"] == {"name": "adamw", "lr": 1e-6, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    json.dumps(gpu)  # plain JSON all the way down
    with pytest.raises(ValueError, match="distributed.world_size"):
        LearnerConfig.from_dict({**BASE, "distributed": {"world_size": 4}}).resolve(cuda_available=True, world_size=8)
    with pytest.raises(ValueError, match="distributed.device"):
        LearnerConfig.from_dict({**BASE, "distributed": {"device": "cuda"}}).resolve(cuda_available=False, world_size=1)


def test_components_are_keyword_only_slotted_dataclasses() -> None:
    with pytest.raises(TypeError):
        OptimizerConfig(1e-5)  # type: ignore[misc]  # positional use is what this checks
    assert not hasattr(LossConfig(), "__dict__")
    preset = gpu_grpo_preset(model_path="/m", checkpoint_dir="/c")
    assert preset.distributed.backend == "nccl" and preset.optimizer.weight_decay == 0.0


def test_launch_commands_per_node() -> None:
    topology = Topology(nodes=3, gpus_per_node=8, rdzv_endpoint="10.0.0.1:29400", rdzv_id="c1")
    commands = node_commands(topology, "/etc/l.json", resume=True)
    assert commands[2] == (
        "python -m tbt_gpu.learner.bound_torchrun --nnodes 3 --nproc-per-node 8 --node-rank 2 --rdzv-backend c10d "
        "--rdzv-endpoint 10.0.0.1:29400 --rdzv-id c1 -m tbt_gpu.learner --config /etc/l.json --node-rank 2 --resume"
    )
    assert node_commands(Topology(nodes=1, gpus_per_node=2), "/l.json", resume=False) == [
        "python -m tbt_gpu.learner.bound_torchrun --standalone --nproc-per-node=2 -m tbt_gpu.learner --config /l.json"
    ]
    with pytest.raises(ValueError, match="gpus_per_node"):
        Topology(nodes=1, gpus_per_node=0)
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        Topology(nodes=2, gpus_per_node=1)


def test_launch_dry_run_prints_the_plan_and_starts_nothing(tmp_path) -> None:
    config = tmp_path / "learner.json"
    config.write_text(json.dumps(BASE))
    script = (
        "import sys; from tbt_gpu.learner import launch; "
        "code = launch.main(['--nodes', '3', '--gpus-per-node', '8', '--rdzv-endpoint', 'head:29400', "
        f"'--config', {str(config)!r}, '--dry-run']); "
        "assert 'torch' not in sys.modules, 'the dry run imported torch'; sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=learner_env(),
                          cwd=str(GPU_LEARNER), timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "world size 24" in out
    for node in range(3):
        assert f"--node-rank {node} --rdzv-backend c10d --rdzv-endpoint head:29400 --rdzv-id tbt-learner" in out
    manifest = json.loads(out[out.index("{") :])
    assert manifest["distributed"]["world_size"] == 24
    assert manifest["distributed"]["backend"] == "nccl"
    assert manifest["optimizer"]["weight_decay"] == 0.0
    refused = subprocess.run([sys.executable, "-m", "tbt_gpu.learner.launch", "--nodes", "1", "--gpus-per-node", "1",
                              "--config", str(config)], capture_output=True, text=True,
                             env=learner_env(), cwd=str(GPU_LEARNER), timeout=60)  # fmt: skip
    assert refused.returncode == 2 and "--dry-run" in refused.stderr
