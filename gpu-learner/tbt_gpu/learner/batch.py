"""Batches by reference: a JSONL file of trajectories, validated, sharded over ranks, micro-batched.

One line per trajectory:
    {"trajectory_id": str, "input_ids": [int], "loss_mask": [0|1 per token], "advantage": float,
     "old_logprobs": [float per token] (optional)}
Position t of `loss_mask` / `old_logprobs` describes token t (its log-probability given tokens < t), so
position 0 can never be trained. Values of `old_logprobs` where the mask is 0 are ignored. Other keys
are allowed and ignored (metadata such as group ids).
"""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass

import torch

REQUIRED = ("trajectory_id", "input_ids", "loss_mask", "advantage")


class BatchError(ValueError):
    """A batch file that cannot be trained on; the message names the file, line and field."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        where = path if line is None else f"{path}:{line}"
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {message}")
        self.path = path
        self.line = line
        self.field = field


@dataclass(frozen=True, slots=True)
class Trajectory:
    trajectory_id: str
    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    advantage: float
    old_logprobs: tuple[float, ...] | None
    line: int
    """1-based line in the batch file (for messages and a stable order)."""

    @property
    def length(self) -> int:
        return len(self.input_ids)

    @property
    def tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True, slots=True)
class Batch:
    path: str
    trajectories: tuple[Trajectory, ...]

    @property
    def token_count(self) -> int:
        """Mask-1 tokens in the whole batch: the denominator of the token-mean loss."""
        return sum(t.tokens for t in self.trajectories)

    @property
    def all_zero_advantage(self) -> bool:
        return all(t.advantage == 0.0 for t in self.trajectories)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_line(path: str, line_no: int, text: str, vocab_size: int, max_seq_len: int) -> Trajectory:
    def fail(field: str | None, message: str) -> BatchError:
        return BatchError(path, line_no, field, message)

    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise fail(None, f"not valid JSON ({err.msg} at column {err.colno})") from err
    if not isinstance(record, dict):
        raise fail(None, f"must be a JSON object, got {type(record).__name__}")
    for name in REQUIRED:
        if name not in record:
            raise fail(name, "is missing")

    trajectory_id = record["trajectory_id"]
    if not isinstance(trajectory_id, str) or trajectory_id == "":
        raise fail("trajectory_id", f"must be a non-empty string, got {trajectory_id!r}")

    input_ids = record["input_ids"]
    if not isinstance(input_ids, list) or len(input_ids) < 2:
        raise fail("input_ids", "must be a list of at least 2 token ids")
    for i, tok in enumerate(input_ids):
        if not _is_int(tok) or not 0 <= tok < vocab_size:
            raise fail("input_ids", f"item {i} is {tok!r}, not a token id in [0, {vocab_size})")
    if len(input_ids) > max_seq_len:
        raise fail(
            "input_ids",
            f"has {len(input_ids)} tokens, longer than the model context of {max_seq_len} (never truncated)",
        )

    loss_mask = record["loss_mask"]
    if not isinstance(loss_mask, list) or len(loss_mask) != len(input_ids):
        got = len(loss_mask) if isinstance(loss_mask, list) else type(loss_mask).__name__
        raise fail("loss_mask", f"must be a list as long as input_ids ({len(input_ids)}), got {got}")
    for i, m in enumerate(loss_mask):
        if not _is_int(m) or m not in (0, 1):
            raise fail("loss_mask", f"item {i} is {m!r}, not 0 or 1")
    if loss_mask[0] != 0:
        raise fail("loss_mask", "item 0 must be 0 (the first token has no prediction to train)")

    advantage = record["advantage"]
    if isinstance(advantage, bool) or not isinstance(advantage, (int, float)) or not math.isfinite(advantage):
        raise fail("advantage", f"must be a finite number, got {advantage!r}")

    old = record.get("old_logprobs")
    old_logprobs: tuple[float, ...] | None = None
    if old is not None:
        if not isinstance(old, list) or len(old) != len(input_ids):
            got = len(old) if isinstance(old, list) else type(old).__name__
            raise fail("old_logprobs", f"must be a list as long as input_ids ({len(input_ids)}), got {got}")
        for i, (value, m) in enumerate(zip(old, loss_mask, strict=True)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise fail("old_logprobs", f"item {i} is {value!r}, not a finite number")
            if m == 1 and value > 0:
                raise fail("old_logprobs", f"item {i} is {value!r}; a log-probability is <= 0")
        old_logprobs = tuple(float(v) for v in old)

    return Trajectory(
        trajectory_id=trajectory_id,
        input_ids=tuple(input_ids),
        loss_mask=tuple(loss_mask),
        advantage=float(advantage),
        old_logprobs=old_logprobs,
        line=line_no,
    )


def load_batch(path: str | pathlib.Path, *, vocab_size: int, max_seq_len: int) -> Batch:
    """Read and validate a whole batch file. Blank lines are skipped; ids must be unique."""
    name = str(path)
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise BatchError(name, None, None, "does not exist") from err
    except (OSError, UnicodeDecodeError) as err:
        raise BatchError(name, None, None, f"cannot be read ({err})") from err
    trajectories: list[Trajectory] = []
    seen: dict[str, int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        traj = _parse_line(name, line_no, line, vocab_size, max_seq_len)
        if traj.trajectory_id in seen:
            raise BatchError(
                name, line_no, "trajectory_id", f"{traj.trajectory_id!r} repeats line {seen[traj.trajectory_id]}"
            )
        seen[traj.trajectory_id] = line_no
        trajectories.append(traj)
    if not trajectories:
        raise BatchError(name, None, None, "holds no trajectories")
    batch = Batch(path=name, trajectories=tuple(trajectories))
    if batch.token_count == 0 and not batch.all_zero_advantage:
        raise BatchError(name, None, "loss_mask", "no trajectory has a mask-1 token; nothing to train")
    return batch


def shard_for_ranks(trajectories: tuple[Trajectory, ...], world_size: int) -> list[list[Trajectory]]:
    """Disjoint, deterministic shares: longest first, each to the rank with the fewest tokens so far."""
    order = sorted(trajectories, key=lambda t: (-t.length, t.line))
    shares: list[list[Trajectory]] = [[] for _ in range(world_size)]
    loads = [0] * world_size
    for traj in order:
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(traj)
        loads[rank] += traj.length
    return shares


def pack_micro_batches(trajectories: list[Trajectory], token_budget: int) -> list[list[Trajectory]]:
    """Greedy packing by length: rows x longest row <= budget (a single longer row goes alone)."""
    order = sorted(trajectories, key=lambda t: (-t.length, t.line))
    groups: list[list[Trajectory]] = []
    for traj in order:
        if groups:
            group = groups[-1]
            if (len(group) + 1) * group[0].length <= token_budget:
                group.append(traj)
                continue
        groups.append([traj])
    return groups


@dataclass(frozen=True, slots=True)
class MicroBatch:
    input_ids: torch.Tensor
    """[B, T] token ids, right-padded."""
    attention_mask: torch.Tensor
    """[B, T] 1 for real tokens."""
    loss_mask: torch.Tensor
    """[B, T-1] float, mask of the predicted tokens input_ids[:, 1:]."""
    old_logprobs: torch.Tensor
    """[B, T-1] float32 sampled log-probabilities of input_ids[:, 1:] (0 where absent)."""
    has_old_logprobs: torch.Tensor
    """[B] bool: whether the row carried old_logprobs (else the current detached ones are used)."""
    advantages: torch.Tensor
    """[B] float32."""
    tokens: int
    """Mask-1 tokens in this micro-batch."""
    first_scored: int
    """First position of `loss_mask` that any row trains on (at most T-2): the logits before it are never used,
    so the trainer computes the vocabulary projection only from there (the prompt is most of every sequence)."""

    def to(self, device: torch.device) -> MicroBatch:
        return MicroBatch(
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            loss_mask=self.loss_mask.to(device),
            old_logprobs=self.old_logprobs.to(device),
            has_old_logprobs=self.has_old_logprobs.to(device),
            advantages=self.advantages.to(device),
            tokens=self.tokens,
            first_scored=self.first_scored,
        )


def collate(group: list[Trajectory], pad_id: int) -> MicroBatch:
    width = max(t.length for t in group)
    rows = len(group)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.float32)
    old = torch.zeros((rows, width), dtype=torch.float32)
    has_old = torch.zeros(rows, dtype=torch.bool)
    for i, traj in enumerate(group):
        n = traj.length
        input_ids[i, :n] = torch.tensor(traj.input_ids, dtype=torch.long)
        attention_mask[i, :n] = 1
        loss_mask[i, :n] = torch.tensor(traj.loss_mask, dtype=torch.float32)
        if traj.old_logprobs is not None:
            old[i, :n] = torch.tensor(traj.old_logprobs, dtype=torch.float32)
            has_old[i] = True
    scored = loss_mask[:, 1:].any(dim=0).nonzero()
    first_scored = min(int(scored[0]) if len(scored) else width - 2, width - 2)
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask[:, 1:].contiguous(),
        old_logprobs=old[:, 1:].contiguous(),
        has_old_logprobs=has_old,
        advantages=torch.tensor([t.advantage for t in group], dtype=torch.float32),
        tokens=sum(t.tokens for t in group),
        first_scored=first_scored,
    )


def filler_micro_batch(pad_id: int) -> MicroBatch:
    """A micro-batch that contributes nothing: FSDP needs every rank to run the same number of passes."""
    filler = Trajectory(
        trajectory_id="<filler>", input_ids=(pad_id, pad_id), loss_mask=(0, 0), advantage=0.0, old_logprobs=None, line=0
    )
    return collate([filler], pad_id)


def plan_rank_micro_batches(
    batch: Batch, *, rank: int, world_size: int, token_budget: int, pad_id: int
) -> list[MicroBatch]:
    """This rank's micro-batches, padded with fillers to the count of the busiest rank."""
    shares = shard_for_ranks(batch.trajectories, world_size)
    packed = [pack_micro_batches(share, token_budget) for share in shares]
    count = max(len(groups) for groups in packed)
    mine = [collate(group, pad_id) for group in packed[rank]]
    mine.extend(filler_micro_batch(pad_id) for _ in range(count - len(mine)))
    return mine
