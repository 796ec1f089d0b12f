"""The embedded policy server against the real SmolLM2-135M-Instruct (from ``ensure_model()``).

One server process serves the whole module; generations are kept to a few tokens so the file runs in
about a minute on two busy cores.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

from tbt_gpu.model_store import ensure_model

GPU_LEARNER = Path(__file__).resolve().parents[1]
MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]


class Client:
    def __init__(self, base: str, token: str = "") -> None:
        self.base = base
        self.token = token

    def request(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None, token: str | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        token = self.token if token is None else token
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=120) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def post(self, path: str, body: Any) -> Any:
        status, payload = self.request("POST", path, body)
        assert status == 200, payload
        return payload

    def get(self, path: str) -> Any:
        status, payload = self.request("GET", path)
        assert status == 200, payload
        return payload


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return ensure_model()


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    port = _free_port()
    log = tmp_path_factory.mktemp("policy_server") / "server.log"
    token = "t-" + os.urandom(16).hex()
    token_file = log.parent / "reload.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    weights_root = tmp_path_factory.mktemp("weights")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(GPU_LEARNER), os.environ.get("PYTHONPATH")]))}
    cmd = [
        sys.executable,
        "-m",
        "tbt_gpu.policy_server",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--max-batch",
        "4",
        "--batch-wait-ms",
        "200",
        "--threads",
        "2",
        "--token-file",
        str(token_file),
        "--weights-root",
        str(weights_root),
        "--weights-root",
        str(model_dir),
    ]
    with open(log, "w") as log_file:
        proc = subprocess.Popen(cmd, cwd=GPU_LEARNER, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    client = Client(f"http://127.0.0.1:{port}", token)
    client.weights_root = weights_root  # type: ignore[attr-defined]
    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            pytest.fail(f"policy server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if client.request("GET", "/health")[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"policy server did not come up:\n{log.read_text()}")
        time.sleep(0.5)
    yield client
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def reference(model_dir: Path):
    """The same model loaded in this process, for teacher-forced logprobs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return tokenizer, model


def _chat_ids(tokenizer, messages, **kwargs) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)
    return list(out["input_ids"])


def _teacher_forced(model, prompt: list[int], completion: list[int]) -> list[float]:
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[len(prompt) - 1 + i, token]) for i, token in enumerate(completion)]


def test_model_store_cli_is_idempotent(model_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(GPU_LEARNER)}
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "tbt_gpu.model_store"], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(model_dir)
    assert time.monotonic() - started < 10
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (model_dir / name).is_file(), name


def test_health_and_models(server: Client) -> None:
    health = server.get("/health")
    assert health["status"] == "ok"
    assert health["weight_version"] == 0
    assert health["max_model_len"] == 8192
    models = server.get("/v1/models")
    assert models["data"][0]["id"] == "smollm2-135m-instruct"


def test_tokenize_detokenize_round_trip(server: Client, reference) -> None:
    tokenizer, _ = reference
    text = "Hello, world! Ünïcödé, tabs\tand\nnewlines; 12345 <tool_call>{\"a\": 1}</tool_call>"
    out = server.post("/tokenize", {"prompt": text})
    assert out["count"] == len(out["tokens"]) > 5
    assert out["max_model_len"] == 8192
    assert out["tokens"] == tokenizer.encode(text)
    assert server.post("/detokenize", {"tokens": out["tokens"]})["prompt"] == text


def test_chat_template_rendering_matches_tokenizer(server: Client, reference) -> None:
    tokenizer, _ = reference
    served = server.post("/tokenize", {"messages": MESSAGES, "add_generation_prompt": True})["tokens"]
    assert served == _chat_ids(tokenizer, MESSAGES, add_generation_prompt=True)
    assert tokenizer.decode(served).endswith("<|im_start|>assistant\n")
    partial = [*MESSAGES, {"role": "assistant", "content": "The capital is"}]
    continued = server.post(
        "/tokenize", {"messages": partial, "add_generation_prompt": False, "continue_final_message": True}
    )["tokens"]
    assert continued == _chat_ids(tokenizer, partial, add_generation_prompt=False, continue_final_message=True)
    assert tokenizer.decode(continued).endswith("The capital is")


def test_completion_logprobs_match_teacher_forcing(server: Client, reference) -> None:
    tokenizer, model = reference
    prompt = _chat_ids(tokenizer, MESSAGES, add_generation_prompt=True)
    out = server.post(
        "/v1/completions",
        {
            "prompt": prompt,
            "max_tokens": 6,
            "temperature": 0.7,
            "top_p": 0.95,
            "seed": 1234,
            "logprobs": 0,
            "return_token_ids": True,
        },
    )
    choice = out["choices"][0]
    assert choice["prompt_token_ids"] == prompt
    tokens, served = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    assert 1 <= len(tokens) == len(served) <= 6
    assert out["usage"] == {
        "prompt_tokens": len(prompt),
        "completion_tokens": len(tokens),
        "total_tokens": len(prompt) + len(tokens),
    }
    assert choice["finish_reason"] in ("stop", "length")
    expected = _teacher_forced(model, prompt, tokens)
    assert max(abs(a - b) for a, b in zip(served, expected)) < 1e-3, (served, expected)
    # Raw logprobs (vLLM's default), not the temperature-scaled ones the token was drawn from.
    assert all(lp <= 0 for lp in served)


def test_greedy_and_seeded_sampling_are_deterministic(server: Client) -> None:
    body = {
        "prompt": "The three primary colours are",
        "max_tokens": 5,
        "temperature": 0,
        "logprobs": 0,
        "return_token_ids": True,
    }
    first, second = server.post("/v1/completions", body), server.post("/v1/completions", body)
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]
    assert first["choices"][0]["logprobs"]["token_logprobs"] == second["choices"][0]["logprobs"]["token_logprobs"]
    sampled = {**body, "temperature": 1.0, "seed": 7}
    assert (
        server.post("/v1/completions", sampled)["choices"][0]["token_ids"]
        == server.post("/v1/completions", sampled)["choices"][0]["token_ids"]
    )


def test_concurrent_requests_are_batched_like_sequential_ones(server: Client) -> None:
    bodies = [
        {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "logprobs": 0, "return_token_ids": True},
        {
            "prompt": "def fibonacci(n):\n   ",
            "max_tokens": 4,
            "temperature": 0,
            "logprobs": 0,
            "return_token_ids": True,
            "stop": ["\n\n"],
        },
    ]
    sequential = [server.post("/v1/completions", body)["choices"][0] for body in bodies]
    before = server.get("/health")["batcher"]
    concurrent: list[Any] = [None, None]

    def run(i: int) -> None:
        concurrent[i] = server.post("/v1/completions", bodies[i])["choices"][0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = server.get("/health")["batcher"]
    assert after["requests"] - before["requests"] == 2
    assert after["batches"] - before["batches"] == 1, "the two concurrent requests were not batched together"
    for seq, con in zip(sequential, concurrent):
        assert con["token_ids"] == seq["token_ids"]
        assert con["text"] == seq["text"]
        diffs = [abs(a - b) for a, b in zip(con["logprobs"]["token_logprobs"], seq["logprobs"]["token_logprobs"])]
        assert max(diffs) < 1e-3


def test_chat_completion_returns_raw_text_and_token_ids(server: Client, reference) -> None:
    tokenizer, _ = reference
    out = server.post(
        "/v1/chat/completions",
        {"messages": MESSAGES, "max_tokens": 12, "temperature": 0, "return_token_ids": True, "logprobs": True},
    )
    choice = out["choices"][0]
    assert out["prompt_token_ids"] == _chat_ids(tokenizer, MESSAGES, add_generation_prompt=True)
    assert "Paris" in choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length")
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"]) == out["usage"]["completion_tokens"]
    if choice["finish_reason"] == "stop":
        assert choice["token_ids"][-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
        assert "<|im_end|>" not in choice["message"]["content"]


def test_bad_requests_are_400_naming_the_field(server: Client) -> None:
    too_long = [1] * 8190
    status, body = server.request("POST", "/v1/completions", {"prompt": too_long, "max_tokens": 10})
    assert status == 400 and body["error"]["param"] == "max_tokens" and "8192" in body["error"]["message"]
    status, body = server.request("POST", "/v1/completions", {"prompt": [1] * 8200, "max_tokens": 1})
    assert status == 400 and body["error"]["param"] == "prompt"
    cases = [
        ({"prompt": "hi"}, "max_tokens"),
        ({"prompt": "hi", "max_tokens": 2, "temperature": "hot"}, "temperature"),
        ({"prompt": "hi", "max_tokens": 2, "n": 2}, "n"),
        ({"prompt": [1, -5], "max_tokens": 2}, "prompt"),
        ({"prompt": "hi", "max_tokens": 2, "presence_penalty": 0.5}, "presence_penalty"),
    ]
    for request, field in cases:
        status, body = server.request("POST", "/v1/completions", request)
        assert status == 400, (request, body)
        assert body["error"]["param"] == field and body["error"]["type"] == "BadRequestError"
        assert body["error"]["code"] == 400
    status, body = server.request("POST", "/v1/completions", raw=b"{not json")
    assert status == 400 and "JSON" in body["error"]["message"]
    assert server.request("GET", "/nowhere")[0] == 404


def test_reload_weights_swaps_after_in_flight_requests(server: Client, model_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    greedy = {
        "prompt": "The capital of France is",
        "max_tokens": 5,
        "temperature": 0,
        "logprobs": 0,
        "return_token_ids": True,
    }
    original = server.post("/v1/completions", greedy)
    tensors = load_file(str(model_dir / "model.safetensors"))
    tensors["model.norm.weight"] = -tensors["model.norm.weight"]  # negated logits: argmax becomes argmin
    modified = server.weights_root / "serving"  # type: ignore[attr-defined]
    modified.mkdir()
    save_file(tensors, str(modified / "model.safetensors"))
    del tensors

    in_flight: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: in_flight.update(server.post("/v1/completions", greedy)))
    thread.start()
    deadline = time.monotonic() + 30
    while not server.get("/health")["batcher"]["busy"] and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    reloaded = server.post("/reload_weights", {"path": str(modified)})
    thread.join()
    assert reloaded["weight_version"] == 1
    assert in_flight["weight_version"] == 0, "the in-flight request must finish on the old weights"
    assert in_flight["choices"][0]["token_ids"] == original["choices"][0]["token_ids"]
    assert server.get("/health")["weight_version"] == 1

    changed = server.post("/v1/completions", greedy)
    assert changed["weight_version"] == 1
    assert changed["choices"][0]["token_ids"] != original["choices"][0]["token_ids"]

    missing = server.weights_root / "missing"  # type: ignore[attr-defined]
    status, body = server.request("POST", "/reload_weights", {"path": str(missing)})
    assert status == 400 and body["error"]["param"] == "path"
    assert server.post("/reload_weights", {"path": str(model_dir)})["weight_version"] == 2
    restored = server.post("/v1/completions", greedy)
    assert restored["choices"][0]["token_ids"] == original["choices"][0]["token_ids"]


def test_vllm_dev_mode_weight_sync_routes(server: Client, model_dir: Path, tmp_path: Path) -> None:
    """The routes our weight-sync client calls on vLLM: pause holds new generations until resume."""
    greedy = {"prompt": "Hello", "max_tokens": 2, "temperature": 0, "return_token_ids": True}
    boot_id = server.get("/weight_info")["boot_id"]
    assert server.get("/weight_info") == {"weight_version": None, "boot_id": boot_id}
    before = server.get("/health")["weight_version"]
    assert server.post("/pause?mode=wait", {}) == {"status": "paused"}
    assert server.get("/is_paused") == {"is_paused": True}
    held: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: held.update(server.post("/v1/completions", greedy)))
    thread.start()
    time.sleep(0.5)
    assert not held, "a generation must wait while the server is paused"
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(model_dir)}}
    assert server.post("/collective_rpc", rpc) == {"results": [None]}
    assert server.post("/reset_prefix_cache", {}) == {}
    assert server.post("/update_weight_version", {"new_version": "c@1"})["new_version"] == "c@1"
    assert server.post("/resume", {}) == {"status": "resumed"}
    thread.join(timeout=60)
    assert held["weight_version"] == before + 1, "the held generation ran on the reloaded weights"
    assert server.get("/weight_info") == {"weight_version": "c@1", "boot_id": boot_id}
    # Each completion names the weights that served it: the label once the sync wrote it, none after a bare load.
    req = urllib.request.Request(server.base + "/v1/completions", data=json.dumps(greedy).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=120) as response:
        assert response.headers["x-tbt-served-weights"] == "c@1"
        assert response.headers["x-tbt-boot-id"] == boot_id
    assert server.post("/collective_rpc", rpc) == {"results": [None]}
    assert server.get("/weight_info")["weight_version"] is None, "a load drops the label until a sync writes one"
    with urllib.request.urlopen(req, timeout=120) as response:
        assert response.headers["x-tbt-served-weights"] == "none"
    assert server.post("/update_weight_version", {"new_version": "c@1"})["new_version"] == "c@1"
    status, body = server.request("POST", "/collective_rpc", {"method": "other"})
    assert status == 400 and body["error"]["param"] == "method"
    status, body = server.request("POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {}})
    assert status == 400 and body["error"]["param"] == "kwargs"


def test_pause_abort_returns_partial_tokens_and_logprobs(server: Client) -> None:
    """Partial rollouts: `/pause?mode=abort` ends the generation in flight with what it sampled (finish_reason
    `abort`, a log-probability per token); after /resume the client goes on from those tokens."""
    long = {"prompt": [1, 2, 3], "max_tokens": 400, "temperature": 0, "ignore_eos": True, "logprobs": 0,
            "return_token_ids": True}  # fmt: skip
    in_flight: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: in_flight.update(server.post("/v1/completions", long)))
    thread.start()
    deadline = time.monotonic() + 30
    while not server.get("/health")["batcher"]["busy"] and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert server.post("/pause?mode=abort", {}) == {"status": "paused"}
    thread.join(timeout=60)
    choice = in_flight["choices"][0]
    assert choice["finish_reason"] == "abort"
    assert 0 < len(choice["token_ids"]) < 400
    assert len(choice["logprobs"]["token_logprobs"]) == len(choice["token_ids"])
    assert server.post("/resume", {}) == {"status": "resumed"}
    rest = {**long, "prompt": [1, 2, 3, *choice["token_ids"]], "max_tokens": 2}
    assert server.post("/v1/completions", rest)["choices"][0]["finish_reason"] == "length"
    status, body = server.request("POST", "/pause?mode=sideways", {})
    assert status == 400 and body["error"]["param"] == "mode"


def test_finding_15_reload_weights_needs_the_token_and_a_weights_folder(
    server: Client, model_dir: Path, tmp_path: Path
) -> None:
    assert server.request("GET", "/health", token="")[0] == 200, "inference and health stay open on loopback"
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(model_dir)}}
    mutating = [
        ("/reload_weights", {"path": str(model_dir)}),
        ("/pause?mode=wait", {}),
        ("/resume", {}),
        ("/collective_rpc", rpc),
        ("/reset_prefix_cache", {}),
        ("/update_weight_version", {"new_version": "evil@1"}),
    ]
    for route, payload in mutating:
        for token in ("", "wrong"):
            status, body = server.request("POST", route, payload, token=token)
            assert status == 401 and body["error"]["type"] == "AuthenticationError", (route, body)
    assert server.get("/is_paused") == {"is_paused": False}
    assert server.get("/weight_info")["weight_version"] != "evil@1"
    outside = tmp_path / "outside"
    outside.mkdir()
    link = server.weights_root / "link-outside"  # type: ignore[attr-defined]
    link.symlink_to(outside)
    for path in (outside, link, server.weights_root / ".." / outside.name):  # type: ignore[attr-defined]
        status, body = server.request("POST", "/reload_weights", {"path": str(path)})
        assert status == 403 and body["error"]["type"] == "PermissionDeniedError", (path, body)
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
        status, body = server.request("POST", "/collective_rpc", rpc)
        assert status == 403 and body["error"]["type"] == "PermissionDeniedError", (path, body)
    assert server.get("/health")["weight_version"] >= 0
