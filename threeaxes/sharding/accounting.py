"""What one rank actually holds: bytes of parameters, gradients and optimizer state."""
from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch

from threeaxes.sharding.fsdp import units_of
from threeaxes.sharding.zero1 import ZeroOptimizer

__all__ = ["HeldBytes", "held_bytes"]


class HeldBytes(NamedTuple):
    """Counted from the tensors themselves, one storage counted once (a parameter
    that is a view into a flat buffer counts the whole buffer once, padding
    included), so the numbers are what the rank's memory holds, to set beside
    `threeaxes.cost.memory.model_state_bytes`.

    ZeRO-3 also holds whole parameters for a while: `fsdp.GATHERED` follows the
    bytes of gathered flat buffers alive at each moment and their peak.
    """
    params: int
    grads: int
    optimizer: int
    total: int


def _storage_bytes(tensors: Iterable[torch.Tensor | None], seen: set) -> int:
    total = 0
    for t in tensors:
        if t is None:
            continue
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if storage.nbytes() == 0 or key in seen:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for v in state.values()
            if isinstance(v, torch.Tensor)]


def held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> HeldBytes:
    """Bytes this rank holds for `model`'s parameters and gradients and `optimizer`'s state.

    Parameters: the model's parameters (under `fully_shard`, its flat shards,
    plus any gathered buffer still alive). Gradients: their `.grad`, and for a
    `ZeroOptimizer` the gradient of each bucket's shard. Optimizer: every tensor
    in the (inner) optimizer's state, Adam's step counters included.
    """
    seen: set = set()
    params: list[torch.Tensor] = list(model.parameters())
    gathered = [u.gathered for u in units_of(model) if u.gathered is not None]
    param_bytes = _storage_bytes(params + gathered, seen)
    grads = [p.grad for p in params]
    inner = optimizer
    if isinstance(optimizer, ZeroOptimizer):
        grads += [b.shard.grad for b in optimizer.buckets]
        inner = optimizer.optim
    grad_bytes = _storage_bytes(grads, seen)
    optimizer_bytes = _storage_bytes(_state_tensors(inner), seen) if inner is not None else 0
    return HeldBytes(param_bytes, grad_bytes, optimizer_bytes,
                     param_bytes + grad_bytes + optimizer_bytes)
