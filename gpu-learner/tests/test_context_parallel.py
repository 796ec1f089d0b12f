"""Context parallelism on CPU/gloo: a sequence split over 2 or 4 ranks scores and trains as on one rank.

One spawn of 4 gloo ranks (module fixture) runs every case: CP groups of 2 ({0,1}, {2,3}; each pair its own
sequence) and one group of 4, on a tiny Llama (GQA: 2 kv heads, so CP 4 repeats them; also 6 heads and 3 kv heads
at CP 2) and a tiny hybrid Qwen3.5 (Gated-DeltaNet + full attention; also with activation checkpointing). Each rank
also computes the one-rank reference itself (same seed, same model).
Gradients: each rank backpropagates its slice's share of the token-mean; the CP group's sum is compared, as FSDP's
reduce-scatter would sum it. Negative controls show the checks would catch a CP path that does not mix the slices.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tbt_gpu.learner import context_parallel as cpm
from tbt_gpu.learner.batch import PromptRow, Trajectory, collate
from tbt_gpu.learner.loss import predicted_logprobs

VOCAB = 96
PAD = 0
WORLD = 4
PROMPT = 23
LENGTHS = {0: 75, 1: 98}
"""Sequence length by group index: 75 needs padding for both CP sizes; CP 4 leaves rank 0 prompt only."""


def tiny_llama(heads: int = 4, kv_heads: int = 2) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=8 * heads, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
                         tie_word_embeddings=True, pad_token_id=PAD, use_cache=False)  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).float()


def tiny_qwen3_5() -> torch.nn.Module:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                               linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                               layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
                               max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=PAD,
                               use_cache=False)  # fmt: skip
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM(config).float()


MODELS = {"llama": tiny_llama, "qwen3_5": tiny_qwen3_5}


def episode(length: int) -> Trajectory:
    g = torch.Generator().manual_seed(length)
    ids = torch.randint(3, VOCAB, (length,), generator=g).tolist()
    mask = [0] * PROMPT + [1] * (length - PROMPT)
    mask[PROMPT + 10 : PROMPT + 20] = [0] * len(mask[PROMPT + 10 : PROMPT + 20])  # e.g. a tool's output
    return Trajectory("t", tuple(ids), tuple(mask), 1.0, None, 1)


def scored_logprobs(model: torch.nn.Module, mb: Any) -> torch.Tensor:
    """As Trainer._scored_logprobs (temperature 1)."""
    logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids,
                   logits_to_keep=mb.scored).logits  # fmt: skip
    return predicted_logprobs(logits[mb.gather], mb.targets)[0]


def slice_diff(logp: torch.Tensor, ref_logp: torch.Tensor, cp: cpm.CPGroup, length: int) -> float:
    """Largest |CP - reference| log-probability over the group; this rank compares the positions it holds.

    Position t predicts token t + 1: it is the reference's column t - (PROMPT - 1) when PROMPT - 1 <= t < length - 1.
    """
    width = cpm.padded_length(length, cp.size) // cp.size
    lo, hi = max(cp.rank * width, PROMPT - 1), min((cp.rank + 1) * width, length - 1)
    diff = torch.zeros(1)
    if hi > lo:
        assert logp.shape == (1, hi - lo), (logp.shape, lo, hi)
        diff[0] = (logp.detach() - ref_logp[:, lo - PROMPT + 1 : hi - PROMPT + 1].detach()).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX, group=cp.group)
    return float(diff)


def compare(build: Any, cp: cpm.CPGroup, length: int, checkpointing: bool = False) -> dict[str, float]:
    model = build()
    if checkpointing:
        # as model.load_model does: the recomputation repeats the collectives, in the same order on every rank
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    traj = episode(length)
    row = PromptRow(PROMPT, (traj,))

    ref_mb = collate([row], PAD)
    ref_logp = scored_logprobs(model, ref_mb)
    (-(ref_logp * ref_mb.loss_mask).sum() / traj.tokens).backward()
    ref_grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    mb = cpm.cp_micro_batch([row], PAD, cp)
    with cpm.context_parallel(model, cp):
        logp = scored_logprobs(model, mb)
        # this rank's share of the global token-mean
        (-(logp * mb.loss_mask).sum() / traj.tokens).backward()
    tokens = torch.tensor([mb.tokens])
    dist.all_reduce(tokens, group=cp.group)
    for p in model.parameters():
        dist.all_reduce(p.grad, group=cp.group)
    grad_diff = max(float((p.grad - ref_grads[k]).abs().max()) for k, p in model.named_parameters())
    result = {
        "tokens": int(tokens) - traj.tokens,
        "logp_diff": slice_diff(logp, ref_logp, cp, length),
        "grad_diff": grad_diff,
        "grad_scale": max(float(g.abs().max()) for g in ref_grads.values()),
        "attn_impl_restored": float(model.config._attn_implementation == "sdpa"),
    }

    # Negative control 1: the plain model on the sliced inputs (no cross-rank mixing) must disagree.
    with torch.no_grad():
        result["plain_diff"] = slice_diff(scored_logprobs(model, mb), ref_logp, cp, length)
        # Negative control 2 (hybrid models): Ulysses attention without the linear-attention gather must disagree.
        handle = cpm.enable_context_parallel(model, cp)
        try:
            if handle.hooks:
                for hook in handle.hooks:
                    hook.remove()
                result["no_gather_diff"] = slice_diff(scored_logprobs(model, mb), ref_logp, cp, length)
        finally:
            handle.disable()
    return result


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        pairs = cpm.new_cp_groups(2, ranks_per_node=WORLD)
        whole = cpm.new_cp_groups(WORLD)
        results = {}
        for name, build in MODELS.items():
            for cp in (pairs, whole):
                length = LENGTHS[rank // cp.size]
                results[f"{name}-cp{cp.size}-len{length}"] = compare(build, cp, length)
        length = LENGTHS[rank // pairs.size]
        results[f"qwen3_5-cp2-len{length}-checkpointing"] = compare(tiny_qwen3_5, pairs, length, checkpointing=True)
        # 3 kv heads over 2 ranks: repeated to one per query head before the all-to-all
        results[f"llama-cp2-len{length}-6heads-3kv"] = compare(lambda: tiny_llama(6, 3), pairs, length)
        pathlib.Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def cp_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    folder = tmp_path_factory.mktemp("cp")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_worker, args=(str(folder / "init"), str(folder)), nprocs=WORLD, join=True)
    merged: dict[str, dict[str, float]] = {}
    for rank in range(WORLD):
        for case, values in json.loads((folder / f"rank{rank}.json").read_text()).items():
            merged[f"{case}-rank{rank}"] = values
    return merged


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cp_matches_one_rank(cp_results: dict[str, dict[str, float]], name: str) -> None:
    cases = {k: v for k, v in cp_results.items() if k.startswith(name + "-")}
    # CP 2 (two groups, two sequences) and CP 4, every rank; then CP 2 with activation checkpointing (Qwen3.5), or
    # with 3 kv heads (Llama)
    assert len(cases) == 3 * WORLD
    for case, r in cases.items():
        assert r["tokens"] == 0, case  # the slices' mask-1 tokens add up to the episode's
        assert r["logp_diff"] < 1e-5, (case, r)
        assert r["grad_diff"] < 1e-6, (case, r)  # gradients reach about 0.09
        assert r["attn_impl_restored"] == 1.0, case
        assert r["plain_diff"] > 1e-2, (case, r)  # the check sees a CP path that does not mix the slices
        if name == "qwen3_5":
            assert r["no_gather_diff"] > 1e-2, (case, r)  # ... and linear attention run on the slice alone


def test_heads_must_divide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpm, "_ACTIVE", cpm.CPGroup(group=None, rank=0, size=3))
    q, kv = torch.zeros(1, 4, 5, 8), torch.zeros(1, 2, 5, 8)
    with pytest.raises(ValueError, match=r"4 attention heads.*context-parallel size 3"):
        cpm.ulysses_attention(torch.nn.Module(), q, kv, kv, None)


def test_split_sequence_pads_to_the_cp_size() -> None:
    x = torch.arange(1, 8).unsqueeze(0)
    slices = [cpm.split_sequence(x, cpm.CPGroup(None, r, 3), pad_value=-1) for r in range(3)]
    assert [s.tolist() for s in slices] == [[[1, 2, 3]], [[4, 5, 6]], [[7, -1, -1]]]


def test_cp_micro_batch_covers_each_token_once() -> None:
    traj = episode(57)
    row = PromptRow(PROMPT, (traj,))
    ref = collate([row], PAD)
    parts = [cpm.cp_micro_batch([row], PAD, cpm.CPGroup(None, r, 4)) for r in range(4)]
    assert sum(p.tokens for p in parts) == traj.tokens == ref.tokens
    # rank 0 holds positions 0..14, all prompt; ranks 1-3 hold the scored positions 22..55 between them
    targets = torch.cat([p.targets for p in parts[1:]], dim=1)
    mask = torch.cat([p.loss_mask for p in parts[1:]], dim=1)
    assert torch.equal(targets, ref.targets) and torch.equal(mask, ref.loss_mask)
    assert torch.equal(torch.cat([p.position_ids for p in parts], dim=1)[0], torch.arange(60))
    assert parts[0].tokens == 0 and parts[0].scored.any()  # rank 0 holds prompt only, yet projects one logit


def test_plan_gives_each_cp_group_the_same_rows(tmp_path: pathlib.Path) -> None:
    from learner_support import random_batch

    from tbt_gpu.learner.batch import load_batch

    batch = load_batch(random_batch(tmp_path / "b.jsonl", seed=3, count=7), vocab_size=VOCAB, max_seq_len=64)
    world, size = 4, 2
    plans = {
        rank: cpm.plan_cp_micro_batches(
            batch,
            rank=rank,
            world_size=world,
            cp=cpm.CPGroup(None, rank % size, size, (rank - rank % size, rank - rank % size + 1)),
            token_budget=40,
            pad_id=PAD,
        )
        for rank in range(world)
    }
    assert len({len(plan) for plan in plans.values()}) == 1  # fillers even out the pass counts
    for g in (0, 2):  # both ranks of a CP group run the same rows
        assert [mb.trajectory_ids for mb in plans[g]] == [mb.trajectory_ids for mb in plans[g + 1]]
    ids = [t for g in (0, 2) for mb in plans[g] for t in mb.trajectory_ids if t != "<filler>"]
    assert sorted(ids) == sorted(t.trajectory_id for t in batch.trajectories)
    assert sum(mb.tokens for plan in plans.values() for mb in plan) == batch.token_count
