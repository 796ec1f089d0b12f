"""Request validation and response shapes for the OpenAI/vLLM subset we serve.

Bad input is a ``BadRequest`` naming the field. Parameters we do not implement are rejected when set to a
non-default value, never silently ignored: a silently different sampler would make rollouts off-policy.
Unknown fields are ignored, as vLLM does.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from .engine import Engine, GenerationRequest, GenerationResult
from .errors import BadRequest
from .sampling import SamplingParams

MAX_LOGPROBS = 20

_MUST_BE_DEFAULT: dict[str, tuple[Any, ...]] = {
    # field: accepted values (None always means "unset")
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_p": (0, 0.0),
    "min_tokens": (0,),
    "logit_bias": ({},),
    "use_beam_search": (False,),
    "best_of": (1,),
    "echo": (False,),
    "suffix": ("",),
    "prompt_logprobs": (),
    "guided_json": (),
    "guided_regex": (),
    "guided_choice": (),
    "guided_grammar": (),
    "structured_outputs": (),
    "response_format": ({"type": "text"},),
    "prompt_embeds": (),
    "allowed_token_ids": (),
    "bad_words": ([],),
    "chat_template": (),
}


class Body:
    """Typed access to a JSON object; ``None`` counts as absent, as OpenAI clients send nulls."""

    def __init__(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise BadRequest("the request body must be a JSON object")
        self.data = data

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def raw(self, name: str) -> Any:
        return self.data.get(name)

    def integer(
        self,
        name: str,
        default: int | None = None,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        value = self.data.get(name)
        if value is None:
            if required:
                raise BadRequest(f"`{name}` is required", param=name)
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRequest(f"`{name}` must be an integer", param=name)
        if minimum is not None and value < minimum:
            raise BadRequest(f"`{name}` must be >= {minimum}, got {value}", param=name)
        if maximum is not None and value > maximum:
            raise BadRequest(f"`{name}` must be <= {maximum}, got {value}", param=name)
        return value

    def number(
        self, name: str, default: float, *, minimum: float, maximum: float, exclusive_minimum: bool = False
    ) -> float:
        value = self.data.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(f"`{name}` must be a number", param=name)
        low_ok = value > minimum if exclusive_minimum else value >= minimum
        if not low_ok or value > maximum:
            low = "(" if exclusive_minimum else "["
            raise BadRequest(f"`{name}` must be in {low}{minimum}, {maximum}], got {value}", param=name)
        return float(value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise BadRequest(f"`{name}` must be a boolean", param=name)
        return value

    def string(self, name: str, *, required: bool = False) -> str | None:
        value = self.data.get(name)
        if value is None:
            if required:
                raise BadRequest(f"`{name}` is required", param=name)
            return None
        if not isinstance(value, str):
            raise BadRequest(f"`{name}` must be a string", param=name)
        return value

    def obj(self, name: str) -> dict[str, Any] | None:
        value = self.data.get(name)
        if value is not None and not isinstance(value, dict):
            raise BadRequest(f"`{name}` must be an object", param=name)
        return value

    def stop_strings(self) -> tuple[str, ...]:
        value = self.data.get("stop")
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            return tuple(s for s in value if s)
        raise BadRequest("`stop` must be a string or a list of strings", param="stop")

    def token_ids(self, name: str) -> tuple[int, ...]:
        value = self.data.get(name)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
            raise BadRequest(f"`{name}` must be a list of integers", param=name)
        return tuple(value)


def check_model_name(body: Body, served_name: str) -> None:
    from .errors import NotFound

    name = body.string("model")
    if name is not None and name != served_name:
        raise NotFound(f"The model `{name}` does not exist; this server serves `{served_name}`.", param="model")


def _reject_unsupported(body: Body) -> None:
    for name, accepted in _MUST_BE_DEFAULT.items():
        value = body.raw(name)
        if value is not None and value not in accepted:
            raise BadRequest(f"`{name}` is not supported by this server (got {json.dumps(value)})", param=name)
    if body.boolean("stream", False):
        raise BadRequest("streaming is not supported (rollouts must not stream: token ids get lost)", param="stream")
    body.integer("n", 1, minimum=1, maximum=1)


def _sampling(body: Body) -> SamplingParams:
    return SamplingParams(
        temperature=body.number("temperature", 1.0, minimum=0.0, maximum=100.0),
        top_p=body.number("top_p", 1.0, minimum=0.0, maximum=1.0, exclusive_minimum=True),
        top_k=body.integer("top_k", 0, minimum=-1) or 0,
        seed=body.integer("seed", None, minimum=-(2**63), maximum=2**64 - 1),
    )


@dataclass(kw_only=True, slots=True)
class Parsed:
    """A validated generation request plus what the response needs to know."""

    request: GenerationRequest
    prompt_ids: list[int]
    return_token_ids: bool
    tokens_as_ids: bool
    top_logprobs: int | None = None


# ---- /v1/completions -----------------------------------------------------------------------------


def parse_completion(body: Body, engine: Engine) -> Parsed:
    _reject_unsupported(body)
    prompt = body.raw("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        if not prompt:
            raise BadRequest("`prompt` is empty", param="prompt")
        prompt_ids = engine.tokenize(prompt, add_special_tokens=body.boolean("add_special_tokens", True))
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        prompt_ids = engine.check_token_ids(prompt, "prompt")
    elif prompt is None:
        raise BadRequest("`prompt` is required", param="prompt")
    else:
        raise BadRequest(
            "`prompt` must be a non-empty string or list of token ids (one prompt per request)", param="prompt"
        )
    max_tokens = body.integer("max_tokens", required=True, minimum=1)
    assert max_tokens is not None
    engine.check_length(len(prompt_ids), max_tokens, "prompt")
    logprobs = body.integer("logprobs", None, minimum=0, maximum=MAX_LOGPROBS)
    return Parsed(
        request=_generation_request(body, engine, prompt_ids, max_tokens, logprobs),
        prompt_ids=prompt_ids,
        return_token_ids=body.boolean("return_token_ids", False),
        tokens_as_ids=body.boolean("return_tokens_as_token_ids", False),
    )


def _generation_request(
    body: Body, engine: Engine, prompt_ids: list[int], max_tokens: int, logprobs: int | None
) -> GenerationRequest:
    return GenerationRequest(
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        sampling=_sampling(body),
        logprobs=logprobs,
        stop=body.stop_strings(),
        stop_token_ids=tuple(engine.check_token_ids(list(body.token_ids("stop_token_ids")), "stop_token_ids")),
        ignore_eos=body.boolean("ignore_eos", False),
        include_stop_str_in_output=body.boolean("include_stop_str_in_output", False),
        skip_special_tokens=body.boolean("skip_special_tokens", True),
    )


def completion_response(parsed: Parsed, result: GenerationResult, engine: Engine, model: str) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "text": result.text,
        "logprobs": None,
        "finish_reason": result.finish_reason,
        "stop_reason": result.stop_reason,
    }
    if result.logprobs is not None:
        tokens = _token_strings(engine, result.token_ids, parsed.tokens_as_ids)
        top: list[dict[str, float]] = []
        for token, lp, alternatives in zip(tokens, result.logprobs, result.top_logprobs or []):
            entry = dict(
                zip(
                    _token_strings(engine, [t for t, _ in alternatives], parsed.tokens_as_ids),
                    (v for _, v in alternatives),
                )
            )
            entry[token] = lp
            top.append(entry)
        offsets, at = [], 0
        for token in tokens:
            offsets.append(at)
            at += len(token)
        choice["logprobs"] = {
            "text_offset": offsets,
            "token_logprobs": result.logprobs,
            "tokens": tokens,
            "top_logprobs": top,
        }
    if parsed.return_token_ids:
        choice["prompt_token_ids"] = parsed.prompt_ids
        choice["token_ids"] = result.token_ids
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(parsed, result),
        "weight_version": result.weight_version,
    }


# ---- /v1/chat/completions ------------------------------------------------------------------------


def normalise_messages(value: Any) -> list[dict[str, Any]]:
    """Check messages; flatten text content parts; parse JSON string tool-call arguments (as vLLM does)."""
    if not isinstance(value, list) or not value:
        raise BadRequest("`messages` must be a non-empty list", param="messages")
    out = []
    for index, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"`messages[{index}]` must be an object with a string `role`", param="messages")
        message = dict(message)
        content = message.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise BadRequest(f"`messages[{index}].content`: only text parts are supported", param="messages")
                texts.append(part["text"])
            message["content"] = "\n".join(texts)
        elif content is not None and not isinstance(content, str):
            raise BadRequest(
                f"`messages[{index}].content` must be a string, a list of text parts or null", param="messages"
            )
        if isinstance(message.get("tool_calls"), list):
            calls = []
            for call in message["tool_calls"]:
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    function = dict(call["function"])
                    if isinstance(function.get("arguments"), str):
                        try:
                            function["arguments"] = json.loads(function["arguments"])
                        except ValueError:
                            pass
                    call = {**call, "function": function}
                calls.append(call)
            message["tool_calls"] = calls
        out.append(message)
    return out


def _tools(body: Body) -> list[dict[str, Any]] | None:
    tools = body.raw("tools")
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise BadRequest("`tools` must be a list of objects", param="tools")
    return tools


def render_chat_prompt(body: Body, engine: Engine) -> list[int]:
    """``messages`` + ``tools`` through the chat template, with vLLM's defaults for the flags."""
    add_generation_prompt = body.boolean("add_generation_prompt", True)
    continue_final_message = body.boolean("continue_final_message", False)
    if add_generation_prompt and continue_final_message:
        raise BadRequest(
            "`continue_final_message` needs `add_generation_prompt: false`", param="continue_final_message"
        )
    return engine.render_chat(
        normalise_messages(body.raw("messages")),
        tools=_tools(body),
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        chat_template_kwargs=body.obj("chat_template_kwargs"),
        add_special_tokens=body.boolean("add_special_tokens", False),
    )


def parse_chat(body: Body, engine: Engine) -> Parsed:
    _reject_unsupported(body)
    tool_choice = body.raw("tool_choice")
    if tool_choice not in (None, "auto", "none"):
        raise BadRequest("`tool_choice` must be \"auto\" or \"none\" (no guided decoding here)", param="tool_choice")
    prompt_ids = render_chat_prompt(body, engine)
    name = "max_completion_tokens" if body.has("max_completion_tokens") else "max_tokens"
    # vLLM's chat default: whatever context is left after the prompt.
    max_tokens = body.integer(name, max(engine.max_model_len - len(prompt_ids), 1), minimum=1)
    assert max_tokens is not None
    engine.check_length(len(prompt_ids), max_tokens, "messages")
    want = body.boolean("logprobs", False)
    top = body.integer("top_logprobs", None, minimum=0, maximum=MAX_LOGPROBS)
    if top and not want:
        raise BadRequest("`top_logprobs` needs `logprobs: true`", param="top_logprobs")
    return Parsed(
        request=_generation_request(body, engine, prompt_ids, max_tokens, (top or 0) if want else None),
        prompt_ids=prompt_ids,
        return_token_ids=body.boolean("return_token_ids", False),
        tokens_as_ids=body.boolean("return_tokens_as_token_ids", False),
        top_logprobs=top,
    )


def chat_response(parsed: Parsed, result: GenerationResult, engine: Engine, model: str) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        # Raw text: tool calls are left in the content for the client's interpreter to parse.
        "message": {"role": "assistant", "content": result.text, "tool_calls": []},
        "logprobs": None,
        "finish_reason": result.finish_reason,
        "stop_reason": result.stop_reason,
    }
    if result.logprobs is not None:
        tokens = _token_strings(engine, result.token_ids, parsed.tokens_as_ids)
        content = []
        for token, lp, alternatives in zip(tokens, result.logprobs, result.top_logprobs or []):
            alt_strings = _token_strings(engine, [t for t, _ in alternatives], parsed.tokens_as_ids)
            content.append({
                "token": token, "logprob": lp, "bytes": list(token.encode()),
                "top_logprobs": [{"token": s, "logprob": v, "bytes": list(s.encode())}
                                 for s, (_, v) in zip(alt_strings, alternatives)],
            })  # fmt: skip
        choice["logprobs"] = {"content": content}
    if parsed.return_token_ids:
        choice["token_ids"] = result.token_ids
    response: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(parsed, result),
        "weight_version": result.weight_version,
    }
    if parsed.return_token_ids:
        response["prompt_token_ids"] = parsed.prompt_ids
    return response


# ---- /tokenize, /detokenize, /reload_weights -----------------------------------------------------


def tokenize(body: Body, engine: Engine) -> dict[str, Any]:
    if body.has("prompt") == body.has("messages"):
        raise BadRequest("give exactly one of `prompt` and `messages`", param="prompt")
    if body.has("prompt"):
        prompt = body.string("prompt", required=True)
        assert prompt is not None
        tokens = engine.tokenize(prompt, add_special_tokens=body.boolean("add_special_tokens", True))
    else:
        tokens = render_chat_prompt(body, engine)
    response: dict[str, Any] = {"count": len(tokens), "max_model_len": engine.max_model_len, "tokens": tokens}
    if body.boolean("return_token_strs", False):
        response["token_strs"] = engine.token_texts(tokens)
    return response


def detokenize(body: Body, engine: Engine) -> dict[str, Any]:
    tokens = engine.check_token_ids(body.raw("tokens"), "tokens")
    return {"prompt": engine.detokenize(tokens, skip_special_tokens=False)}


def reload_request(body: Body) -> tuple[str, int | None]:
    path = body.string("path", required=True)
    assert path is not None
    return path, body.integer("weight_version", None, minimum=0)


def _usage(parsed: Parsed, result: GenerationResult) -> dict[str, int]:
    prompt, completion = len(parsed.prompt_ids), len(result.token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _token_strings(engine: Engine, token_ids: list[int], as_ids: bool) -> list[str]:
    if as_ids:
        return [f"token_id:{t}" for t in token_ids]
    return engine.token_texts(token_ids)
