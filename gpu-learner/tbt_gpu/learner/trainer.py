"""One GRPO update per step: forward/backward over micro-batches, clip, guard, optimizer step."""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from . import faults
from .batch import (
    Batch,
    MicroBatch,
    collate,
    load_batch,
    pack_micro_batches,
    plan_rank_micro_batches,
    prompt_rows,
    version_mix,
)
from .context_parallel import cp_micro_batch, enable_context_parallel, new_cp_groups, plan_cp_micro_batches
from .distributed import DistInfo, any_rank, sum_across_ranks
from .errors import NonFiniteError, StepCancelled, StepRefused
from .loss import LossSums, chunked_logprobs, policy_loss, sampler_mismatch
from .model import fsdp_modules, load_model, output_head_replaced
from .model_family import share_prompts_refusal
from .progress import Progress

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class TrainerState:
    """What the trainer knows beyond the weights; saved with every checkpoint."""

    last_step: int = 0
    """Id of the last applied step (0 = none)."""
    ledger: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Result of every applied step by id, returned again when a finished step is requested. The last step's entry
    also keeps its sorted trajectory ids (`batch_ids`): only that step can be asked again, so older entries drop
    them and the saved state stays small (ledgers saved before the ids were kept load all the same)."""
    trajectories_seen: int = 0
    tokens_seen: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "last_step": self.last_step,
            "ledger": {str(k): v for k, v in sorted(self.ledger.items())},
            "trajectories_seen": self.trajectories_seen,
            "tokens_seen": self.tokens_seen,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainerState:
        return cls(
            last_step=int(data["last_step"]),
            ledger={int(k): v for k, v in data["ledger"].items()},
            trajectories_seen=int(data["trajectories_seen"]),
            tokens_seen=int(data["tokens_seen"]),
        )


def batch_ids(batch: Batch) -> list[str]:
    """The batch's trajectory ids, sorted: which episodes a step trained on."""
    return sorted(t.trajectory_id for t in batch.trajectories)


def batch_ids_sha256(batch: Batch) -> str:
    """sha256 of the batch's sorted trajectory ids, one per line."""
    return hashlib.sha256("\n".join(batch_ids(batch)).encode("utf-8")).hexdigest()


class Trainer:
    def __init__(self, info: DistInfo) -> None:
        self.info = info
        self.cfg = info.config
        self.model, self.model_info = self._build_model()
        self.share_prompts = self._share_prompts()
        cp_size = self.cfg.train.context_parallel
        # Collective (every rank builds every group, in order); the model then splits each row's sequence.
        self.cp = new_cp_groups(cp_size) if cp_size > 1 else None
        if self.cp is not None:
            enable_context_parallel(self.model, self.cp)
        self.optimizer = self._build_optimizer()
        self.state = TrainerState()
        self.cancel_requested = threading.Event()
        """Set (on rank 0) by the control endpoint; every rank sees it at the next micro-batch boundary."""
        self.progress = Progress()

    def _build_model(self) -> tuple[torch.nn.Module, Any]:
        return load_model(self.info)

    def _share_prompts(self) -> bool:
        """train.share_prompts resolved for this model: a shared prompt needs every layer to obey a 4-D mask."""
        wanted = self.cfg.train.share_prompts
        if wanted and self.model_info.hybrid:
            raise ValueError(share_prompts_refusal(self.cfg.model.path, self.model.config))
        if self.cfg.train.context_parallel > 1:
            return False
        return not self.model_info.hybrid if wanted is None else wanted

    def _build_optimizer(self) -> torch.optim.Optimizer:
        opt = self.cfg.optimizer
        # Only what trains: with LoRA the frozen base weights carry no optimizer state.
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(trainable, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay)

    def load_batch(self, path: str) -> Batch:
        return load_batch(path, vocab_size=self.model_info.vocab_size, max_seq_len=self.model_info.max_seq_len)

    def train_step(self, step_id: int, batch: Batch) -> dict[str, Any]:
        """Apply step `step_id` (must be last_step + 1) on every rank; returns the step's metrics."""
        if step_id != self.state.last_step + 1:
            raise StepRefused(step_id, self.state.last_step)
        started = time.perf_counter()
        self.progress.mark(step=step_id, phase="update", micro_batch=0, of=0)
        if batch.all_zero_advantage:
            # Even a zero gradient would move the weights through Adam's momentum, so no step at all.
            result = self._skipped_result(batch)
        else:
            try:
                result = self._update(step_id, batch)
            except NonFiniteError as err:
                # As verl does: no optimizer step, the step is recorded as skipped and training goes on. The
                # campaign pauses after a bounded run of these in a row (a NaN in the weights never recovers).
                logger.warning("%s", err)
                result = {**self._skipped_result(batch), "non_finite": True, "skip_reason": str(err)}
        result["time_s"] = round(time.perf_counter() - started, 6)
        result["step_id"] = step_id
        # Trained tokens per sampler version (partial rollouts mix versions within an episode); no key without them.
        mix = version_mix(batch.trajectories)
        if mix is not None:
            result["version_tokens"] = mix
        # Which weights train (the report and steps.jsonl say it): full, or LoRA adapters of this rank.
        result["mode"] = "lora" if self.cfg.lora.enabled else "full"
        result["trainable_parameters"] = self.model_info.trainable_parameters
        # Lineage: the step these weights were applied on, and which trajectories went in (sorted ids).
        result["parent_step"] = self.state.last_step
        result["batch_ids_sha256"] = batch_ids_sha256(batch)
        logger.info("step %s done: %s", step_id, result)
        # A repeat of this step is told which ids it trained (see TrainerState.ledger); the log needs only the hash.
        result["batch_ids"] = batch_ids(batch)
        self.state.ledger.get(self.state.last_step, {}).pop("batch_ids", None)
        self.state.last_step = step_id
        self.state.ledger[step_id] = result
        self.state.trajectories_seen += len(batch.trajectories)
        self.state.tokens_seen += batch.token_count
        return result

    def _skipped_result(self, batch: Batch) -> dict[str, Any]:
        return {
            "loss": 0.0,
            "grad_norm": 0.0,
            "clip_fraction": 0.0,
            "dual_clip_fraction": 0.0,
            "entropy": None,
            **sampler_mismatch(LossSums()),
            "tokens": batch.token_count,
            "trajectories": len(batch.trajectories),
            "micro_batches": 0,
            "skipped": True,
            "lr": self.cfg.optimizer.lr,
        }

    def _update(self, step_id: int, batch: Batch) -> dict[str, Any]:
        info = self.info
        global_tokens = batch.token_count
        micro_batches = self._plan(batch)
        # FSDP averages gradients over ranks; the loss is already a share of the global token-mean,
        # so scaling by the world size turns that average into the sum the token-mean needs.
        scale = float(info.world_size)
        self.progress.mark(of=len(micro_batches))
        local = LossSums()
        self.optimizer.zero_grad(set_to_none=True)
        try:
            for index, mb in enumerate(micro_batches):
                self.progress.mark(micro_batch=index + 1)
                faults.micro_batch_delay()
                mb = mb.to(info.device)
                logp, entropy = self._scored_logprobs(mb)
                # Rows without old log-probabilities use the detached current ones: that is the recompute.
                use_sampler = self.cfg.loss.old_logprobs == "sampler"
                loss, sums = policy_loss(
                    logp=logp,
                    old_logp=mb.old_logprobs,
                    has_old_logp=mb.has_old_logprobs if use_sampler else torch.zeros_like(mb.has_old_logprobs),
                    advantages=mb.advantages,
                    mask=mb.loss_mask,
                    cfg=self.cfg.loss,
                    global_tokens=global_tokens,
                    entropy=entropy,
                    sampler_logp=mb.old_logprobs,
                    has_sampler_logp=mb.has_old_logprobs,
                )
                cancel, non_finite = any_rank(self.cancel_requested.is_set(), not math.isfinite(sums.loss))
                if non_finite:
                    raise NonFiniteError(f"step {step_id} refused: non-finite loss in micro-batch {index + 1}")
                if cancel:
                    raise StepCancelled(step_id, index + 1, len(micro_batches))
                (loss * scale).backward()
                local.add(sums)
            (cancel,) = any_rank(self.cancel_requested.is_set())
            if cancel:
                raise StepCancelled(step_id, len(micro_batches), len(micro_batches))
            totals = LossSums.from_list(sum_across_ranks(local.as_list()))
            if int(totals.tokens) != global_tokens:
                raise RuntimeError(f"step {step_id}: ranks trained {totals.tokens} tokens, batch has {global_tokens}")
            self.progress.mark(phase="optimizer")
            grad_norm = self._grad_norm()
            loss_value = totals.loss / global_tokens
            if not math.isfinite(loss_value) or not math.isfinite(grad_norm):
                raise NonFiniteError(
                    f"step {step_id} refused: loss {loss_value} grad_norm {grad_norm}; no optimizer step"
                )
            params = [p for p in self.model.parameters() if p.grad is not None]
            torch.nn.utils.clip_grads_with_norm_(
                params, self.cfg.train.grad_clip, torch.tensor(grad_norm, device=_grad(params[0]).device)
            )
            self.optimizer.step()
        except BaseException:
            self._abandon_pass()
            raise
        finally:
            self.optimizer.zero_grad(set_to_none=True)
        return {
            "loss": loss_value,
            "grad_norm": grad_norm,
            "clip_fraction": totals.clipped / global_tokens,
            "dual_clip_fraction": totals.dual_clipped / global_tokens,
            "entropy": totals.entropy / global_tokens,
            **sampler_mismatch(totals),
            "tokens": global_tokens,
            "trajectories": len(batch.trajectories),
            "micro_batches": len(micro_batches),
            "skipped": False,
            "lr": self.cfg.optimizer.lr,
        }

    def _plan(self, batch: Batch) -> list[MicroBatch]:
        """This rank's micro-batches; under context parallelism the ranks of a group get the same rows, each its
        slice of every row's sequence."""
        info, budget, pad_id = self.info, self.cfg.train.micro_batch_tokens, self.model_info.pad_id
        if self.cp is not None:
            return plan_cp_micro_batches(
                batch, rank=info.rank, world_size=info.world_size, cp=self.cp, token_budget=budget, pad_id=pad_id
            )
        return plan_rank_micro_batches(
            batch,
            rank=info.rank,
            world_size=info.world_size,
            token_budget=budget,
            pad_id=pad_id,
            share_prompts=self.share_prompts,
        )

    def _scored_logprobs(self, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities and entropies of every trajectory's scored tokens, both [B, W] (see MicroBatch).

        Only the scored positions reach the output head (`logits_to_keep`): a prompt is most of each sequence and
        its logits are never trained on. The head itself runs here in chunks of `train.logprob_chunk_tokens`
        (loss.chunked_logprobs): a 106k-token episode's full float32 logits would be 64-106 GB (152k-248k vocab).
        """

        def project(hidden: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            hidden = hidden[mb.gather]  # [B, W, H]: the position predicting each scored token
            return chunked_logprobs(
                hidden.reshape(-1, hidden.shape[-1]),
                weight,
                mb.targets.reshape(-1),
                temperature=self.cfg.loss.temperature,
                chunk_tokens=self.cfg.train.logprob_chunk_tokens,
            )

        with output_head_replaced(self.model, project) as results:
            self.model(
                input_ids=mb.input_ids,
                attention_mask=mb.attention_mask,
                position_ids=mb.position_ids,
                logits_to_keep=mb.scored,
            )
        logp, entropy = results[0]
        return logp.view(mb.targets.shape), entropy.view(mb.targets.shape)

    def _abandon_pass(self) -> None:
        """After an aborted step, drop gathered parameters so the next step starts from a clean state."""
        for module in fsdp_modules(self.model):
            module.reshard()

    def _grad_norm(self) -> float:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        total = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
        if isinstance(total, DTensor):
            total = total.full_tensor()
        return float(total)

    @torch.no_grad()
    def sequence_logprobs(self, batch: Batch) -> dict[str, float]:
        """Sum of log-probabilities of every trajectory's mask-1 tokens under the current weights.

        Every rank computes all trajectories (same passes on every rank, as FSDP requires).
        """
        out: dict[str, float] = {}
        budget = self.cfg.train.micro_batch_tokens
        rows = prompt_rows(batch.trajectories, budget, self.share_prompts)
        for group in pack_micro_batches(rows, budget * (self.cp.size if self.cp else 1)):
            mb = (
                cp_micro_batch(group, self.model_info.pad_id, self.cp)
                if self.cp
                else collate(group, self.model_info.pad_id)
            )
            mb = mb.to(self.info.device)
            logp, _ = self._scored_logprobs(mb)
            sums = (logp * mb.loss_mask).sum(dim=1).double()
            if self.cp is not None:  # each rank of the group holds a slice of every trajectory
                dist.all_reduce(sums, group=self.cp.group)
            out.update(zip(mb.trajectory_ids, (float(v) for v in sums.tolist()), strict=True))
        return out


def _grad(p: torch.Tensor) -> torch.Tensor:
    assert p.grad is not None, "selected for having a gradient"
    return p.grad
