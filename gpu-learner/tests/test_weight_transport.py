"""The collective weight transport: a gloo round trip between processes, and a learner pushing its weights."""

from __future__ import annotations

import concurrent.futures
import io
import multiprocessing
import pathlib
import socket

import torch
from learner_support import Learner, make_tiny_model, max_abs_diff, random_batch, read_export, write_config

from tbt_gpu.weight_transport import WeightGroup, plan_buckets


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receive_into(port: int, out: multiprocessing.Queue) -> None:
    """Rank 1 in its own process, as a policy server's worker is: reports what arrived."""
    group = WeightGroup("127.0.0.1", port, 1, 2, "gloo", 60)
    try:
        buffer = io.BytesIO()  # bytes, not tensors: a queued tensor is shared memory that dies with this process
        torch.save({name: t.clone() for name, t in group.receive()}, buffer)
        out.put(buffer.getvalue())
    finally:
        group.close()


def received(out: multiprocessing.Queue) -> dict[str, torch.Tensor]:
    return torch.load(io.BytesIO(out.get(timeout=60)))


def test_plan_buckets_aligns_and_splits() -> None:
    plan = plan_buckets([torch.float32, torch.bfloat16, torch.int64], [[10], [3], [200]], bucket_bytes=100)
    # 40 bytes, then 6 at offset 64 (aligned); the 1600-byte tensor gets a bucket of its own.
    assert plan == [(128, [(0, 0, 40), (1, 64, 6)]), (1600, [(2, 0, 1600)])]


def test_round_trip_keeps_every_dtype_shape_and_value() -> None:
    generator = torch.Generator().manual_seed(0)
    sent = {
        "a.weight": torch.randn(64, 33, generator=generator),
        "b.bias": torch.randn(7, generator=generator).to(torch.bfloat16),
        "c.ids": torch.arange(1000, dtype=torch.int64),
        "d.scalar": torch.tensor(3.5),
        "e.transposed": torch.randn(5, 9, generator=generator).t(),  # not contiguous
    }
    port = free_port()
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    receiver = context.Process(target=receive_into, args=(port, out))
    receiver.start()
    group = WeightGroup("127.0.0.1", port, 0, 2, "gloo", 60)
    try:
        group.send(list(sent.items()), bucket_bytes=4096)  # small buckets: several in flight
    finally:
        group.close()
    got = received(out)
    receiver.join(timeout=60)
    assert list(got) == list(sent)
    for name, tensor in sent.items():
        assert got[name].dtype == tensor.dtype and got[name].shape == tensor.shape, name
        assert torch.equal(got[name], tensor), name


def test_learner_pushes_the_exported_weights_and_refuses_without_a_receiver(tmp_path: pathlib.Path) -> None:
    model = make_tiny_model(tmp_path / "model")
    ckpt = tmp_path / "ckpt"
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=ckpt, train={"micro_batch_tokens": 48})
    batch = random_batch(tmp_path / "b1.jsonl", seed=1)
    learner = Learner(config, ckpt)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    context = multiprocessing.get_context("spawn")
    try:
        assert learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(batch)})[0] == 200
        status, export = learner.call("POST", "/export", {"step_id": 1})
        assert status == 200, export

        port = free_port()
        out = context.Queue()
        receiver = context.Process(target=receive_into, args=(port, out))
        receiver.start()
        status, pushed = learner.call("POST", "/push_weights", {"step_id": 1, "host": "127.0.0.1", "port": port})
        assert status == 200, pushed
        got = received(out)
        receiver.join(timeout=60)
        exported = read_export(pathlib.Path(export["path"]))
        assert pushed["tensors"] == len(exported) and pushed["backend"] == "gloo"
        assert max_abs_diff(got, exported) == 0.0

        # A step the learner does not hold, and bad fields, are refused before any group is opened.
        assert learner.call("POST", "/push_weights", {"step_id": 2, "host": "127.0.0.1", "port": port})[0] == 409
        status, bad = learner.call("POST", "/push_weights", {"step_id": 1, "host": "127.0.0.1", "port": "x"})
        assert status == 400 and bad["error"].startswith("field 'port'")
        body = {"step_id": 1, "host": "127.0.0.1", "port": port, "backend": "mpi"}
        status, bad = learner.call("POST", "/push_weights", body)
        assert status == 400 and bad["error"].startswith("field 'backend'")

        # Nobody joins: the push fails after its timeout, and the learner keeps serving.
        lonely = pool.submit(
            learner.call,
            "POST",
            "/push_weights",
            {"step_id": 1, "host": "127.0.0.1", "port": free_port(), "timeout_s": 2},
        )
        status, failed = lonely.result(timeout=60)
        assert status == 502 and failed["code"] == "push_failed", failed
        assert learner.call("GET", "/health")[1]["step"] == 1
    finally:
        pool.shutdown(wait=False)
        learner.stop()
