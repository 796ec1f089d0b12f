"""Batches by reference: a JSONL file of trajectories, validated, sharded over ranks, micro-batched.

One line per trajectory, in the format of batch_row.schema.json next to this file (generated from the writer's
zod schema, learner-control/batch-row.ts; tests hold both sides to it). What a JSON Schema cannot say is checked
here too: token ids below the vocabulary size, sequences within the model context, masks and log-probabilities as
long as input_ids, unique ids. Values of `old_logprobs` where the mask is 0 are ignored. `sampler_versions` names
the weight version that sampled each token: with partial rollouts one trajectory may carry several; the loss needs
nothing of it (each token's own sampler log-probability is its ratio's denominator), the step's metrics report the mix.
"""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass

import torch

REQUIRED = ("trajectory_id", "input_ids", "loss_mask", "advantage")
OPTIONAL = ("old_logprobs", "sampler_versions")
"""Read when present; any other key is ignored (metadata such as group ids)."""


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
    sampler_versions: tuple[int, ...] | None = None
    """The weight version that sampled each token (-1 where the mask is 0); None when the row carried none."""

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

    versions = record.get("sampler_versions")
    sampler_versions: tuple[int, ...] | None = None
    if versions is not None:
        if not isinstance(versions, list) or len(versions) != len(input_ids):
            got = len(versions) if isinstance(versions, list) else type(versions).__name__
            raise fail("sampler_versions", f"must be a list as long as input_ids ({len(input_ids)}), got {got}")
        for i, (value, m) in enumerate(zip(versions, loss_mask, strict=True)):
            if not _is_int(value) or value < (0 if m == 1 else -1):
                raise fail("sampler_versions", f"item {i} is {value!r}, not a version (>= 0 where the mask is 1)")
        sampler_versions = tuple(versions)

    return Trajectory(
        trajectory_id=trajectory_id,
        input_ids=tuple(input_ids),
        loss_mask=tuple(loss_mask),
        advantage=float(advantage),
        old_logprobs=old_logprobs,
        line=line_no,
        sampler_versions=sampler_versions,
    )


def version_mix(trajectories: tuple[Trajectory, ...]) -> dict[str, int] | None:
    """Trained (mask-1) tokens per sampler version, keyed by the version as text (a JSON object); None when no
    trajectory carried versions."""
    mix: dict[int, int] = {}
    carried = False
    for traj in trajectories:
        if traj.sampler_versions is None:
            continue
        carried = True
        for version, m in zip(traj.sampler_versions, traj.loss_mask, strict=True):
            if m == 1:
                mix[version] = mix.get(version, 0) + 1
    return {str(v): mix[v] for v in sorted(mix)} if carried else None


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


@dataclass(frozen=True, slots=True)
class PromptRow:
    """Trajectories that share their prompt, laid out as one sequence: the prompt once, then each suffix.

    The prompt of a trajectory is everything before its first trained token (at most all but the last token).
    A group's episodes start from the same prompt, so its forward pass runs once instead of once per episode;
    each suffix attends to the prompt and to itself only, with its own positions, so every log-probability and
    gradient is the one the separate sequences would give.
    """

    prompt_len: int
    members: tuple[Trajectory, ...]

    @property
    def length(self) -> int:
        return self.prompt_len + sum(t.length - self.prompt_len for t in self.members)

    @property
    def line(self) -> int:
        return min(t.line for t in self.members)


def prompt_length(traj: Trajectory) -> int:
    """Tokens before the first trained one; at least one token is always scored (a filler trains nothing)."""
    first = next((i for i, m in enumerate(traj.loss_mask) if m), traj.length)
    return max(1, min(first, traj.length - 1))


def prompt_rows(trajectories: tuple[Trajectory, ...], token_budget: int, share: bool) -> list[PromptRow]:
    """One row per trajectory, or (share) trajectories with identical prompts in rows of at most token_budget."""
    if not share:
        return [PromptRow(prompt_length(t), (t,)) for t in trajectories]
    by_prompt: dict[tuple[int, ...], list[Trajectory]] = {}
    for traj in trajectories:
        by_prompt.setdefault(traj.input_ids[: prompt_length(traj)], []).append(traj)
    rows: list[PromptRow] = []
    for prompt, members in by_prompt.items():
        current: list[Trajectory] = []
        length = len(prompt)
        for traj in members:
            extra = traj.length - len(prompt)
            if current and length + extra > token_budget:
                rows.append(PromptRow(len(prompt), tuple(current)))
                current, length = [], len(prompt)
            current.append(traj)
            length += extra
        rows.append(PromptRow(len(prompt), tuple(current)))
    return rows


def shard_for_ranks(rows: list[PromptRow], world_size: int) -> list[list[PromptRow]]:
    """Disjoint, deterministic shares: longest first, each to the rank with the fewest tokens so far."""
    order = sorted(rows, key=lambda r: (-r.length, r.line))
    shares: list[list[PromptRow]] = [[] for _ in range(world_size)]
    loads = [0] * world_size
    for row in order:
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(row)
        loads[rank] += row.length
    return shares


def pack_micro_batches(rows: list[PromptRow], token_budget: int) -> list[list[PromptRow]]:
    """Greedy packing by length: rows x longest row <= budget (a single longer row goes alone)."""
    order = sorted(rows, key=lambda r: (-r.length, r.line))
    groups: list[list[PromptRow]] = []
    for row in order:
        if groups:
            group = groups[-1]
            if (len(group) + 1) * group[0].length <= token_budget:
                group.append(row)
                continue
        groups.append([row])
    return groups


@dataclass(frozen=True, slots=True)
class MicroBatch:
    """Rows of prompt-sharing sequences (R x S) and, per trajectory (B x W), the tokens it is scored on: its
    tokens after its prompt, left-aligned (trajectory b's column i is its token prompt_len + i)."""

    input_ids: torch.Tensor
    """[R, S] token ids, right-padded."""
    attention_mask: torch.Tensor
    """[R, S] 1 for real tokens; or, when a row holds several trajectories, [R, 1, S, S] bool (True: attend)."""
    position_ids: torch.Tensor
    """[R, S] each token's position in its own trajectory."""
    scored: torch.Tensor
    """[R, S] bool: the positions whose logits are used; only those are projected onto the vocabulary."""
    gather: torch.Tensor
    """[B, W] index into the scored positions (in row-major order) of the logits predicting each token."""
    targets: torch.Tensor
    """[B, W] the tokens predicted."""
    loss_mask: torch.Tensor
    """[B, W] float, 1 where the token is trained."""
    old_logprobs: torch.Tensor
    """[B, W] float32 sampled log-probabilities (0 where absent)."""
    has_old_logprobs: torch.Tensor
    """[B] bool: whether the row carried old_logprobs (else the current detached ones are used)."""
    advantages: torch.Tensor
    """[B] float32."""
    trajectory_ids: tuple[str, ...]
    """[B] in the order of the per-trajectory tensors."""
    tokens: int
    """Mask-1 tokens in this micro-batch."""

    def to(self, device: torch.device) -> MicroBatch:
        moved = {k: getattr(self, k).to(device) for k in self.__slots__ if isinstance(getattr(self, k), torch.Tensor)}
        return MicroBatch(**moved, trajectory_ids=self.trajectory_ids, tokens=self.tokens)


def collate(rows: list[PromptRow], pad_id: int) -> MicroBatch:
    width = max(r.length for r in rows)
    members = [t for r in rows for t in r.members]
    scored_width = max(t.length - r.prompt_len for r in rows for t in r.members)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    padding = torch.zeros((len(rows), width), dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    segment = torch.full((len(rows), width), -1, dtype=torch.long)  # 0: prompt, j: member j, -1: padding
    source = torch.zeros((len(members), scored_width), dtype=torch.long)  # flat position of each predicting logit
    targets = torch.full((len(members), scored_width), pad_id, dtype=torch.long)
    loss_mask = torch.zeros((len(members), scored_width), dtype=torch.float32)
    old = torch.zeros((len(members), scored_width), dtype=torch.float32)
    has_old = torch.zeros(len(members), dtype=torch.bool)
    scored = torch.zeros(len(rows) * width, dtype=torch.bool)
    b = 0
    for r, row in enumerate(rows):
        p = row.prompt_len
        input_ids[r, :p] = torch.tensor(row.members[0].input_ids[:p], dtype=torch.long)
        position_ids[r, :p] = torch.arange(p)
        segment[r, :p] = 0
        offset = p
        for j, traj in enumerate(row.members, start=1):
            n = traj.length - p
            input_ids[r, offset : offset + n] = torch.tensor(traj.input_ids[p:], dtype=torch.long)
            position_ids[r, offset : offset + n] = torch.arange(p, traj.length)
            segment[r, offset : offset + n] = j
            # token p + i is predicted by the prompt's last position (i = 0), else by the suffix token before it
            source[b, :n] = r * width + torch.cat([torch.tensor([p - 1]), torch.arange(offset, offset + n - 1)])
            scored[source[b, :n]] = True
            targets[b, :n] = input_ids[r, offset : offset + n]
            loss_mask[b, :n] = torch.tensor(traj.loss_mask[p:], dtype=torch.float32)
            if traj.old_logprobs is not None:
                old[b, :n] = torch.tensor(traj.old_logprobs[p:], dtype=torch.float32)
                has_old[b] = True
            offset += n
            b += 1
        padding[r, :offset] = 1
    # columns past a trajectory's end point at the first scored logit; their mask is 0
    gather = (torch.cumsum(scored.long(), 0) - 1)[source].clamp(min=0)
    if any(len(row.members) > 1 for row in rows):
        q = torch.arange(width)
        causal = q.unsqueeze(0) <= q.unsqueeze(1)  # [query, key]: key at or before the query
        same = (segment.unsqueeze(1) == 0) | (segment.unsqueeze(1) == segment.unsqueeze(2))  # key in prompt or own
        attention_mask = (causal & same).unsqueeze(1)
    else:
        attention_mask = padding
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        scored=scored.view(len(rows), width),
        gather=gather,
        targets=targets,
        loss_mask=loss_mask,
        old_logprobs=old,
        has_old_logprobs=has_old,
        advantages=torch.tensor([t.advantage for t in members], dtype=torch.float32),
        trajectory_ids=tuple(t.trajectory_id for t in members),
        tokens=sum(t.tokens for t in members),
    )


def filler_micro_batch(pad_id: int) -> MicroBatch:
    """A micro-batch that contributes nothing: FSDP needs every rank to run the same number of passes."""
    filler = Trajectory(
        trajectory_id="<filler>", input_ids=(pad_id, pad_id), loss_mask=(0, 0), advantage=0.0, old_logprobs=None, line=0
    )
    return collate([PromptRow(1, (filler,))], pad_id)


def plan_rank_micro_batches(
    batch: Batch, *, rank: int, world_size: int, token_budget: int, pad_id: int, share_prompts: bool = True
) -> list[MicroBatch]:
    """This rank's micro-batches, padded with fillers to the count of the busiest rank."""
    rows = prompt_rows(batch.trajectories, token_budget, share_prompts)
    packed = [pack_micro_batches(share, token_budget) for share in shard_for_ranks(rows, world_size)]
    count = max(len(groups) for groups in packed)
    mine = [collate(group, pad_id) for group in packed[rank]]
    mine.extend(filler_micro_batch(pad_id) for _ in range(count - len(mine)))
    return mine
