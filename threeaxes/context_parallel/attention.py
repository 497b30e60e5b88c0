"""The toy's attention layer run with context parallelism.

    cp = axis_layout("cp")
    layer = ContextParallelAttention(model.blocks[0].attn, cp, method="ring")
    y = layer(x_local)      # x_local: this rank's tokens, split.split_sequence(x, cp rank, cp)"""
from __future__ import annotations

import torch
import torch.nn as nn

from threeaxes import comms
from threeaxes.context_parallel.ring import ring_attention
from threeaxes.context_parallel.ulysses import ulysses_attention
from threeaxes.extra_axes import AxisLayout
from threeaxes.toy import CausalSelfAttention

__all__ = ["METHODS", "ContextParallelAttention", "all_reduce_grads"]

# the names of threeaxes.cost.context.CP_MODES
METHODS = {"ring": ring_attention, "all_to_all": ulysses_attention}


class ContextParallelAttention(nn.Module):
    """The weights are the toy layer's own, whole on every cp rank (context parallelism
    splits tokens, not weights). Everything outside attention works token by token,
    so it runs on each rank's tokens unchanged; only attention needs the other
    ranks' keys and values. Each rank's weight gradients cover its tokens only:
    summed over the cp ranks (`all_reduce_grads`; Megatron-LM folds cp into the
    data-parallel all-reduce) they equal one process's.
    """
    def __init__(self, attn: CausalSelfAttention, cp: AxisLayout, method: str = "ring", balanced: bool = True) -> None:
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"method={method!r}; choose 'ring' (key/value blocks round the ring) "
                             f"or 'all_to_all' (heads exchanged for sequence, DeepSpeed-Ulysses)")
        self.attn, self.cp, self.method, self.balanced = attn, cp, method, balanced

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, seq/cp, d_model), this rank's tokens
        b, s, _ = x.shape
        a = self.attn
        # (batch, heads, seq/cp, head_dim)
        q, k, v = (f(x).view(b, s, -1, a.head_dim).transpose(1, 2) for f in (a.q, a.k, a.v))
        y = METHODS[self.method](q, k, v, self.cp, self.balanced)
        return a.proj(y.transpose(1, 2).reshape(b, s, -1))   # (batch, seq/cp, d_model)


def all_reduce_grads(module: nn.Module, cp: AxisLayout) -> None:
    """Sum every parameter's gradient over the cp ranks, in place."""
    for p in module.parameters():
        if p.grad is not None:
            comms.all_reduce(p.grad, "cp", dims=cp)   # communication: each rank's tokens' share, summed
