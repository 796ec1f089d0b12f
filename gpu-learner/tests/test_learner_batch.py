"""Batch files: validation names file, line and field; sharding and micro-batching are deterministic."""

from __future__ import annotations

import json
import pathlib

import pytest
from learner_support import trajectory

from tbt_gpu.learner.batch import (
    BatchError,
    filler_micro_batch,
    load_batch,
    pack_micro_batches,
    plan_rank_micro_batches,
    prompt_rows,
    shard_for_ranks,
)

GOOD = trajectory("a", [5, 6, 7, 8], 2, 1.0)


def write_lines(tmp_path: pathlib.Path, *records: object) -> pathlib.Path:
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def load(path: pathlib.Path):
    return load_batch(path, vocab_size=50, max_seq_len=8)


@pytest.mark.parametrize(
    ("bad", "field", "fragment"),
    [
        ("{not json", None, "not valid JSON"),
        ([1, 2], None, "must be a JSON object"),
        ({k: v for k, v in GOOD.items() if k != "advantage"}, "advantage", "is missing"),
        ({**GOOD, "advantage": "high"}, "advantage", "finite number"),
        ({**GOOD, "advantage": True}, "advantage", "finite number"),
        ({**GOOD, "trajectory_id": ""}, "trajectory_id", "non-empty string"),
        ({**GOOD, "input_ids": [5, 99, 7, 8]}, "input_ids", "item 1 is 99"),
        ({**GOOD, "input_ids": [5, 6.5, 7, 8]}, "input_ids", "item 1"),
        (
            {**GOOD, "input_ids": list(range(9)), "loss_mask": [0] * 9},
            "input_ids",
            "longer than the model context of 8",
        ),
        ({**GOOD, "loss_mask": [0, 1, 1]}, "loss_mask", "as long as input_ids (4), got 3"),
        ({**GOOD, "loss_mask": [0, 2, 1, 1]}, "loss_mask", "item 1 is 2"),
        ({**GOOD, "loss_mask": [1, 1, 1, 1]}, "loss_mask", "item 0 must be 0"),
        ({**GOOD, "old_logprobs": [0, -1, -1]}, "old_logprobs", "as long as input_ids"),
        ({**GOOD, "old_logprobs": [0, 0, 0.5, -1]}, "old_logprobs", "item 2 is 0.5"),
        ({**GOOD, "old_logprobs": [0, 0, "x", -1]}, "old_logprobs", "item 2"),
        ({**GOOD, "trajectory_id": "first"}, "trajectory_id", "'first' repeats line 1"),
    ],
)
def test_malformed_line_names_file_line_and_field(tmp_path, bad, field, fragment) -> None:
    path = write_lines(tmp_path, {**GOOD, "trajectory_id": "first"}, "", bad)
    with pytest.raises(BatchError) as info:
        load(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 3, field)
    message = str(err)
    assert message.startswith(f"{path}:3:")
    if field:
        assert f"field '{field}'" in message
    assert fragment in message


def test_file_level_errors(tmp_path) -> None:
    with pytest.raises(BatchError, match="does not exist"):
        load(tmp_path / "missing.jsonl")
    with pytest.raises(BatchError, match="holds no trajectories"):
        load(write_lines(tmp_path, ""))
    no_tokens = trajectory("z", [5, 6, 7], 3, 1.0)
    with pytest.raises(BatchError, match="nothing to train"):
        load(write_lines(tmp_path, no_tokens))


def test_valid_batch_counts_and_zero_advantage(tmp_path) -> None:
    extra = {**trajectory("b", [1, 2, 3], 1, 0.0, old=[0.0, -0.5, -0.25]), "group": "g1"}  # extra keys are fine
    batch = load(write_lines(tmp_path, GOOD, extra))
    assert batch.token_count == 4
    assert not batch.all_zero_advantage
    assert batch.trajectories[1].old_logprobs == (0.0, -0.5, -0.25)
    zero = load(write_lines(tmp_path, {**GOOD, "advantage": 0.0}, extra))
    assert zero.all_zero_advantage


def make_batch(tmp_path: pathlib.Path, lengths: list[int]):
    records = [trajectory(f"t{i}", [3] * n, 1, 1.0) for i, n in enumerate(lengths)]
    return load_batch(write_lines(tmp_path, *records), vocab_size=50, max_seq_len=64)


def test_shards_are_disjoint_complete_balanced_and_deterministic(tmp_path) -> None:
    batch = make_batch(tmp_path, [30, 5, 17, 17, 9, 2, 40, 11])
    rows = prompt_rows(batch.trajectories, 64, share=False)
    shares = shard_for_ranks(rows, 3)
    ids = [t.trajectory_id for share in shares for r in share for t in r.members]
    assert sorted(ids) == sorted(t.trajectory_id for t in batch.trajectories)
    assert len(ids) == len(set(ids))
    loads = [sum(r.length for r in share) for share in shares]
    assert max(loads) - min(loads) <= 40
    assert shard_for_ranks(rows, 3) == shares


def test_micro_batches_respect_the_padded_token_budget(tmp_path) -> None:
    batch = make_batch(tmp_path, [30, 5, 17, 17, 9, 2, 40, 11])
    rows = prompt_rows(batch.trajectories, 48, share=False)
    groups = pack_micro_batches(rows, 48)
    ids = sorted(t.trajectory_id for g in groups for r in g for t in r.members)
    assert ids == sorted(t.trajectory_id for t in batch.trajectories)
    for group in groups:
        assert len(group) * max(r.length for r in group) <= 48 or len(group) == 1
    # a sequence longer than the budget still trains, alone
    assert [len(g) for g in pack_micro_batches(rows, 10)][:2] == [1, 1]


def test_every_rank_runs_the_same_number_of_micro_batches(tmp_path) -> None:
    batch = make_batch(tmp_path, [30, 5, 17])
    plans = [plan_rank_micro_batches(batch, rank=r, world_size=4, token_budget=32, pad_id=0) for r in range(4)]
    assert len({len(p) for p in plans}) == 1
    assert sum(mb.tokens for p in plans for mb in p) == batch.token_count
    filler = plans[3][0]
    assert filler.tokens == 0 and float(filler.loss_mask.sum()) == 0.0


def test_collated_shapes_and_scored_tokens(tmp_path) -> None:
    records = [trajectory("a", [3, 4, 5, 6], 2, 1.0, old=[0.0, 0.0, -0.5, -0.7]), trajectory("b", [3, 4], 1, -1.0)]
    batch = load_batch(write_lines(tmp_path, *records), vocab_size=50, max_seq_len=64)
    (mb,) = plan_rank_micro_batches(batch, rank=0, world_size=1, token_budget=64, pad_id=0)
    assert mb.input_ids.tolist() == [[3, 4, 5, 6], [3, 4, 0, 0]]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]  # no shared prompt: a padding mask
    assert mb.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 0, 0]]
    assert mb.trajectory_ids == ("a", "b")
    # each trajectory's tokens after its prompt, left-aligned, and the flat scored positions predicting them
    assert mb.targets.tolist() == [[5, 6], [4, 0]]
    assert mb.loss_mask.tolist() == [[1, 1], [1, 0]]
    assert mb.old_logprobs.flatten().tolist() == pytest.approx([-0.5, -0.7, 0.0, 0.0])
    assert mb.has_old_logprobs.tolist() == [True, False]
    assert mb.scored.tolist() == [[False, True, True, False], [True, False, False, False]]
    assert mb.gather.tolist() == [[0, 1], [2, 0]]
    assert mb.tokens == 3


def test_trajectories_with_one_prompt_share_a_row(tmp_path) -> None:
    records = [
        trajectory("x", [1, 2, 3, 7, 8], 3, 1.0),
        trajectory("y", [1, 2, 3, 9], 3, -1.0),
        trajectory("z", [1, 2, 5, 6], 2, 0.5),
    ]
    batch = load_batch(write_lines(tmp_path, *records), vocab_size=50, max_seq_len=64)
    rows = prompt_rows(batch.trajectories, 64, share=True)
    assert [(r.prompt_len, [t.trajectory_id for t in r.members], r.length) for r in rows] == [
        (3, ["x", "y"], 6),
        (2, ["z"], 4),
    ]
    assert [len(r.members) for r in prompt_rows(batch.trajectories, 64, share=False)] == [1, 1, 1]
    assert [len(r.members) for r in prompt_rows(batch.trajectories, 5, share=True)] == [1, 1, 1]  # x alone fills 5
    (mb,) = plan_rank_micro_batches(batch, rank=0, world_size=1, token_budget=64, pad_id=0)
    assert mb.input_ids.tolist() == [[1, 2, 3, 7, 8, 9], [1, 2, 5, 6, 0, 0]]
    assert mb.position_ids[0].tolist() == [0, 1, 2, 3, 4, 3]  # y's token continues its own sequence
    attend = mb.attention_mask[:, 0].int().tolist()  # [row][query][key]
    assert attend[0][4] == [1, 1, 1, 1, 1, 0]  # x's 8 sees the prompt and x's 7
    assert attend[0][5] == [1, 1, 1, 0, 0, 1]  # y's 9 sees the prompt and itself, never x
    assert attend[1][3] == [1, 1, 1, 1, 0, 0]  # a row of one trajectory is plain causal
    assert mb.trajectory_ids == ("x", "y", "z")
    assert mb.targets.tolist() == [[7, 8], [9, 0], [5, 6]]
    flat = mb.scored.flatten().nonzero().flatten().tolist()
    # x's 7 and y's 9 are both predicted by the prompt's last position (2); x's 8 by x's 7 (3); z's 5, 6 by 1, 2
    assert [flat[i] for i in mb.gather[0].tolist()] == [2, 3]
    assert [flat[i] for i in mb.gather[1].tolist()][:1] == [2]
    assert [flat[i] for i in mb.gather[2].tolist()] == [6 + 1, 6 + 2]


def test_a_filler_scores_one_token_and_trains_none() -> None:
    filler = filler_micro_batch(0)
    assert filler.targets.shape == (1, 1) and filler.tokens == 0 and float(filler.loss_mask.sum()) == 0.0
