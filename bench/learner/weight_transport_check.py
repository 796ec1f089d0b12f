"""The collective weight transport (tbt_gpu.weight_transport) on this machine, as a learner pushes into a server.

Rank 0 (this process, the learner's side) sends `--gb` of bf16 weights in 4096 x 4096 tensors from the device to a
receiver process (the server's side), which takes them onto its device as vLLM's worker would. Prints one JSON
line per backend: bytes, join and send seconds, GB/s. gloo always (staged through host memory); NCCL only with two
GPUs or more: NCCL refuses two ranks on one GPU, so on a single-GPU machine a learner and a server sharing the GPU
fall back to the disk export (docs/serving.md).

    python bench/learner/weight_transport_check.py [--device cuda|cpu] [--gb 2.0]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import secrets
import socket
import sys
import time

import torch
from tbt_gpu.weight_transport import WeightGroup

SIDE = 4096


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def receiver(
    port: int, backend: str, device: str, answers: mp.Queue, secret: str
) -> None:
    if device == "cuda":
        torch.cuda.set_device(1 if backend == "nccl" else 0)
    started = time.perf_counter()
    group = WeightGroup("127.0.0.1", port, 1, 2, backend, 120, secret=secret)
    try:
        named = group.receive()
        # Onto the server's device (a no-op for NCCL, whose buffers are already there).
        moved = [t.to(device) for _, t in named]
        if device == "cuda":
            torch.cuda.synchronize()
        answers.put(
            {
                "received": sum(t.numel() * t.element_size() for t in moved),
                "s": time.perf_counter() - started,
            }
        )
    finally:
        group.close()


def check(backend: str, device: str, gb: float) -> dict[str, object]:
    count = max(1, int(gb * 2**30 / (SIDE * SIDE * 2)))
    named = [
        (
            f"layer.{i}.weight",
            torch.randn(SIDE, SIDE, dtype=torch.bfloat16, device=device),
        )
        for i in range(count)
    ]
    port = free_port()
    secret = secrets.token_hex(32)
    ctx = mp.get_context("spawn")
    answers: mp.Queue = ctx.Queue()
    peer = ctx.Process(target=receiver, args=(port, backend, device, answers, secret))
    peer.start()
    try:
        started = time.perf_counter()
        group = WeightGroup("127.0.0.1", port, 0, 2, backend, 120, secret=secret)
        joined = time.perf_counter()
        try:
            sent = group.send(named)
        finally:
            group.close()
        done = time.perf_counter()
        answer = answers.get(timeout=120)
    finally:
        peer.join(timeout=30)
        if peer.is_alive():
            peer.kill()
    if answer["received"] != sent:
        raise RuntimeError(
            f"{backend}: sent {sent} bytes, the receiver got {answer['received']}"
        )
    return {
        "check": "weight_transport",
        "backend": backend,
        "device": device,
        "bytes": sent,
        "join_s": round(joined - started, 3),
        "send_s": round(done - joined, 3),
        "receiver_s": round(float(answer["s"]), 3),
        "gb_per_s": round(sent / 2**30 / (done - joined), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--gb",
        type=float,
        default=2.0,
        help="weights to send (2 GB: a 1B model in bf16)",
    )
    args = parser.parse_args()
    backends = ["gloo"]
    if args.device == "cuda":
        if torch.cuda.device_count() >= 2:
            backends.append("nccl")
        else:
            print(
                json.dumps(
                    {
                        "check": "weight_transport",
                        "backend": "nccl",
                        "skipped": "one GPU: NCCL needs two",
                    }
                )
            )
    for backend in backends:
        print(json.dumps(check(backend, args.device, args.gb)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
