"""The all-to-all way (DeepSpeed-Ulysses, Jacobs et al. 2023, Section 3): swap the split."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from threeaxes import comms
from threeaxes.context_parallel import online_softmax
from threeaxes.context_parallel.split import sequence_positions
from threeaxes.extra_axes import AxisLayout

__all__ = ["ulysses_attention", "sequence_to_heads", "heads_to_sequence"]


def _seq_to_heads(x: Tensor, cp: AxisLayout) -> Tensor:
    n = cp.size("cp")
    parts = x.unflatten(-3, (n, x.shape[-3] // n)).movedim(-4, 0)   # (cp, ..., heads/cp, seq/cp, d)
    # communication: head group j goes to rank j; from each rank come its tokens of my heads
    got = comms.all_to_all(parts, "cp", dims=cp, dim=0)             # (cp source, ..., heads/cp, seq/cp, d)
    return got.movedim(0, -3).flatten(-3, -2)                        # (..., heads/cp, seq, d)


def _heads_to_seq(y: Tensor, cp: AxisLayout) -> Tensor:
    n = cp.size("cp")
    parts = y.unflatten(-2, (n, y.shape[-2] // n)).movedim(-3, 0)   # (cp, ..., heads/cp, seq/cp, d)
    # communication: rank j's tokens go back to rank j; from each rank come its heads of my tokens
    got = comms.all_to_all(parts, "cp", dims=cp, dim=0)             # (cp head group, ..., heads/cp, seq/cp, d)
    return got.movedim(0, -4).flatten(-4, -3)                        # (..., heads, seq/cp, d)


class _SequenceToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, cp: AxisLayout) -> Tensor:
        ctx.cp = cp
        return _seq_to_heads(x, cp)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _heads_to_seq(grad, ctx.cp), None   # communication: the inverse exchange


class _HeadsToSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: Tensor, cp: AxisLayout) -> Tensor:
        ctx.cp = cp
        return _heads_to_seq(y, cp)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _seq_to_heads(grad, ctx.cp), None   # communication: the inverse exchange


def sequence_to_heads(x: Tensor, cp: AxisLayout) -> Tensor:
    """(..., heads, seq/cp, d) on each rank -> (..., heads/cp, seq, d), the sequence in the order
    of the ranks' parts (rank 0's tokens, then rank 1's, ...). Differentiable."""
    return _SequenceToHeads.apply(x, cp)


def heads_to_sequence(y: Tensor, cp: AxisLayout) -> Tensor:
    """The inverse of `sequence_to_heads`. Differentiable."""
    return _HeadsToSequence.apply(y, cp)


class _CausalAttention(torch.autograd.Function):
    """Causal attention over one block by global positions; saves q, k, v, out and lse (the
    same tensors a ring rank saves), so the two ways' memory compares like for like."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, pos: Tensor) -> Tensor:
        out, lse = online_softmax.finish(online_softmax.add_block(online_softmax.start(q), q, k, v, pos, pos))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.pos = pos
        return out

    @staticmethod
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        q, k, v, out, lse = ctx.saved_tensors
        delta = (d_out * out).sum(dim=-1)
        return (*online_softmax.block_grads(q, k, v, ctx.pos, ctx.pos, lse, d_out, delta), None)


def ulysses_attention(q: Tensor, k: Tensor, v: Tensor, cp: AxisLayout, balanced: bool = True) -> Tensor:
    """Causal attention of this rank's tokens, heads exchanged for sequence and back
    (`cp`: a one-axis layout, `threeaxes.extra_axes.axis_layout("cp")`).

    Each cp rank holds seq/cp tokens of every head. One all-to-all turns that into
    every token of heads/cp heads, so each rank runs ordinary causal attention over
    the whole sequence for its heads; a second all-to-all swaps back. The backward
    runs the same two exchanges the other way round (the all-to-all's gradient is the
    inverse all-to-all). cp must divide the number of heads.

    Per layer and rank: forward, one all-to-all of q, k, v stacked and one of the
    output; backward, the same two mirrored:
    `threeaxes.cost.context.context_parallel_bytes(mode="all_to_all")`.

    Shapes: q, k, v (batch, heads, seq/cp, head_dim), the rank's tokens in the order
    `split.sequence_positions` gives; after the exchange (batch, heads/cp, seq, head_dim).
    """
    n, heads = cp.size("cp"), q.shape[1]
    if heads % n:
        options = "{" + ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0) + "}"
        raise ValueError(f"cp={n} does not divide n_heads={heads}: the all-to-all way gives each "
                         f"rank whole heads; choose cp in {options}, or use ring attention")
    seq_len = q.shape[2] * n
    # the global positions of the gathered sequence: rank 0's tokens, then rank 1's, ...
    pos = torch.cat([sequence_positions(r, n, seq_len, balanced) for r in range(n)])
    qkv = sequence_to_heads(torch.stack([q, k, v]), cp)   # (3, batch, heads/cp, seq, head_dim)
    out = _CausalAttention.apply(qkv[0], qkv[1], qkv[2], pos)
    return heads_to_sequence(out, cp)                     # (batch, heads, seq/cp, head_dim)
