"""FSDP2's memory tracker, with GPU and host told apart on a machine where every fake tensor is on one device.

Under FakeTensorMode on a CPU-only machine every tensor of the step sits on the same fake device, so the
tracker's per-device peak is host plus GPU together. With `fsdp.cpu_offload` the sharded float32 parameters, their
gradients and the optimizer state (and the optimizer's temporaries: the step runs where the state is) live in host
memory and everything else (gathered parameters, activations, gradients before reduce-scatter, collectives'
buffers, the logits chunks) on the GPU. `SplitMemTracker` keeps a running peak of each side itself, after every op,
with the breakdown at the GPU's peak.

Why FSDPMemTracker alone reported an optimizer state many times the sharded parameters: DTensor works out each
op's output layout by running the op on fake tensors of the *global* (unsharded) shape, and under the estimate's
own FakeTensorMode those are allocations the tracker sees and keeps (the layout cache holds them). AdamW's first
step runs every op on every parameter's DTensor for the first time, while the tracker labels everything created
inside `step()` as optimizer state: ~W x the sharded bytes per distinct op (measured here on a 4-layer cut of the
27B model at 24 ranks, first step tracked: OptState 15.7 GiB for 0.63 GiB of shards, and the shards themselves
labelled as activations). So the memory model takes one warm-up step before it tracks (the layouts are cached,
AdamW's state exists, as in every later step), relabels the persistent categories from what the model and the
optimizer hold (`classify_persistent`, `track_grads`), and prints them next to N * 4 / W.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed._tools.common_utils import get_untyped_storages
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPRefType
from torch.distributed._tools.mem_tracker import _TOTAL_KEY
from torch.distributed.tensor import DTensor

HOST_REFTYPES = (_FSDPRefType.SHARDED_PARAM, _FSDPRefType.SHARDED_GRAD, _FSDPRefType.OPT)
"""What `fsdp.cpu_offload` (FSDP2 CPUOffloadPolicy) keeps in host memory."""


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


class SplitMemTracker(FSDPMemTracker):
    def __init__(self, mod: torch.nn.Module, optm: torch.optim.Optimizer | None, *, offload: bool) -> None:
        super().__init__(mod, optm)
        self.offload = offload
        self.gpu_peak = 0
        self.gpu_peak_breakdown: dict[str, int] = {}
        self.host_peak = 0
        self.host_peak_breakdown: dict[str, int] = {}

    def classify_persistent(self) -> None:
        """Relabel the model's sharded parameters and the optimizer's state by what holds them."""
        for p in self._root_mod.parameters():
            self._update_and_maybe_create_winfos(_local(p), _FSDPRefType.SHARDED_PARAM)
        if self._optm is not None:
            for state in self._optm.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        self._update_and_maybe_create_winfos(_local(value), _FSDPRefType.OPT)

    def track_grads(self) -> None:
        """Label the sharded gradients (call once backward is done, before the optimizer step)."""
        for p in self._root_mod.parameters():
            if p.grad is not None:
                self._update_and_maybe_create_winfos(_local(p.grad), _FSDPRefType.SHARDED_GRAD)

    def _update_peak_stats(self, peak_state: Any) -> None:
        super()._update_peak_stats(peak_state)
        for snap in self._curr_mem_snap.values():
            host = sum(snap.get(r, 0) for r in HOST_REFTYPES) if self.offload else 0
            gpu = snap[_TOTAL_KEY] - host
            if gpu > self.gpu_peak:
                self.gpu_peak = gpu
                kept = [(r, v) for r, v in snap.items() if r != _TOTAL_KEY]
                if self.offload:
                    kept = [(r, v) for r, v in kept if r not in HOST_REFTYPES]
                self.gpu_peak_breakdown = {str(getattr(r, "value", r)): v for r, v in kept}
            if host > self.host_peak:
                self.host_peak = host
                self.host_peak_breakdown = {str(r.value): snap.get(r, 0) for r in HOST_REFTYPES}


def storage_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (DTensors by their local shard)."""
    seen: dict[int, int] = {}
    for t in tensors:
        for st in get_untyped_storages(_local(t)):
            seen[id(st)] = st.nbytes()
    return sum(seen.values())
