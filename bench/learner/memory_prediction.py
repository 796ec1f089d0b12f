"""The memory model's prediction (tbt_gpu.learner.memory_model.estimate) for one learner config, as one JSON line.

    PYTHONPATH=gpu-learner python bench/learner/memory_prediction.py --learner-config learner.json \
        --tokens 32768 --prompt-tokens 1024 [--target-device cuda|cpu] [--delta-rule fla|torch]

bench/learner/gpu_check.py runs it in a subprocess before its measured run: the memory model builds the learner's
trainer on fake tensors under a fake process group of its own, which cannot share a process with torchrun's real
one. One rank (world size 1), one trajectory of `--tokens` tokens whose first `--prompt-tokens` are the prompt, as
the measured run. The JSON holds the tracked peak of the learner's GPU tensors, the overlap term (one more FSDP
unit in flight), the full per-GPU figure with the fixed overheads, and those overheads themselves, so the caller
compares like with like (memory_model.gpu_gib: (tracked + overlap) x FRAGMENTATION + CUDA context + NCCL).
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import sys
import time

from tbt_gpu.learner import memory_model
from tbt_gpu.learner.config import LearnerConfig

GIB = 1024**3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learner-config", required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--prompt-tokens", type=int, default=memory_model.PROMPT_TOKENS)
    parser.add_argument("--target-device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--delta-rule", choices=["fla", "torch"], default="fla")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    started = time.perf_counter()
    data = json.loads(pathlib.Path(args.learner_config).read_text(encoding="utf-8"))
    # As the memory model's CLI: the estimate resolves the config itself, at world size 1 on the target device.
    data.setdefault("distributed", {}).update({"world_size": None})
    cfg = LearnerConfig.from_dict(data)
    notes: list[str] = []
    hf_config = memory_model.load_hf_config(cfg.model.path, None, notes)
    est = memory_model.estimate(
        cfg,
        hf_config,
        world_size=1,
        gpus_per_node=1,
        lengths=[args.tokens],
        prompt_tokens=args.prompt_tokens,
        target_device=args.target_device,
        delta_rule=args.delta_rule,
    )
    one = est.lengths[0]
    print(
        json.dumps(
            {
                "check": "memory_model",
                "target_device": args.target_device,
                "delta_rule": args.delta_rule,
                "parameters": est.parameters,
                "tokens": one.tokens,
                "prompt_tokens": args.prompt_tokens,
                "offload": est.offload,
                "tracked_gib": round(one.gpu_tracked / GIB, 3),
                "overlap_gib": round(one.overlap / GIB, 3),
                "gpu_total_gib": round(one.gpu_total, 3),
                "breakdown_gib": {k: round(v / GIB, 3) for k, v in one.gpu_breakdown.items() if v},
                "fragmentation": memory_model.FRAGMENTATION,
                "cuda_context_gib": memory_model.CUDA_CONTEXT_GIB,
                "nccl_gib": memory_model.NCCL_GIB,
                "host_rank_train_gib": round(est.host_rank_train / GIB, 2),
                "host_node_gib": round(est.host_node_gib, 2),
                "notes": notes + est.notes,
                "s": round(time.perf_counter() - started, 1),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
