"""Real values for the small data tensors of a step run under FakeTensorMode, so the step's control flow runs.

Fake tensors carry shapes, not values, so the learner's step stops at the first value it reads: the token count
it checks against the batch (`float(mask.sum())`), the boolean mask of scored positions (`logits_to_keep`, whose
selection has a data-dependent length), `attention_mask.all()` in the mask code. `ShadowValues` keeps a real copy
next to every fake tensor built from data (torch.tensor, factories) while it stays small, computes each op on those
copies when all its tensor inputs have one, and answers `.item()` and data-dependent shapes from them. Tensors
derived from the weights have no copy: reading one of their values gives 0 (the loss and the gradient norm of a
fake step: finite, so the step goes on to the optimizer).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakTensorKeyDictionary

SHADOW_NUMEL_LIMIT = 1 << 24
"""Largest tensor (elements) given a real copy: batch tensors of a 256k-token episode fit; weights never do."""

_aten = torch.ops.aten
_FACTORIES = {
    _aten.arange.default,
    _aten.arange.start,
    _aten.arange.start_step,
    _aten.full.default,
    _aten.zeros.default,
    _aten.ones.default,
    _aten.scalar_tensor.default,
}
"""Factories whose values are defined (not torch.empty): their small outputs get a copy."""
_INDEXING = {
    _aten.index.Tensor,
    _aten.index_put.default,
    _aten.index_put_.default,
    _aten._index_put_impl_.default,
    _aten._unsafe_index.Tensor,
}
"""Ops taking a list of indices: a boolean mask there has a data-dependent count of True, read from its copy."""
_LIFTS = {_aten.lift_fresh.default, _aten.lift_fresh_copy.default}


def _factory_numel(func: Any, args: Any) -> float:
    if func is _aten.scalar_tensor.default:
        return 1
    if func in (_aten.arange.default, _aten.arange.start, _aten.arange.start_step):
        numbers = [float(a) for a in args if isinstance(a, (int, float))]
        start, end, step = (0.0, numbers[0], 1.0) if len(numbers) == 1 else (*numbers[:2], *(numbers[2:] or [1.0]))
        return abs((end - start) / step) if step else math.inf
    return math.prod(args[0]) if args and isinstance(args[0], (list, tuple)) else math.inf


class ShadowValues(TorchDispatchMode):
    """Enter inside (after) a FakeTensorMode; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.real = WeakTensorKeyDictionary()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented  # DTensor runs its local ops, which come back here
        if func is _aten._pin_memory.default:
            # Fake tensors have no pinned kind (NYI in FakeTensorMode); the pinned copy is a same-sized tensor.
            return torch.empty_like(args[0])
        if func is _aten.is_pinned.default:
            return False
        if func is _aten._local_scalar_dense.default:
            shadow = self.real.get(args[0])
            if shadow is not None:
                with _disable_current_modes():
                    return shadow.item()
            return False if args[0].dtype == torch.bool else 0
        if func in _LIFTS:
            out = func(*args, **kwargs)
            with _disable_current_modes():
                self._remember(out, args[0].clone())
            return out
        namespace = getattr(func, "namespace", "")
        if namespace in ("c10d", "_c10d_functional", "c10d_functional", "_dtensor"):
            # The fake process group moves nothing: every rank's value stays its own, which is the sum when only
            # this rank holds data (the memory model gives rank 0 the whole batch, other ranks fillers).
            return func(*args, **kwargs)
        if func in _INDEXING and any(self._is_known_mask(i) for i in args[1]):
            args = (args[0], self._long_indices(args[1]), *args[2:])
        flat, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        shadows = [self.real.get(t) for t in tensors]
        if func in _FACTORIES:
            computable = _factory_numel(func, args) <= SHADOW_NUMEL_LIMIT
        else:
            computable = bool(tensors) and all(s is not None for s in shadows)
            computable = computable and all(t.numel() <= SHADOW_NUMEL_LIMIT for t in tensors)
        if not computable:
            self._forget_written(func, args, kwargs)
            return func(*args, **kwargs)
        real_args, real_kwargs = tree_map(self._real_of, (args, kwargs))
        with _disable_current_modes():
            real_out = func(*real_args, **real_kwargs)
        try:
            out = func(*args, **kwargs)
        except (DynamicOutputShapeException, DataDependentOutputException):
            out = tree_map(self._fake_like, real_out)
        for fake, real in zip(tree_flatten(out)[0], tree_flatten(real_out)[0]):
            if isinstance(fake, torch.Tensor) and isinstance(real, torch.Tensor) and real.numel() <= SHADOW_NUMEL_LIMIT:
                self._remember(fake, real)
        return out

    def _is_known_mask(self, index: Any) -> bool:
        return isinstance(index, torch.Tensor) and index.dtype == torch.bool and index in self.real

    def _long_indices(self, indices: Any) -> list[Any]:
        """A boolean mask over k dims is the k index tensors of its True positions (what aten does itself)."""
        out: list[Any] = []
        for index in indices:
            if not self._is_known_mask(index):
                out.append(index)
                continue
            with _disable_current_modes():
                positions = self.real[index].nonzero()
            for column in positions.unbind(1):
                fake = self._fake_like(column)
                self._remember(fake, column.contiguous())
                out.append(fake)
        return out

    def _remember(self, fake: torch.Tensor, real: torch.Tensor) -> None:
        if real.device.type == "meta" or real.numel() > SHADOW_NUMEL_LIMIT:
            return
        self.real[fake] = real

    def _real_of(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            shadow = self.real.get(value)
            return shadow if shadow is not None else value
        return value

    def _fake_like(self, real: Any) -> Any:
        if not isinstance(real, torch.Tensor):
            return real
        # Called inside this mode's handler, so the factory reaches the FakeTensorMode beneath.
        return torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=real.device)

    def _forget_written(self, func: Any, args: Any, kwargs: Any) -> None:
        """An op this mode cannot follow that writes into a tensor with a copy makes that copy stale."""
        schema = getattr(func, "_schema", None)
        if schema is None:
            return
        for i, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = args[i] if i < len(args) else kwargs.get(argument.name)
            if isinstance(value, torch.Tensor) and value in self.real:
                del self.real[value]


@contextlib.contextmanager
def eager_transformers() -> Iterator[None]:
    """transformers takes a fake tensor for tracing and then takes tracing's paths: it never skips the causal mask
    (sdpa `is_causal`) and materialises a [1, 1, S, S] mask, 34 GB at 106k tokens, that an eager GPU run does not.
    Here fake tensors count as eager ones, so the fake step takes the path the real one takes."""
    from transformers.utils import import_utils

    original = import_utils.is_fake_tensor
    import_utils.is_fake_tensor = lambda x: False
    try:
        yield
    finally:
        import_utils.is_fake_tensor = original
