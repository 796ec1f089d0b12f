"""Shared helpers for the learner tests: a tiny random Llama, batch files, configs, a service runner."""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

GPU_LEARNER = pathlib.Path(__file__).resolve().parents[1]
VOCAB = 96


def make_tiny_model(folder: pathlib.Path, seed: int = 0) -> pathlib.Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=48,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def make_tiny_hybrid_model(folder: pathlib.Path, seed: int = 0) -> pathlib.Path:
    """A tiny random Qwen3.5 (the reference's hybrid family): Gated-DeltaNet layers with one full-attention layer."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(seed)
    Qwen3_5ForCausalLM(config).save_pretrained(folder)
    return folder


def trajectory(tid: str, ids: list[int], prompt_len: int, advantage: float, old: list[float] | None = None) -> dict:
    record: dict[str, Any] = {
        "trajectory_id": tid,
        "input_ids": ids,
        "loss_mask": [0] * prompt_len + [1] * (len(ids) - prompt_len),
        "advantage": advantage,
    }
    if old is not None:
        record["old_logprobs"] = old
    return record


def random_batch(path: pathlib.Path, *, seed: int, count: int = 6, vocab: int = VOCAB, max_len: int = 40,
                 with_old: bool = False) -> pathlib.Path:  # fmt: skip
    """Uneven lengths and advantages of both signs (group-normalised style).

    with_old: every other row carries sampled log-probabilities near the tiny model's (about -log VOCAB),
    so ratios spread around 1 and some tokens clip.
    """
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        length = rng.randint(6, max_len)
        prompt = rng.randint(2, length - 2)
        ids = [rng.randrange(3, vocab) for _ in range(length)]
        advantage = (1.0 if i % 3 == 0 else -0.5) * (1 + i / 10)
        old = None
        if with_old and i % 2 == 0:
            old = [0.0] * prompt + [round(-4.56 + rng.uniform(-0.4, 0.4), 4) for _ in range(length - prompt)]
        lines.append(json.dumps(trajectory(f"s{seed}-t{i}", ids, prompt, advantage, old)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_config(
    path: pathlib.Path, *, model: pathlib.Path, checkpoint_dir: pathlib.Path, **sections: dict
) -> pathlib.Path:
    data: dict[str, Any] = {
        "model": {"path": str(model), "dtype": "float32"},
        "checkpoint": {"dir": str(checkpoint_dir), "keep_last": 2},
        "distributed": {"device": "cpu", "backend": "gloo", "timeout_s": 120},
        "optimizer": {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-3, "weight_decay": 0.0},
        "train": {"grad_clip": 1.0, "micro_batch_tokens": 64, "seed": 0},
        "control": {"port": 0, "idle_tick_s": 5},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def learner_env(hooks: dict | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(GPU_LEARNER) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    for name in ("TBT_LEARNER_TEST_HOOKS", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID"):  # fmt: skip
        env.pop(name, None)
    if hooks:
        env["TBT_LEARNER_TEST_HOOKS"] = json.dumps(hooks)
    return env


def learner_cmd(nproc: int, config: pathlib.Path, *extra: str) -> list[str]:
    """torchrun for several ranks; one rank runs as a plain process (same code path, one torch import less)."""
    launcher = [sys.executable, "-m", "tbt_gpu.learner.bound_torchrun", "--standalone", "--nproc-per-node", str(nproc)]
    return [*(launcher if nproc > 1 else [sys.executable]), "-m", "tbt_gpu.learner", "--config", str(config), *extra]


class Learner:
    """A learner service process (torchrun when nproc > 1) in its own process group."""

    def __init__(self, config: pathlib.Path, checkpoint_dir: pathlib.Path, *, nproc: int = 1, resume: bool = False,
                 hooks: dict | None = None, log: pathlib.Path | None = None) -> None:  # fmt: skip
        self.checkpoint_dir = checkpoint_dir
        (checkpoint_dir / "control.json").unlink(missing_ok=True)
        self.log_path = log or checkpoint_dir.parent / f"learner-{time.time_ns()}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        extra = ["--resume"] if resume else []
        self.proc = subprocess.Popen(
            learner_cmd(nproc, config, *extra), env=learner_env(hooks), stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=str(GPU_LEARNER),
        )  # fmt: skip
        self.url = self._wait_ready()

    def _wait_ready(self, timeout: float = 90.0) -> str:
        deadline = time.monotonic() + timeout
        port_file = self.checkpoint_dir / "control.json"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"learner exited with {self.proc.returncode}:\n{self.output()}")
            if port_file.exists():
                info = json.loads(port_file.read_text())
                self.token = (self.checkpoint_dir / "control.token").read_text().strip()
                return f"http://{info['host']}:{info['port']}"
            time.sleep(0.1)
        raise TimeoutError(f"learner not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        if not self.log.closed:  # stop() closes it; the file is still there to read
            self.log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 60.0,
             token: str | None = None) -> tuple[int, dict]:  # fmt: skip
        data = json.dumps(body).encode() if body is not None else None
        token = self.token if token is None else token
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            try:
                self.call("POST", "/shutdown", {})
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()
        return self.proc.returncode


def read_export(folder: pathlib.Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def max_abs_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def build_trainer(tmp_path: pathlib.Path, model: pathlib.Path, **sections: dict) -> tuple[Any, Any]:
    """A Trainer and its Checkpointer in this process (a one-rank gloo world), config sections as given."""
    from tbt_gpu.learner.checkpoint import Checkpointer
    from tbt_gpu.learner.config import LearnerConfig
    from tbt_gpu.learner.distributed import init_distributed
    from tbt_gpu.learner.trainer import Trainer

    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=tmp_path / "ckpt", **sections)
    trainer = Trainer(init_distributed(LearnerConfig.load(config)))
    return trainer, Checkpointer(trainer)


def trainer_weights(trainer: Any) -> dict:
    """A full copy of every tensor of the trainer's (sharded) model, by name."""
    return {k: v.full_tensor().clone() for k, v in trainer.model.state_dict().items()}
