"""Ring attention: each cp rank keeps its queries; the key/value blocks go round the ring.

At step t rank i holds the key/value block of rank (i - t) mod cp: it folds that
block into its queries' online softmax (`online_softmax.add_block`), then passes
the block to the next rank and takes the previous rank's. After cp steps every
query has seen every key, and the result is exact (Liu et al. 2023, "Ring
Attention with Blockwise Transformers", Section 3; Brandon et al. 2023 and
Megatron-LM's context parallelism run the same ring with the causal mask).

The backward is written out (an explicit autograd Function, not autograd through
the sends, not recomputation of the forward's ring): it sends the key/value
blocks round the ring again, and each block's gradient (dk, dv) travels with it,
collecting every rank's share; after cp hops that gradient is back with the rank
that owns the block (the FlashAttention backward per block, Dao et al. 2022,
Algorithm 2, from the lse the forward saved).

Messages per rank (each one rank's k and v, stacked: 2 * batch * seq/cp * d_model
numbers): forward cp - 1; backward cp - 1 key/value blocks and cp gradient blocks.
`threeaxes.context_parallel.predict.ring_bytes_sent` counts them.

Shapes: q, k, v (batch, heads, seq/cp, head_dim), the rank's tokens in the order
`split.sequence_positions` gives.
"""
from __future__ import annotations

import torch

from threeaxes import comms
from threeaxes.context_parallel import online_softmax
from threeaxes.context_parallel.split import sequence_positions

__all__ = ["ring_attention"]


def _pass_along(block, cp):
    """Send `block` to the next rank on the ring; return the one the previous rank sent."""
    prev, nxt = cp.ring_neighbours()
    got = torch.empty_like(block)
    # communication: post the send to the next rank, then wait for the previous rank's block
    # (every rank posts before it waits, so the ring cannot deadlock)
    work = comms.isend(block, dst=nxt, axis="cp", dims=cp)
    comms.recv(got, src=prev, axis="cp", dims=cp)
    work.wait()
    return got


class _RingAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, cp, balanced):
        me, n = cp.coord("cp"), cp.size("cp")
        seq_len = q.shape[2] * n
        owner_pos = [sequence_positions(r, n, seq_len, balanced) for r in range(n)]
        state = online_softmax.start(q)
        kv = torch.stack([k, v])                 # (2, batch, heads, seq/cp, head_dim)
        for step in range(n):
            owner = (me - step) % n              # whose block this rank holds now (its own first)
            state = online_softmax.add_block(state, q, kv[0], kv[1], owner_pos[me], owner_pos[owner])
            if step < n - 1:
                kv = _pass_along(kv, cp)         # communication: next block round the ring
        out, lse = online_softmax.finish(state)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cp, ctx.owner_pos = cp, owner_pos
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        cp, owner_pos = ctx.cp, ctx.owner_pos
        me, n = cp.coord("cp"), cp.size("cp")
        delta = (d_out * out).sum(dim=-1)       # rowsum(dO * O), (batch, heads, seq/cp)
        dq = torch.zeros_like(q)
        kv = torch.stack([k, v])
        d_kv = torch.zeros_like(kv)              # the gradient of the block this rank holds now
        for step in range(n):
            owner = (me - step) % n
            dq_b, dk_b, dv_b = online_softmax.block_grads(
                q, kv[0], kv[1], owner_pos[me], owner_pos[owner], lse, d_out, delta)
            dq += dq_b
            d_kv = d_kv + torch.stack([dk_b, dv_b])
            if step < n - 1:
                kv = _pass_along(kv, cp)         # communication: the next block, as in the forward
            if n > 1:
                d_kv = _pass_along(d_kv, cp)     # communication: the block's gradient follows it
        # after n hops the gradient this rank holds is that of its own block
        return dq, d_kv[0], d_kv[1], None, None


def ring_attention(q, k, v, cp, balanced: bool = True):
    """Causal attention of this rank's queries over the whole sequence, the key/value blocks
    passed round the cp ring (`cp`: a one-axis layout, `threeaxes.extra_axes.axis_layout("cp")`).
    `balanced` says which split the ranks hold (`split.sequence_positions`)."""
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError(f"q, k, v must share one shape (batch, heads, seq/cp, head_dim); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    return _RingAttention.apply(q, k, v, cp, balanced)
