"""third review, finding 7: vLLM's dev-mode routes behind the run's token (tbt_gpu.vllm_route_guard).

The pure decision is tested here; test/gpu-activities.test.ts checks the same against the embedded vLLM."""

import json
from pathlib import Path

import pytest

from tbt_gpu.vllm_route_guard import refusal


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    token = tmp_path / "policy-server.token"
    token.write_text("s3cret\n")
    root = tmp_path / "campaign"
    (root / "exports" / "step-1").mkdir(parents=True)
    monkeypatch.setenv("TBT_POLICY_TOKEN_FILE", str(token))
    monkeypatch.setenv("TBT_WEIGHTS_ROOTS", str(root))
    return root


def rpc(method: str, **kwargs: object) -> bytes:
    return json.dumps({"method": method, "kwargs": kwargs}).encode()


def test_third_review_finding_7_control_routes_need_the_token(configured: Path) -> None:
    guarded = ["/collective_rpc", "/pause", "/resume", "/reset_prefix_cache", "/update_weight_version"]
    guarded += ["/weight_checker", "/sleep", "/server_info", "/v1/load_lora_adapter", "/some_future_route"]
    for path in guarded:
        assert refusal(path, None, b"{}") == (401, f"{path} needs the policy server's control token"), path
        assert refusal(path, "Bearer wrong", b"{}")[0] == 401  # type: ignore[index]
    for path in ("/v1/chat/completions", "/v1/models", "/tokenize", "/detokenize", "/health", "/weight_info"):
        assert refusal(path, None, b"") is None, path


def test_third_review_finding_7_collective_rpc_runs_only_weight_sync(configured: Path) -> None:
    auth = "Bearer s3cret"
    inside = str(configured / "exports" / "step-1")
    assert refusal("/collective_rpc", auth, rpc("reload_weights", weights_path=inside)) is None
    assert refusal("/collective_rpc", auth, rpc("tbt_weight_transport")) is None
    assert refusal("/collective_rpc", auth, rpc("receive_tbt_weights", host="127.0.0.1", port=1)) is None
    assert refusal("/collective_rpc", auth, rpc("save_sharded_state", path="/tmp/x")) == (
        403, "collective_rpc method 'save_sharded_state' is not one weight sync uses")  # fmt: skip
    outside = refusal("/collective_rpc", auth, rpc("reload_weights", weights_path=f"{configured}/../elsewhere"))
    assert outside == (403, "weights_path is outside the campaign's folders")
    lora = json.dumps({"lora_name": "policy-lora", "lora_path": "/root/other"}).encode()
    assert refusal("/v1/load_lora_adapter", auth, lora) == (403, "lora_path is outside the campaign's folders")
    assert refusal("/collective_rpc", auth, b"not json")[0] == 400  # type: ignore[index]


def test_third_review_finding_7_no_token_file_refuses_every_control_route(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TBT_POLICY_TOKEN_FILE", raising=False)
    assert refusal("/collective_rpc", "Bearer ", b"{}")[0] == 503  # type: ignore[index]
    assert refusal("/v1/chat/completions", None, b"") is None
