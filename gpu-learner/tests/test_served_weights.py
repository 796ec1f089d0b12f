"""The served-weights label and boot id (tbt_gpu.served_weights) and vLLM's middleware around it."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from tbt_gpu import vllm_served_weights
from tbt_gpu.served_weights import BOOT_HEADER, SERVED_HEADER, ServedWeights


def test_a_fresh_process_holds_no_label_and_a_new_boot_id() -> None:
    first, restarted = ServedWeights(), ServedWeights()
    assert first.info() == {"weight_version": None, "boot_id": first.boot_id}
    assert first.boot_id != restarted.boot_id
    assert first.served(first.ticket()) == "none"


def test_the_label_holds_only_after_the_load_and_a_change_mid_request_is_mixed() -> None:
    served = ServedWeights()
    served.set_label("loading:c@1")
    assert served.served(served.ticket()) == "none"
    served.loading()
    served.set_label("c@1")
    ticket = served.ticket()
    assert served.headers(ticket) == {SERVED_HEADER: "c@1", BOOT_HEADER: served.boot_id}
    served.loading()
    assert served.served(ticket) == "mixed"
    assert served.info()["weight_version"] is None
    served.set_label("c@2")
    assert served.served(served.ticket()) == "c@2"


def _request(path: str, body: dict[str, Any] | None = None, method: str = "POST") -> Any:
    raw = json.dumps(body or {}).encode()

    async def read() -> bytes:
        return raw

    return SimpleNamespace(url=SimpleNamespace(path=path), method=method, body=read)


def _answer(status: int = 200):
    async def call_next(_: Any) -> Any:
        return SimpleNamespace(status_code=status, headers={})

    return call_next


def test_the_vllm_middleware_tracks_syncs_and_tags_completions(monkeypatch) -> None:
    monkeypatch.setattr(vllm_served_weights, "SERVED", ServedWeights())
    tag = vllm_served_weights.tag_served_weights

    def completion() -> dict[str, str]:
        return asyncio.run(tag(_request("/v1/completions", {"prompt": [1]}), _answer())).headers

    assert completion()[SERVED_HEADER] == "none"
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": "/w"}}
    asyncio.run(tag(_request("/collective_rpc", rpc), _answer()))
    asyncio.run(tag(_request("/update_weight_version", {"new_version": "c@1"}), _answer(500)))
    assert completion()[SERVED_HEADER] == "none", "a refused label write is not the served label"
    asyncio.run(tag(_request("/update_weight_version", {"new_version": "c@1"}), _answer()))
    headers = completion()
    assert headers == {SERVED_HEADER: "c@1", BOOT_HEADER: vllm_served_weights.SERVED.boot_id}
    asyncio.run(tag(_request("/collective_rpc", {"method": "tbt_weight_transport"}), _answer()))
    assert completion()[SERVED_HEADER] == "c@1", "a probe loads nothing"
    asyncio.run(tag(_request("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/w"}), _answer()))
    assert completion()[SERVED_HEADER] == "none"
    info = asyncio.run(tag(_request("/weight_info", method="GET"), _answer()))
    assert info.headers[BOOT_HEADER] == vllm_served_weights.SERVED.boot_id
