"""The model, its tokenizer and batched generation with a KV cache.

Only the batcher's worker thread calls ``generate`` and ``load_weights``, so weights never change under a
running batch. Tokenizer calls from HTTP threads go through one lock.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from .errors import BadRequest
from .sampling import SamplingParams, SequenceSampler, raw_logprobs

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class GenerationRequest:
    prompt_ids: list[int]
    """Prompt token ids, already validated against the vocabulary and the context length."""
    max_tokens: int
    """Most tokens to generate (>= 1)."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    logprobs: int | None = None
    """None: no logprobs; 0: the sampled token's raw logprob; k > 0: also the k most likely tokens."""
    stop: tuple[str, ...] = ()
    """Stop strings, matched against the detokenised output."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end the sequence (the model's EOS ids always do unless ``ignore_eos``)."""
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True


@dataclass(kw_only=True, slots=True)
class GenerationResult:
    token_ids: list[int]
    """Every sampled token, including a final EOS or stop token (the text leaves those out)."""
    text: str
    finish_reason: Literal["stop", "length", "abort"]
    """`abort`: cut short by `abort_running` (a weight sync with partial rollouts): the tokens so far, kept."""
    stop_reason: int | str | None
    """The stop string or non-EOS stop token id that ended the sequence; None for EOS or length."""
    logprobs: list[float] | None
    top_logprobs: list[list[tuple[int, float]]] | None
    weight_version: int


class _Sequence:
    """One request's progress through a batch."""

    __slots__ = (
        "request",
        "sampler",
        "stop_ids",
        "token_ids",
        "logprobs",
        "top",
        "finish",
        "stop_reason",
        "stop_text_at",
    )

    def __init__(self, request: GenerationRequest, eos_ids: frozenset[int]) -> None:
        self.request = request
        self.sampler = SequenceSampler(request.sampling)
        self.stop_ids = set(request.stop_token_ids) | (set() if request.ignore_eos else set(eos_ids))
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.top: list[list[tuple[int, float]]] = []
        self.finish: Literal["stop", "length", "abort"] | None = None
        self.stop_reason: int | str | None = None
        self.stop_text_at: int | None = None


class Engine:
    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int = 2,
        max_model_len: int | None = None,
        chat_template: str | None = None,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads > 0:
            torch.set_num_threads(threads)
        started = time.monotonic()
        self.model_dir = Path(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        if chat_template is not None:
            self.tokenizer.chat_template = chat_template
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        self.load_seconds = time.monotonic() - started
        config = self.model.config
        model_len = int(getattr(config, "max_position_embeddings", 0) or 0) or 2048
        if max_model_len is not None and max_model_len > model_len:
            raise ValueError(f"max_model_len {max_model_len} exceeds the model's {model_len}")
        self.max_model_len = max_model_len or model_len
        self.vocab_size = int(config.vocab_size)
        self.eos_token_ids = frozenset(self._eos_ids())
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else min(self.eos_token_ids))
        self.weight_version = 0
        self.weights_path = str(self.model_dir)
        self._tok_lock = threading.Lock()
        self._abort = threading.Event()
        logger.info(
            "loaded %s in %.1f s (max_model_len %d, eos %s)",
            self.model_dir,
            self.load_seconds,
            self.max_model_len,
            sorted(self.eos_token_ids),
        )

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(int(x) for x in source)
        if not ids:
            raise ValueError(f"{self.model_dir}: no EOS token id in generation_config or tokenizer")
        return ids

    # ---- tokenizer -------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        with self._tok_lock:
            return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        chat_template_kwargs: dict[str, Any] | None = None,
        add_special_tokens: bool = False,
    ) -> list[int]:
        """Render with the chat template to text, then tokenise it (as vLLM does)."""
        kwargs = dict(chat_template_kwargs or {})
        with self._tok_lock:
            try:
                text = self.tokenizer.apply_chat_template(
                    messages,
                    tools=tools,
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=continue_final_message,
                    tokenize=False,
                    **kwargs,
                )
            except Exception as exc:  # jinja errors, raise_exception() in templates, bad kwargs
                raise BadRequest(f"chat template failed: {exc}", param="messages") from exc
            return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def detokenize(self, token_ids: list[int], *, skip_special_tokens: bool = False) -> str:
        with self._tok_lock:
            return self.tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def token_texts(self, token_ids: list[int]) -> list[str]:
        with self._tok_lock:
            return [self.tokenizer.decode([t]) for t in token_ids]

    def check_token_ids(self, token_ids: Any, param: str) -> list[int]:
        if not isinstance(token_ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in token_ids
        ):
            raise BadRequest(f"`{param}` must be a list of integer token ids", param=param)
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise BadRequest(f"`{param}` has token ids outside [0, {self.vocab_size}): {bad[:5]}", param=param)
        return token_ids

    def check_length(self, prompt_len: int, max_tokens: int, prompt_param: str) -> None:
        """Reject (never clamp) a prompt plus ``max_tokens`` over the context length."""
        if prompt_len == 0:
            raise BadRequest("the prompt is empty", param=prompt_param)
        if prompt_len + max_tokens > self.max_model_len:
            raise BadRequest(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} in the completion). "
                "Please reduce the length of the prompt or max_tokens.",
                param="max_tokens" if prompt_len < self.max_model_len else prompt_param,
            )

    # ---- generation ------------------------------------------------------------------------------

    def abort_running(self) -> None:
        """Ends the batch in flight (and any that starts before `allow_running`) before its next token: each
        sequence returns the tokens and log-probabilities it has, finish_reason `abort` (vLLM's `/pause?mode=abort`).
        The caller continues it from them, on new weights once they are loaded."""
        self._abort.set()

    def allow_running(self) -> None:
        self._abort.clear()

    @torch.inference_mode()
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Generate for all requests in one batch: left padding, per-sequence sampling and stopping."""
        from transformers import DynamicCache

        seqs = [_Sequence(r, self.eos_token_ids) for r in requests]
        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(seqs), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, r in enumerate(requests):
            input_ids[row, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids, dtype=torch.long)
            mask[row, width - len(r.prompt_ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        logits = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions,
            cache=cache, use_cache=True, logits_to_keep=1,
        ).logits[:, -1, :].float()  # fmt: skip
        next_pos = positions[:, -1] + 1
        active = list(range(len(seqs)))
        while True:
            want_lp = any(seqs[i].request.logprobs is not None for i in active)
            lp = raw_logprobs(logits) if want_lp else None
            keep: list[int] = []
            for row, i in enumerate(active):
                seq = seqs[i]
                token = seq.sampler.sample(logits[row])
                if seq.request.logprobs is not None and lp is not None:
                    seq.logprobs.append(float(lp[row, token]))
                    if seq.request.logprobs > 0:
                        values, ids = torch.topk(lp[row], seq.request.logprobs)
                        seq.top.append(list(zip(ids.tolist(), values.tolist())))
                    else:
                        seq.top.append([])
                self._append(seq, token)
                if seq.finish is None:
                    keep.append(row)
            if keep and self._abort.is_set():  # after a token each: the sampled ones are kept
                for row in keep:
                    seqs[active[row]].finish = "abort"
                keep = []
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long)
                cache.batch_select_indices(index)
                mask, next_pos = mask[index], next_pos[index]
                active = [active[row] for row in keep]
            step_ids = torch.tensor([[seqs[i].token_ids[-1]] for i in active], dtype=torch.long)
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
            logits = self.model(
                input_ids=step_ids, attention_mask=mask, position_ids=next_pos[:, None],
                cache=cache, use_cache=True,
            ).logits[:, -1, :].float()  # fmt: skip
            next_pos = next_pos + 1
        return [self._result(seq) for seq in seqs]

    def _append(self, seq: _Sequence, token: int) -> None:
        seq.token_ids.append(token)
        request = seq.request
        if token in seq.stop_ids:
            seq.finish = "stop"
            seq.stop_reason = token if token in request.stop_token_ids else None
            return
        if request.stop:
            text = self.detokenize(seq.token_ids, skip_special_tokens=request.skip_special_tokens)
            hits = [(text.find(s), s) for s in request.stop if s and s in text]
            if hits:
                at, stop = min(hits)
                seq.finish, seq.stop_reason = "stop", stop
                seq.stop_text_at = at + (len(stop) if request.include_stop_str_in_output else 0)
                return
        if len(seq.token_ids) >= request.max_tokens:
            seq.finish = "length"

    def _result(self, seq: _Sequence) -> GenerationResult:
        request = seq.request
        text_ids = seq.token_ids
        stopped_by_token = seq.finish == "stop" and seq.stop_text_at is None
        if stopped_by_token and not request.include_stop_str_in_output:
            text_ids = text_ids[:-1]
        text = self.detokenize(text_ids, skip_special_tokens=request.skip_special_tokens)
        if seq.stop_text_at is not None:
            text = text[: seq.stop_text_at]
        assert seq.finish is not None
        return GenerationResult(
            token_ids=list(seq.token_ids),
            text=text,
            finish_reason=seq.finish,
            stop_reason=seq.stop_reason,
            logprobs=seq.logprobs if request.logprobs is not None else None,
            top_logprobs=seq.top if request.logprobs is not None else None,
            weight_version=self.weight_version,
        )

    # ---- weights ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def load_weights(self, path: Path, weight_version: int | None = None) -> int:
        """Copy safetensors weights from ``path`` into the live model; all-or-nothing.

        Every parameter must be present with the same shape (a tied ``lm_head.weight`` may be absent);
        dtypes are cast to the serving dtype. Returns the new weight version.
        """
        from safetensors.torch import load_file

        started = time.monotonic()
        folder = Path(path)
        if not folder.is_dir():
            raise BadRequest(f"`path` {folder} is not a directory", param="path")
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise BadRequest(f"`path` {folder} holds no *.safetensors file", param="path")
        incoming: dict[str, torch.Tensor] = {}
        for file in files:
            incoming.update(load_file(str(file)))
        live = self.model.state_dict()
        tied = self._tied_aliases()
        unknown = sorted(set(incoming) - set(live))
        missing = sorted(set(live) - set(incoming) - set(tied))
        if unknown or missing:
            raise BadRequest(
                f"weights in {folder} do not fit the model: unknown {unknown[:5]}, missing {missing[:5]}", param="path"
            )
        for name, tensor in incoming.items():
            if tuple(tensor.shape) != tuple(live[name].shape):
                raise BadRequest(
                    f"{name}: shape {tuple(tensor.shape)}, model has {tuple(live[name].shape)}", param="path"
                )
        for alias, source in tied.items():
            if alias in incoming and source in incoming and not torch.equal(incoming[alias], incoming[source]):
                raise BadRequest(f"{alias} differs from {source}, but the model ties them", param="path")
        if weight_version is not None and weight_version <= self.weight_version:
            raise BadRequest(
                f"`weight_version` {weight_version} is not above the current {self.weight_version}",
                param="weight_version",
            )
        for name, tensor in incoming.items():
            if name in tied and tied[name] in incoming:
                continue
            live[name].copy_(tensor.to(live[name].dtype))
        self.weight_version = weight_version if weight_version is not None else self.weight_version + 1
        self.weights_path = str(folder)
        logger.info(
            "loaded weights from %s as version %d in %.1f s", folder, self.weight_version, time.monotonic() - started
        )
        return self.weight_version

    def _tied_aliases(self) -> dict[str, str]:
        """State-dict names that share storage with an earlier name: alias -> source."""
        seen: dict[int, str] = {}
        aliases: dict[str, str] = {}
        for name, tensor in self.model.state_dict(keep_vars=True).items():
            key = tensor.data_ptr()
            if key in seen:
                aliases[name] = seen[key]
            else:
                seen[key] = name
        return aliases

    def describe(self) -> dict[str, Any]:
        return {
            "model_dir": str(self.model_dir),
            "max_model_len": self.max_model_len,
            "weight_version": self.weight_version,
            "weights_path": self.weights_path,
            "eos_token_ids": sorted(self.eos_token_ids),
        }


def read_chat_template(path: Path) -> str:
    """A chat template file: raw Jinja, or JSON with a ``chat_template`` field (tokenizer_config style)."""
    text = Path(path).read_text()
    if path.suffix == ".json":
        return json.loads(text)["chat_template"]
    return text
