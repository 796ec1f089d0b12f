"""One rank of the sharded-load memory test (run by torchrun): prints this rank's peak host memory growth while
the learner loads its model, as JSON on one line."""

from __future__ import annotations

import json
import sys

from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import destroy_distributed, init_distributed
from tbt_gpu.learner.model import load_model


def status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def main() -> None:
    info = init_distributed(LearnerConfig.load(sys.argv[1]))
    # The peak so far is the imports and the process group; reset it so VmHWM measures the load alone.
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")
    before = status_kib("VmRSS")
    model, model_info = load_model(info)
    peak = status_kib("VmHWM")
    local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    print(json.dumps({"rank": info.rank, "grew_bytes": (peak - before) * 1024, "local_bytes": local,
                      "model_bytes": model_info.parameters * 4}), flush=True)  # fmt: skip
    destroy_distributed()


if __name__ == "__main__":
    main()
