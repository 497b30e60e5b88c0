"""Attention over key/value blocks one at a time: the online softmax."""
from __future__ import annotations

import math

import torch
from torch import Tensor

# (running max m, running sum l, unnormalised output o) of the queries seen so far
State = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

__all__ = ["causal_scores", "start", "add_block", "finish", "block_grads"]


def causal_scores(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """Scaled scores q k^T / sqrt(d), -inf where the key comes after the query."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])   # (batch, heads, s_q, s_k)
    future = k_pos.view(1, -1) > q_pos.view(-1, 1)
    return s.masked_fill(future, float("-inf"))


def start(q: torch.Tensor) -> State:
    """Empty running state (m, l, o) for the queries q."""
    b, h, s, d = q.shape
    return (q.new_full((b, h, s, 1), float("-inf")), q.new_zeros((b, h, s, 1)), torch.zeros_like(q))


def add_block(state: State, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor,
              k_pos: torch.Tensor) -> State:
    """Fold one key/value block into the running state. The first block a row sees must
    hold at least one key it may attend to (a rank starts with its own block: the diagonal).

    Softmax over a row of scores needs the row's maximum and its sum of
    exponentials. Blocks arriving one by one can still give the exact result if
    each row keeps a running maximum m, a running sum l and an unnormalised output
    o, rescaled whenever a block raises the maximum (Milakov and Gimelshein 2018;
    FlashAttention, Dao et al. 2022, Algorithm 1; ring attention, Liu et al. 2023):

        m_new = max(m, rowmax(S));   l <- l * exp(m - m_new) + rowsum(exp(S - m_new))
        o <- o * exp(m - m_new) + exp(S - m_new) @ V

    At the end out = o / l, and the log-sum-exp lse = m + log l is all the backward
    needs to rebuild any block's probabilities P = exp(S - lse) (Dao et al. 2022,
    Algorithm 2 / Appendix B.4). The causal mask is by global positions, so it
    holds for any split of the sequence.

    Shapes: q (batch, heads, s_q, head_dim), k and v (batch, heads, s_k, head_dim),
    positions 1-D (s_q,) and (s_k,).
    """
    m, l, o = state
    s = causal_scores(q, k, q_pos, k_pos)
    m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
    rescale = torch.exp(m - m_new)                       # 0 on the first block (m = -inf)
    p = torch.exp(s - m_new)                             # 0 where masked
    return m_new, l * rescale + p.sum(dim=-1, keepdim=True), o * rescale + p @ v


def finish(state: State) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse): the normalised output and the log-sum-exp of each query's scores."""
    m, l, o = state
    return o / l, (m + torch.log(l)).squeeze(-1)


def block_grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                lse: torch.Tensor, d_out: torch.Tensor, delta: torch.Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One block's share of the gradients (Dao et al. 2022, Algorithm 2): (dq, dk, dv),
    given the final lse and delta = rowsum(d_out * out)."""
    p = torch.exp(causal_scores(q, k, q_pos, k_pos) - lse.unsqueeze(-1))   # exact probabilities
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    ds = p * (dp - delta.unsqueeze(-1)) / math.sqrt(q.shape[-1])
    return ds @ k, ds.transpose(-2, -1) @ q, dv
