"""Ring attention: each cp rank keeps its queries; the key/value blocks go round the ring."""
from __future__ import annotations

from typing import Any

import torch

from threeaxes import comms
from threeaxes.context_parallel import online_softmax
from threeaxes.context_parallel.split import sequence_positions
from threeaxes.extra_axes import AxisLayout

__all__ = ["ring_attention"]


def _pass_along(block: torch.Tensor, cp: AxisLayout, tag: int) -> torch.Tensor:
    """Send `block` to the next rank on the ring; return the one the previous rank sent."""
    prev, nxt = cp.ring_neighbours()
    got = torch.empty_like(block)
    # communication: post the send to the next rank, then wait for the previous rank's block
    # (every rank posts before it waits, so the ring cannot deadlock)
    work = comms.isend(block, dst=nxt, axis="cp", dims=cp, tag=tag)
    comms.recv(got, src=prev, axis="cp", dims=cp, tag=tag)
    work.wait()
    return got


class _RingAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cp: AxisLayout,
                balanced: bool) -> torch.Tensor:
        me, n = cp.coord("cp"), cp.size("cp")
        seq_len = q.shape[2] * n
        owner_pos = [sequence_positions(r, n, seq_len, balanced) for r in range(n)]
        state = online_softmax.start(q)
        kv = torch.stack([k, v])                 # (2, batch, heads, seq/cp, head_dim)
        for step in range(n):
            owner = (me - step) % n              # whose block this rank holds now (its own first)
            state = online_softmax.add_block(state, q, kv[0], kv[1], owner_pos[me], owner_pos[owner])
            if step < n - 1:
                kv = _pass_along(kv, cp, tag=1)  # communication: next block round the ring
        out, lse = online_softmax.finish(state)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cp, ctx.owner_pos = cp, owner_pos
        return out

    @staticmethod
    def backward(ctx: Any, d_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None, None]:
        q, k, v, out, lse = ctx.saved_tensors
        cp, owner_pos = ctx.cp, ctx.owner_pos
        me, n = cp.coord("cp"), cp.size("cp")
        delta = (d_out * out).sum(dim=-1)       # rowsum(dO * O), (batch, heads, seq/cp)
        dq = torch.zeros_like(q)
        kv = torch.stack([k, v])
        d_kv_in = None                           # a block's gradient so far, from the previous rank
        for step in range(n):
            owner = (me - step) % n              # whose block this rank holds now (its own first)
            dq_b, dk_b, dv_b = online_softmax.block_grads(
                q, kv[0], kv[1], owner_pos[me], owner_pos[owner], lse, d_out, delta)
            dq += dq_b
            share = torch.stack([dk_b, dv_b])
            if step == 0:
                own = share                      # this rank's share of its own block's gradient
            else:
                # the block's gradient gathers one share per rank; it started on the rank after
                # its owner, and this rank passes it on, so after the last step it reaches home
                total = share if d_kv_in is None else d_kv_in + share
                d_kv_in = _pass_along(total, cp, tag=2)   # communication: the gradient follows its block
            if step < n - 1:
                kv = _pass_along(kv, cp, tag=1)  # communication: the next block, as in the forward
        # what came in last is every other rank's share of this rank's own block
        d_kv = own if d_kv_in is None else own + d_kv_in
        return dq, d_kv[0], d_kv[1], None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cp: AxisLayout,
                   balanced: bool = True) -> torch.Tensor:
    """Causal attention of this rank's queries over the whole sequence, the key/value blocks
    passed round the cp ring (`cp`: a one-axis layout, `threeaxes.extra_axes.axis_layout("cp")`).
    `balanced` says which split the ranks hold (`split.sequence_positions`).

    At step t rank i holds the key/value block of rank (i - t) mod cp: it folds that
    block into its queries' online softmax (`online_softmax.add_block`), then passes
    the block to the next rank and takes the previous rank's. After cp steps every
    query has seen every key, and the result is exact (Liu et al. 2023, "Ring
    Attention with Blockwise Transformers", Section 3; Brandon et al. 2023 and
    Megatron-LM's context parallelism run the same ring with the causal mask).

    The backward is written out (an explicit autograd Function, not autograd through
    the sends, not recomputation of the forward's ring): it sends the key/value
    blocks round the ring again, and each block's gradient (dk, dv) follows it one
    rank behind, collecting every other rank's share; its last hop takes it home to
    the rank that owns the block, which adds its own share (the FlashAttention
    backward per block, Dao et al. 2022, Algorithm 2, from the lse the forward saved).

    Messages per rank (each one rank's k and v, stacked: 2 * batch * seq/cp * d_model
    numbers): forward cp - 1; backward cp - 1 key/value blocks and cp - 1 gradient
    blocks: `threeaxes.cost.context.context_parallel_bytes(mode="ring")`.

    Shapes: q, k, v (batch, heads, seq/cp, head_dim), the rank's tokens in the order
    `split.sequence_positions` gives.
    """
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError(f"q, k, v must share one shape (batch, heads, seq/cp, head_dim); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    return _RingAttention.apply(q, k, v, cp, balanced)
