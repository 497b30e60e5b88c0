"""Context parallelism: the sequence split over cp ranks, its bytes, time and rules."""
from __future__ import annotations

from typing import NamedTuple

from .network import Link, all_gather_time, all_to_all_time, p2p_time, reduce_scatter_time

__all__ = ["CP_MODES", "ContextBytes", "context_parallel_bytes", "context_parallel_time",
           "context_violations"]

CP_MODES = ("ring", "all_gather", "all_to_all")


class ContextBytes(NamedTuple):
    """Bytes one rank sends for one layer and one micro-batch under context parallelism."""
    forward: float
    backward: float
    total: float


def _positive(name: str, value: float) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def _mode(mode: str) -> str:
    if mode not in CP_MODES:
        raise ValueError(f"cp_mode={mode!r}; choose cp_mode in {set(CP_MODES)}")
    return mode


def context_parallel_bytes(seq_len: int, micro_batch: int, d_model: int, cp: int, *,
                           mode: str = "ring", kv_width: int | None = None,
                           dtype_bytes: float = 2) -> ContextBytes:
    """Bytes one of the cp ranks sends for one attention layer and one micro-batch.

    ``kv_width``: the width of K (and of V), d_model * n_kv_heads / n_heads
    under grouped-query attention (default d_model). With b = micro_batch,
    s = seq_len, h = d_model, k = kv_width, c = cp, d = dtype_bytes, one
    rank's key/value block is 2 b (s/c) k d bytes:

    - ring (Liu et al. 2023, Section 3): forward, its block and c - 2 others
      passed on, c - 1 sends: (c - 1) 2 b (s/c) k d; backward twice that (the
      blocks go round again with their gradients).
    - all_gather (Dubey et al. 2024, Section 3.3.2): the all-gather of K and V,
      (c - 1)/c of 2 b s k d, which is the ring's forward; backward the same
      bytes in the reduce-scatter of their gradients.
    - all_to_all (Jacobs et al. 2023, Section 3.1): forward, all-to-alls of Q,
      K, V and the output, a rank's b (s/c)(2h + 2k) d bytes of which (c - 1)/c
      leave it; backward the same on the gradients.

    With cp = 1 nothing is sent.

    Each of the cp ranks holds s/cp of every sequence's tokens, so everything a
    layer keeps per token (activations) and does per token (the linear layers)
    is divided by cp. Attention is the one place a token needs the others: its
    query must meet every earlier key and value. Three ways to bring them:

    - ``"ring"``: ring attention (Liu et al. 2023, "Ring Attention with
      Blockwise Transformers", Section 3; Megatron-LM's context parallelism on
      Transformer Engine). Each rank keeps its queries and passes its key/value
      block to the next rank cp - 1 times, computing attention on the block it
      holds while the next one travels (online softmax adds the blocks up). The
      backward pass sends the key/value blocks round again, and their gradients
      with them: twice the forward bytes. The sends hide behind the block's
      attention when the block takes longer to compute than to send.
    - ``"all_gather"``: Llama 3's way (Dubey et al. 2024, Section 3.3.2): all-gather
      the keys and values, attend with the local queries; the backward pass
      reduce-scatters their gradients. The same bytes as one pass of the ring,
      not overlapped (the paper finds the exposed time small with grouped-query
      attention's few key/value heads).
    - ``"all_to_all"``: DeepSpeed-Ulysses (Jacobs et al. 2023, Section 3.1). An
      all-to-all trades the sequence split for a head split before attention (Q,
      K and V) and back after it (the output), so each rank attends over the whole
      sequence for 1/cp of the heads; the backward pass runs the same four
      all-to-alls on the gradients. Each all-to-all sends (cp - 1)/cp of the
      rank's tensor (``network.all_to_all_time``).

    The load-balanced causal split (Megatron-LM's context parallelism; Llama 3,
    Section 3.3.2) cuts the sequence into 2 cp chunks and gives rank i chunks i
    and 2cp - 1 - i, so every rank does the same causal work: s must divide by
    2 cp. Ulysses needs whole heads on every rank: cp divides the heads each
    tensor-parallel rank holds (query and key/value heads).
    """
    s, b, h = _positive("seq_len", seq_len), _positive("micro_batch", micro_batch), \
        _positive("d_model", d_model)
    c = _positive("cp", cp)
    k = h if kv_width is None else _positive("kv_width", kv_width)
    _mode(mode)
    if s % c:
        raise ValueError(f"cp={c} does not divide seq_len={s}; choose cp dividing the sequence")
    if c == 1:
        return ContextBytes(0.0, 0.0, 0.0)
    block = 2 * b * (s / c) * k * dtype_bytes           # this rank's K and V
    if mode == "ring":
        # communication: c - 1 sends of a K/V block to the next rank forward,
        # the blocks and their gradients round again backward
        forward = (c - 1) * block
        backward = 2 * forward
    elif mode == "all_gather":
        # communication: all-gather K, V forward; reduce-scatter dK, dV backward
        forward = (c - 1) * block
        backward = forward
    else:
        # communication: all-to-all Q, K, V (sequence -> heads) and the output back
        forward = (c - 1) / c * b * (s / c) * (2 * h + 2 * k) * dtype_bytes
        backward = forward
    return ContextBytes(forward, backward, forward + backward)


def context_parallel_time(seq_len: int, micro_batch: int, d_model: int, cp: int, link: Link, *,
                          mode: str = "ring", kv_width: int | None = None,
                          dtype_bytes: float = 2, attention_seconds: float = 0.0) -> float:
    """Seconds of context-parallel communication on the critical path for one layer
    and one micro-batch, forward and backward, over ``link`` (``network.Link``).

    ``attention_seconds``: this rank's attention compute for the layer, forward
    plus backward. The ring overlaps each send with the attention on the block
    already there (Liu et al. 2023, Section 3): only what the attention cannot
    cover shows, max(0, sends - attention). The all-gather and all-to-all wait
    for their data: all of it shows.
    """
    c = _positive("cp", cp)
    if c == 1:
        return 0.0
    mode = _mode(mode)
    b = context_parallel_bytes(seq_len, micro_batch, d_model, c, mode=mode, kv_width=kv_width,
                               dtype_bytes=dtype_bytes)
    bw, lat = link.bandwidth, link.latency
    if mode == "ring":
        block = b.forward / (c - 1)
        # communication: 3 (c - 1) block sends, c - 1 forward and 2 (c - 1) backward
        sends = 3 * (c - 1) * p2p_time(block, bw, lat).total
        return max(0.0, sends - attention_seconds)
    if mode == "all_gather":
        whole = b.forward * c / (c - 1)               # K and V of the whole sequence
        return (all_gather_time(whole, c, bw, lat).total
                + reduce_scatter_time(whole, c, bw, lat).total)
    # four all-to-alls forward (Q, K, V, output) and four backward, each of the
    # rank's own tensor: b (s/c) h d for Q and the output, b (s/c) k d for K and V
    k = d_model if kv_width is None else kv_width
    tokens = micro_batch * seq_len / c
    per_pass = sum(all_to_all_time(tokens * w * dtype_bytes, c, bw, lat).total
                   for w in (d_model, k, k, d_model))
    return 2 * per_pass


def context_violations(n_heads: int, kv_heads: int, seq_len: int, *, cp: int, tp: int = 1,
                       mode: str = "ring") -> list:
    """What is wrong with splitting the sequence over ``cp`` ranks, as (rule, message)
    pairs ([] when nothing is).

    - "cp_mode": the mode is one of ``CP_MODES``.
    - "cp_seq": ring and all-gather cut the sequence into 2 cp chunks for the
      load-balanced causal split (Megatron-LM; Dubey et al. 2024, Section 3.3.2):
      s divisible by 2 cp; all-to-all needs s divisible by cp.
    - "cp_heads": all-to-all gives each rank whole heads of what its tensor-
      parallel rank holds (Jacobs et al. 2023, Section 3.1): cp divides n_heads/tp
      and n_kv_heads/tp.
    """
    c, t = _positive("cp", cp), _positive("tp", tp)
    if mode not in CP_MODES:
        return [("cp_mode", f"cp_mode={mode!r}; choose cp_mode in {set(CP_MODES)}")]
    if c == 1:
        return []
    found = []
    chunks = c if mode == "all_to_all" else 2 * c
    if seq_len % chunks:
        why = ("" if mode == "all_to_all" else
               " (the load-balanced causal split cuts it into 2*cp chunks)")
        good = [d for d in range(2, seq_len + 1) if seq_len % (d if mode == "all_to_all" else 2 * d) == 0][:6]
        found.append(("cp_seq", f"cp={c} with cp_mode={mode!r} needs seq_len={seq_len} divisible "
                                f"by {chunks}{why}; choose cp in {{{', '.join(map(str, [1] + good))}, ...}}"))
    if mode == "all_to_all":
        q, kv = n_heads // t, kv_heads // t
        if q % c or kv % c:
            found.append(("cp_heads", f"cp={c} with cp_mode='all_to_all' gives each rank whole heads, "
                                      f"but each tp rank holds {q} query and {kv} key/value heads "
                                      f"(tp={t}); choose cp dividing {kv} or cp_mode='ring'"))
    return found
